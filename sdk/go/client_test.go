package cove

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
)

func TestDecodeOutputRecord(t *testing.T) {
	code := 3
	tests := []api.OutputRecord{
		{Seq: 1, Stream: "stdout", Data: []byte("hello\n")},
		{Seq: 99, Stream: "stderr", Data: []byte{0, 0xff, '"'}},
		{Seq: 5, Type: "truncated"},
		{Seq: 6, Type: "exit", ExitCode: &code, Signal: "KILL", TimedOut: true},
	}
	// Lengths around the SIMD decoder's blocks, and a large chunk.
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 31, 32, 33, 63, 64, 65, 1000, 32 << 10, 32<<10 + 2, 700001} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rnd.Uint32())
		}
		tests = append(tests, api.OutputRecord{Seq: int64(n), Stream: "stdout", Data: data})
	}
	for _, want := range tests {
		line, _ := json.Marshal(want)
		got, err := decodeOutputRecord(line)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", line, diff)
		}
	}
	// A line the fast path cannot take still decodes, and garbage fails.
	got, err := decodeOutputRecord([]byte(`{"seq":2,"stream":"stdout","data":"aGk=","extra":1}`))
	if err != nil || string(got.Data) != "hi" {
		t.Errorf("slow path: %+v %v", got, err)
	}
	if _, err := decodeOutputRecord([]byte(`{"seq":`)); err == nil {
		t.Error("a broken line decoded")
	}
	// A character outside the alphabet deep in a long chunk fails the line.
	long, _ := json.Marshal(api.OutputRecord{Seq: 8, Stream: "stdout", Data: make([]byte, 3000)})
	bad := bytes.Replace(long, []byte("AAAA"), []byte("AA*A"), 1)
	if _, err := decodeOutputRecord(bad); err == nil {
		t.Error("a chunk with a character outside base64's alphabet decoded")
	}
}
