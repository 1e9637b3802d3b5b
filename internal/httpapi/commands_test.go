package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

func TestAppendOutputRecordMatchesJSON(t *testing.T) {
	tests := []node.Chunk{
		{Seq: 1, Stream: "stdout", Data: []byte("hello\n")},
		{Seq: 1 << 40, Stream: "stderr", Data: []byte{0, 0xff, '"', '\\', '\n', 0x80}},
		{Seq: 7, Truncated: true},
	}
	for _, ch := range tests {
		want := api.OutputRecord{Seq: ch.Seq, Stream: ch.Stream, Data: ch.Data}
		if ch.Truncated {
			want = api.OutputRecord{Seq: ch.Seq, Type: "truncated"}
		}
		wantLine, _ := json.Marshal(want)
		got := appendOutputRecord(nil, ch)
		if string(got) != string(wantLine)+"\n" {
			t.Errorf("chunk %+v:\n got %s\nwant %s", ch, got, wantLine)
		}
		var back api.OutputRecord
		if err := json.Unmarshal(got, &back); err != nil || back.Seq != ch.Seq || string(back.Data) != string(ch.Data) {
			t.Errorf("chunk %+v does not round-trip: %+v %v", ch, back, err)
		}
	}
}
