package output

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// recorded is one record as written: its seq, stream and bytes.
type recorded struct {
	seq  int64
	kind byte
	data []byte
}

// transcript is output as a reader sees it, byte by byte: each byte's
// stream, and the bytes.
type transcript struct {
	kinds []byte
	data  []byte
}

func (tr *transcript) add(kind byte, b []byte) {
	tr.kinds = append(tr.kinds, bytes.Repeat([]byte{kind}, len(b))...)
	tr.data = append(tr.data, b...)
}

// TestRecordedRecordsReadAsLargerChunks records many small frames on both
// streams (with inserts and skips between), then reads from every point a
// client may resume at: what is already recorded comes in fewer chunks
// than records, none over MaxChunk, each named by a recorded seq of its
// own stream, and the bytes after any point are those recorded after it,
// in order, each once.
func TestRecordedRecordsReadAsLargerChunks(t *testing.T) {
	l, err := Open(logPath(t), 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []recorded
	agentSeq := int64(0)
	kind := byte(wire.FrameStdout)
	for i := range 250 {
		if rng.IntN(16) == 0 {
			kind = 3 - kind // the other stream
		}
		switch {
		case i%37 == 5: // a frame the node held all of: a skip
			agentSeq++
			if err := l.Append(wire.Frame{Kind: kind, Seq: agentSeq}); err != nil {
				t.Fatal(err)
			}
		case i%29 == 7: // the node's own chunk between the agent's
			b := bytes.Repeat([]byte{byte('A' + i%26)}, 1+rng.IntN(100))
			if ok, err := l.Insert(kind, b); !ok || err != nil {
				t.Fatalf("Insert = %v, %v", ok, err)
			}
			recs = append(recs, recorded{l.LastSeq(), kind, b})
		default:
			b := make([]byte, 1+rng.IntN(16<<10))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
			agentSeq++
			if err := l.Append(wire.Frame{Kind: kind, Seq: agentSeq, Data: b}); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, recorded{l.LastSeq(), kind, b})
		}
	}
	kindOf := map[int64]byte{}
	for _, r := range recs {
		kindOf[r.seq] = r.kind
	}
	largest := 0
	for after := int64(0); after <= l.LastSeq(); after++ {
		var want, got transcript
		for _, r := range recs {
			if r.seq > after {
				want.add(r.kind, r.data)
			}
		}
		chunks, last := 0, after
		if _, err := l.Read(t.Context(), after, false, func(c Chunk) error {
			k := byte(wire.FrameStdout)
			if c.Stream == "stderr" {
				k = wire.FrameStderr
			}
			switch {
			case c.Seq <= last:
				t.Fatalf("after %d: chunk %d after %d", after, c.Seq, last)
			case kindOf[c.Seq] != k:
				t.Fatalf("after %d: chunk %d of %s is no record of that stream", after, c.Seq, c.Stream)
			case len(c.Data) > MaxChunk:
				t.Fatalf("after %d: chunk of %d bytes", after, len(c.Data))
			}
			last = c.Seq
			largest = max(largest, len(c.Data))
			got.add(k, c.Data)
			chunks++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.kinds, want.kinds) || !bytes.Equal(got.data, want.data) {
			t.Fatalf("after %d: read %d bytes that differ from the %d recorded after it", after, len(got.data), len(want.data))
		}
		if after == 0 && chunks >= len(recs)/2 {
			t.Errorf("%d records read as %d chunks; want them gathered", len(recs), chunks)
		}
	}
	if largest <= wire.MaxFrameData {
		t.Errorf("largest chunk %d bytes; want more than a frame's %d", largest, wire.MaxFrameData)
	}
}

// TestResumeAfterAGatheredChunk reads a few chunks, stops, and resumes
// after the last seq it was given, as a client does after a cut: the
// bytes add up to what was recorded, each once.
func TestResumeAfterAGatheredChunk(t *testing.T) {
	l, err := Open(logPath(t), 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var all []byte
	for i := range 100 {
		b := bytes.Repeat([]byte{byte(i)}, 10000+i)
		all = append(all, b...)
		if err := l.Append(wire.Frame{Kind: wire.FrameStdout, Seq: int64(i + 1), Data: b}); err != nil {
			t.Fatal(err)
		}
	}
	var got []byte
	after, reads := int64(0), 0
	for ; reads < 100 && int64(len(got)) < int64(len(all)); reads++ {
		n := 0
		if _, err := l.Read(t.Context(), after, false, func(c Chunk) error {
			if n == 1 {
				return errStop // the connection is cut after one chunk
			}
			n++
			got = append(got, c.Data...)
			after = c.Seq
			return nil
		}); err != nil && err != errStop {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, all) {
		t.Fatalf("resumed reads gave %d bytes, recorded %d", len(got), len(all))
	}
	if reads >= 100 {
		t.Errorf("%d reads for 100 records; want chunks of several", reads)
	}
}

var errStop = stopErr{}

type stopErr struct{}

func (stopErr) Error() string { return "stop" }
