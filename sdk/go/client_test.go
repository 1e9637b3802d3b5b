package cove

import (
	"encoding/json"
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
}
