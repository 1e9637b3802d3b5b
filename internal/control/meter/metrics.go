package meter

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// Bounds of a metrics answer.
const (
	// metricsPoints is the most points a default step gives.
	metricsPoints = 1000
	// metricsMaxPoints is the most points any step may give.
	metricsMaxPoints = 10000
)

// MetricsQuery selects a sandbox's samples in (From, To] at a step; zero
// values take defaults (the last hour of the sandbox's life, a step that
// gives at most 1000 points).
type MetricsQuery struct {
	From, To time.Time
	Step     time.Duration
}

// Metrics returns a sandbox's samples, kept after it terminated, and the
// gaps in them: when it was not started yet, asleep, stopped or not
// sampled. A step at or below the sampling interval answers the raw
// samples (kept RawRetention); a coarser one averages them per
// step, from 1-minute rollups when the step is whole minutes or the raw
// samples are gone.
func (m *Meter) Metrics(ctx context.Context, teamID, ref string, q MetricsQuery) (api.Metrics, error) {
	sb, err := m.life.Sandbox(ctx, teamID, ref)
	if err != nil {
		return api.Metrics{}, err
	}
	now := m.now()
	if q.To.IsZero() {
		q.To = now
	}
	if q.From.IsZero() {
		q.From = q.To.Add(-time.Hour)
		if q.From.Before(sb.CreatedAt) {
			q.From = sb.CreatedAt
		}
	}
	if !q.From.Before(q.To) {
		return api.Metrics{}, invalid("from (%s) must be before to (%s)", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	}
	span := q.To.Sub(q.From)
	interval := m.cfg.Interval
	rawFrom := now.Add(-m.cfg.RawRetention)
	switch {
	case q.Step < 0:
		return api.Metrics{}, invalid("step is negative")
	case q.Step == 0:
		q.Step = interval
		if span/interval > metricsPoints || q.From.Before(rawFrom) {
			q.Step = time.Minute * (1 + span/(metricsPoints*time.Minute))
		}
	case span/q.Step > metricsMaxPoints:
		return api.Metrics{}, invalid("from, to and step give %d points; at most %d (take a larger step)", span/q.Step, metricsMaxPoints)
	}
	if q.Step < time.Second {
		q.Step = time.Second
	}
	out := api.Metrics{SandboxID: sb.ID, From: q.From, To: q.To, StepS: int64(q.Step / time.Second), Samples: []api.MetricSample{}, Gaps: []api.MetricsGap{}}
	var times []time.Time // the times samples cover, for the gaps
	switch {
	case q.Step <= interval:
		out.StepS = int64((interval + time.Second - 1) / time.Second)
		raw, err := m.store.ListSamples(ctx, sb.ID, q.From, q.To, metricsMaxPoints)
		if err != nil {
			return api.Metrics{}, err
		}
		for _, r := range raw {
			out.Samples = append(out.Samples, api.MetricSample{
				Time: r.Time, CPUMillicores: r.CPUMillicores, MemoryBytes: r.MemoryBytes, MemoryPeakBytes: r.MemoryPeakBytes,
				DiskBytes: r.DiskBytes, NetInBytes: r.NetInBytes, NetOutBytes: r.NetOutBytes,
			})
			times = append(times, r.Time)
		}
	case q.Step%time.Minute != 0 && !q.From.Before(rawFrom):
		raw, err := m.store.ListSamples(ctx, sb.ID, q.From, q.To, 0)
		if err != nil {
			return api.Metrics{}, err
		}
		var b bucketer
		for _, r := range raw {
			b.add(r.Time.Truncate(q.Step), 1, r.CPUMillicores, r.CPUMillicores, r.MemoryBytes, r.MemoryBytes, r.MemoryPeakBytes,
				r.DiskBytes, r.DiskBytes, r.NetInBytes, r.NetOutBytes)
			times = append(times, r.Time)
		}
		out.Samples = b.samples()
	default:
		mins, err := m.store.ListMinutes(ctx, sb.ID, q.From.Truncate(time.Minute), q.To, 0)
		if err != nil {
			return api.Metrics{}, err
		}
		var b bucketer
		for _, m := range mins {
			b.add(m.Minute.Truncate(q.Step), m.N, m.CPUSum, m.CPUMax, m.MemorySum, m.MemoryMax, m.MemoryPeakMax,
				m.DiskSum, m.DiskMax, m.NetInBytes, m.NetOutBytes)
			times = append(times, m.Minute, m.Minute.Add(time.Minute))
		}
		out.Samples = b.samples()
		interval = time.Minute
	}
	gaps, err := m.gaps(ctx, sb, q.From, q.To, times, interval)
	if err != nil {
		return api.Metrics{}, err
	}
	out.Gaps = gaps
	return out, nil
}

// bucketer folds samples or rollups into steps (in time order).
type bucketer struct {
	out []api.MetricSample
	n   []int64
}

func (b *bucketer) add(t time.Time, n, cpuSum, cpuMax, memSum, memMax, peak, diskSum, diskMax, in, out int64) {
	if len(b.out) == 0 || !b.out[len(b.out)-1].Time.Equal(t) {
		z1, z2, z3 := int64(0), int64(0), int64(0)
		b.out = append(b.out, api.MetricSample{Time: t, CPUMillicoresMax: &z1, MemoryBytesMax: &z2, DiskBytesMax: &z3})
		b.n = append(b.n, 0)
	}
	i := len(b.out) - 1
	s := &b.out[i]
	b.n[i] += n
	s.CPUMillicores += cpuSum
	s.MemoryBytes += memSum
	s.DiskBytes += diskSum
	*s.CPUMillicoresMax = max(*s.CPUMillicoresMax, cpuMax)
	*s.MemoryBytesMax = max(*s.MemoryBytesMax, memMax)
	*s.DiskBytesMax = max(*s.DiskBytesMax, diskMax)
	s.MemoryPeakBytes = max(s.MemoryPeakBytes, peak)
	s.NetInBytes += in
	s.NetOutBytes += out
}

// samples turns the sums into averages.
func (b *bucketer) samples() []api.MetricSample {
	for i := range b.out {
		if n := b.n[i]; n > 0 {
			b.out[i].CPUMillicores /= n
			b.out[i].MemoryBytes /= n
			b.out[i].DiskBytes /= n
		}
	}
	if b.out == nil {
		return []api.MetricSample{}
	}
	return b.out
}

// span is a stretch of a sandbox's life in one state.
type span struct {
	from, to time.Time
	state    string
}

// gaps lists the stretches of [from, to] without samples: those in which
// the sandbox did not run (from its state changes in the event log), with
// the state as reason, and those in which it ran but was not sampled for
// more than two intervals.
func (m *Meter) gaps(ctx context.Context, sb api.Sandbox, from, to time.Time, times []time.Time, interval time.Duration) ([]api.MetricsGap, error) {
	evs, err := m.store.ListEvents(ctx, store.EventFilter{
		TeamID: sb.TeamID, SandboxID: sb.ID,
		Types: []string{"sandbox.creating", "sandbox.setting_up", "sandbox.running", "sandbox.sleeping", "sandbox.asleep", "sandbox.waking",
			"sandbox.terminating", "sandbox.terminated", "sandbox.failed"},
		Limit: 100000,
	})
	if err != nil {
		return nil, err
	}
	// The sandbox's life as spans of states; before its first known
	// event it was being created.
	var spans []span
	cur := span{from: sb.CreatedAt, state: "creating"}
	for _, e := range evs {
		st := e.Type[len("sandbox."):]
		if st == cur.state {
			continue
		}
		cur.to = e.Time
		spans = append(spans, cur)
		cur = span{from: e.Time, state: st}
	}
	cur.to = to
	if to.After(cur.from) {
		spans = append(spans, cur)
	}
	gaps := []api.MetricsGap{}
	addGap := func(a, b time.Time, reason string) {
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if !a.Before(b) {
			return
		}
		if n := len(gaps); n > 0 && gaps[n-1].Reason == reason && !gaps[n-1].To.Before(a) {
			gaps[n-1].To = b
			return
		}
		gaps = append(gaps, api.MetricsGap{From: a, To: b, Reason: reason})
	}
	if from.Before(sb.CreatedAt) {
		addGap(from, sb.CreatedAt, "not created yet")
	}
	ti := 0
	for _, sp := range spans {
		if sp.to.Before(from) || sp.from.After(to) {
			continue
		}
		// A setup is sampled (and charged) as running time.
		if sp.state != "running" && sp.state != "setting_up" {
			addGap(sp.from, sp.to, reasonOf(sp.state))
			continue
		}
		// Running: holes in the samples longer than two intervals.
		last := sp.from
		for ; ti < len(times) && !times[ti].After(sp.to); ti++ {
			if times[ti].Before(sp.from) {
				continue
			}
			if times[ti].Sub(last) > 2*interval {
				addGap(last, times[ti].Add(-interval), "not sampled")
			}
			last = times[ti]
		}
		if end := sp.to; end.Sub(last) > 2*interval {
			addGap(last, end, "not sampled")
		}
	}
	return gaps, nil
}

// reasonOf names a gap by the state the sandbox was in.
func reasonOf(state string) string {
	switch state {
	case "creating", "waking":
		return "starting"
	case "sleeping", "asleep":
		return "asleep"
	case "terminating", "terminated":
		return "terminated"
	case "failed":
		return "failed"
	}
	return state
}
