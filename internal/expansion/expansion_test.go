package expansion

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"io"
	"testing"

	"github.com/cove-dev/cove/api"
)

func gz(t *testing.T, plain []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(plain)
	zw.Close()
	return buf.Bytes()
}

func TestReader(t *testing.T) {
	random := make([]byte, 2*Floor)
	rand.Read(random)
	for _, tc := range []struct {
		name  string
		plain []byte
		bomb  bool
	}{
		{"regular bytes under the floor", make([]byte, Floor), false},
		{"incompressible past the floor", random, false},
		{"regular bytes past the floor", make([]byte, Floor+Floor/2), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Counter{R: bytes.NewReader(gz(t, tc.plain))}
			zr, err := gzip.NewReader(c)
			if err != nil {
				t.Fatal(err)
			}
			x := NewReader(zr, func() int64 { return c.N }, "the archive")
			n, err := io.Copy(io.Discard, x)
			if tc.bomb {
				if api.ErrorCode(err) != api.CodePayloadTooLarge || x.Err() == nil {
					t.Fatalf("read %d bytes, %v; want payload_too_large", n, err)
				}
				return
			}
			if err != nil || n != int64(len(tc.plain)) {
				t.Fatalf("read %d of %d bytes, %v", n, len(tc.plain), err)
			}
		})
	}
}
