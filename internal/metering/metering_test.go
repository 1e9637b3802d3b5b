package metering

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

func TestDiff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := node.Stats{Time: t0, CPUNanos: 1e9, NetInBytes: 100, NetOutBytes: 50}
	tests := []struct {
		name string
		cur  node.Stats
		want Sample
		ok   bool
	}{
		{"one CPU busy for 5 s", node.Stats{Time: t0.Add(5 * time.Second), CPUNanos: 6e9, MemoryBytes: 10, MemoryPeakBytes: 20, DiskBytes: 30, NetInBytes: 400, NetOutBytes: 60},
			Sample{Time: t0.Add(5 * time.Second), CPUMillicores: 1000, MemoryBytes: 10, MemoryPeakBytes: 20, DiskBytes: 30, NetInBytes: 300, NetOutBytes: 10}, true},
		{"a quarter CPU", node.Stats{Time: t0.Add(4 * time.Second), CPUNanos: 2e9, NetInBytes: 100, NetOutBytes: 50},
			Sample{Time: t0.Add(4 * time.Second), CPUMillicores: 250}, true},
		{"counters started again (woke)", node.Stats{Time: t0.Add(time.Second), CPUNanos: 5e8, MemoryBytes: 7, NetInBytes: 3, NetOutBytes: 4},
			Sample{Time: t0.Add(time.Second), CPUMillicores: 500, MemoryBytes: 7, MemoryPeakBytes: 7, NetInBytes: 3, NetOutBytes: 4}, true},
		{"no time passed", node.Stats{Time: t0, CPUNanos: 2e9}, Sample{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Diff(prev, tt.cur)
			if ok != tt.ok {
				t.Fatalf("ok = %v; want %v", ok, tt.ok)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("sample (-want +got):\n%s", d)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	alerts := []float64{50, 80}
	tests := []struct {
		name         string
		b            Budget
		spent, limit float64
		want         Step
	}{
		{"below", Budget{}, 0.4, 1, Step{Next: Budget{Alerted: []float64{}}}},
		{"half", Budget{}, 0.5, 1, Step{Alerts: []float64{50}, Next: Budget{Alerted: []float64{50}}}},
		{"half again: no second alert", Budget{Alerted: []float64{50}}, 0.6, 1, Step{Next: Budget{Alerted: []float64{50}}}},
		{"both at once", Budget{}, 0.9, 1, Step{Alerts: []float64{50, 80}, Next: Budget{Alerted: []float64{50, 80}}}},
		{"reached", Budget{Alerted: []float64{50, 80}}, 1.01, 1, Step{Exceeded: true, Next: Budget{Alerted: []float64{50, 80}, Exceeded: true}}},
		{"still over: no second event", Budget{Alerted: []float64{50, 80}, Exceeded: true}, 1.2, 1, Step{Next: Budget{Alerted: []float64{50, 80}, Exceeded: true}}},
		{"limit raised re-arms", Budget{Alerted: []float64{50, 80}, Exceeded: true}, 1.2, 2, Step{Next: Budget{Alerted: []float64{50}}}},
		{"zero limit, nothing spent", Budget{}, 0, 0, Step{Next: Budget{Alerted: []float64{}}}},
		{"zero limit, spent", Budget{}, 0.01, 0, Step{Alerts: []float64{50, 80}, Exceeded: true, Next: Budget{Alerted: []float64{50, 80}, Exceeded: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, Check(tt.b, tt.spent, tt.limit, alerts)); d != "" {
				t.Errorf("step (-want +got):\n%s", d)
			}
		})
	}
}

func TestPrices(t *testing.T) {
	p := api.Prices{VCPUSecond: 0.001, MemoryGiBSecond: 0.0005, StorageGiBHour: 0.01, EgressGB: 0.1}
	got := PerHour(p, api.Resources{CPUs: 2, MemoryMiB: 2048, DiskMiB: 10240})
	if math.Abs(got.Running-10.8) > 1e-9 || math.Abs(got.Asleep-0.1) > 1e-9 {
		t.Errorf("per hour = %+v; want running 10.8, asleep 0.1", got)
	}
	u := Running(api.Resources{CPUs: 1, MemoryMiB: 512}, 10, 2e9)
	if c := u.Cost(p); math.Abs(c-(0.01+0.0025+0.2)) > 1e-12 {
		t.Errorf("cost = %v", c)
	}
	if c := Stored(GiB, 3600).Cost(p); math.Abs(c-0.01) > 1e-12 {
		t.Errorf("storage cost = %v", c)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "prices.json")
	os.WriteFile(file, []byte(`{"vcpu_second_usd": 1, "egress_gb_usd": 0}`), 0o600)
	loaded, err := LoadPrices(file)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultPrices
	want.VCPUSecond, want.EgressGB = 1, 0
	if loaded != want {
		t.Errorf("loaded %+v; want %+v", loaded, want)
	}
	for _, bad := range []string{`{"cpu": 1}`, `{"vcpu_second_usd": -1}`, `[]`} {
		os.WriteFile(file, []byte(bad), 0o600)
		if _, err := LoadPrices(file); err == nil {
			t.Errorf("LoadPrices(%s) = nil error", bad)
		}
	}
}

func TestWorkloadCost(t *testing.T) {
	p := api.Prices{VCPUSecond: 1, MemoryGiBSecond: 10, GPUSecond: 100}
	u := Workload(api.WorkloadResources{CPUs: 2, MemoryMiB: 512, GPUs: 3}, 10)
	if got, want := u.Cost(p), 2*10*1.0+0.5*10*10+3*10*100.0; got != want {
		t.Errorf("cost = %v; want %v", got, want)
	}
	if got := u.Scale(0.5).GPUS; got != 15 {
		t.Errorf("scaled GPU-seconds = %v; want 15", got)
	}
	file := filepath.Join(t.TempDir(), "prices.json")
	os.WriteFile(file, []byte(`{"gpu_second_usd": 0.001}`), 0o600)
	if p, err := LoadPrices(file); err != nil || p.GPUSecond != 0.001 || p.VCPUSecond != DefaultPrices.VCPUSecond {
		t.Errorf("LoadPrices: %+v, %v", p, err)
	}
}
