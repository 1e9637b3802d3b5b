package cove

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/cove-dev/cove/api"
)

// fileServer serves body for every download with the Repr-Digest of
// announced, and records the trailer digest of an upload.
func fileServer(t *testing.T, body, announced []byte, gotTrailer *string) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			io.Copy(io.Discard, r.Body)
			*gotTrailer = r.Trailer.Get("Repr-Digest")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"name":"f","path":"/f","type":"file","size":3,"mode":"0644","version":"v1"}`)
			return
		}
		sum := sha256.Sum256(announced)
		w.Header().Set("Repr-Digest", api.FormatReprDigest(sum[:]))
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL, "k")
}

func TestDownloadChecksDigest(t *testing.T) {
	for _, tt := range []struct {
		name            string
		body, announced []byte
		wantErr         error
	}{
		{"matching", []byte("hello"), []byte("hello"), nil},
		{"mismatch", []byte("hellO"), []byte("hello"), ErrDigestMismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fileServer(t, tt.body, tt.announced, nil)
			var buf bytes.Buffer
			f, err := c.DownloadFile(t.Context(), "sb", "/f", &buf)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("DownloadFile: %v, want %v", err, tt.wantErr)
			}
			if err == nil && (f.Version != "v1" || buf.String() != string(tt.body)) {
				t.Errorf("got %q version %q", buf.String(), f.Version)
			}
		})
	}
}

func TestUploadSendsDigestTrailer(t *testing.T) {
	var got string
	c := fileServer(t, nil, nil, &got)
	if _, err := c.WriteFile(t.Context(), "sb", "/f", bytes.NewReader([]byte("abc"))); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("abc"))
	if got != api.FormatReprDigest(sum[:]) {
		t.Errorf("trailer %q, want the sha-256 of the body", got)
	}
}
