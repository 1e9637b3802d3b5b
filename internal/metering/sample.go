package metering

import (
	"time"

	"github.com/cove-dev/cove/internal/node"
)

// Sample is one interval of a running sandbox's use, made from two
// readings of its counters.
type Sample struct {
	Time            time.Time
	CPUMillicores   int64
	MemoryBytes     int64
	MemoryPeakBytes int64
	DiskBytes       int64
	NetInBytes      int64
	NetOutBytes     int64
}

// Diff makes the sample of the interval from prev to cur. A counter lower
// than before started again (the sandbox woke in a new cgroup, with a new
// interface): it counts from zero. ok is false when the interval is empty.
func Diff(prev, cur node.Stats) (s Sample, ok bool) {
	dt := cur.Time.Sub(prev.Time)
	if dt <= 0 {
		return Sample{}, false
	}
	s = Sample{
		Time:        cur.Time,
		MemoryBytes: cur.MemoryBytes, MemoryPeakBytes: max(cur.MemoryPeakBytes, cur.MemoryBytes),
		DiskBytes:   cur.DiskBytes,
		NetInBytes:  int64(delta(prev.NetInBytes, cur.NetInBytes)),
		NetOutBytes: int64(delta(prev.NetOutBytes, cur.NetOutBytes)),
	}
	cpu := delta(prev.CPUNanos, cur.CPUNanos)
	s.CPUMillicores = int64((float64(cpu)*1000/float64(dt.Nanoseconds()) + 0.5))
	return s, true
}

func delta(prev, cur uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}
