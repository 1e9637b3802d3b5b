package httpapi

import (
	"encoding/json"
	"math/rand/v2"
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
	// Every length around the SIMD encoder's blocks, and a large chunk:
	// the bytes are what encoding/json writes.
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, n := range append([]int{1, 2, 3, 11, 12, 13, 23, 24, 25, 47, 48, 49, 95, 96, 97, 1000, 32 << 10, 32<<10 + 1}, rnd.IntN(1<<20)) {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rnd.Uint32())
		}
		tests = append(tests, node.Chunk{Seq: int64(n) + 10, Stream: "stdout", Data: data})
	}
	for _, ch := range tests {
		want := api.OutputRecord{Seq: ch.Seq, Stream: ch.Stream, Data: ch.Data}
		if ch.Truncated {
			want = api.OutputRecord{Seq: ch.Seq, Type: "truncated"}
		}
		wantLine, _ := json.Marshal(want)
		got := appendOutputRecord(nil, ch)
		if string(got) != string(wantLine)+"\n" {
			t.Errorf("chunk %d of %d bytes:\n got %.200s\nwant %.200s", ch.Seq, len(ch.Data), got, wantLine)
		}
		var back api.OutputRecord
		if err := json.Unmarshal(got, &back); err != nil || back.Seq != ch.Seq || string(back.Data) != string(ch.Data) {
			t.Errorf("chunk %d of %d bytes does not round-trip: %v", ch.Seq, len(ch.Data), err)
		}
	}
}
