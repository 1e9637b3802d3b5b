// Package metering turns what the node reads of running sandboxes into
// samples, prices their use, and decides when a spend limit alerts and
// when it is exceeded. It holds the arithmetic only; the control plane
// (internal/control/meter) runs the meter over the store and the node.
package metering

import (
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/cove-dev/cove/api"
)

// GiB is a gibibyte; storage and memory are priced per GiB.
const GiB = 1 << 30

// GB is a gigabyte (10^9 bytes); egress is priced per GB.
const GB = 1e9

// DefaultPrices are the prices of `cove serve` without --prices: a vCPU
// at $0.0504 an hour, memory at $0.0162 per GiB-hour, storage at $0.10
// per GiB-month (730 hours), egress at $0.09 per GB, a GPU (workloads)
// at $2.52 an hour.
var DefaultPrices = api.Prices{
	VCPUSecond:      0.000014,
	MemoryGiBSecond: 0.0000045,
	StorageGiBHour:  0.000137,
	EgressGB:        0.09,
	GPUSecond:       0.0007,
}

// LoadPrices reads a price table: a JSON object with the fields of
// api.Prices; fields it leaves out keep their defaults.
func LoadPrices(path string) (api.Prices, error) {
	p := DefaultPrices
	b, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("price table: %w", err)
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(b, &in); err != nil {
		return p, fmt.Errorf("price table %s: %w", path, err)
	}
	known := map[string]*float64{
		"vcpu_second_usd": &p.VCPUSecond, "memory_gib_second_usd": &p.MemoryGiBSecond,
		"storage_gib_hour_usd": &p.StorageGiBHour, "egress_gb_usd": &p.EgressGB,
		"gpu_second_usd": &p.GPUSecond,
	}
	for k, v := range in {
		dst, ok := known[k]
		if !ok {
			return p, fmt.Errorf("price table %s: unknown field %q (known: vcpu_second_usd, memory_gib_second_usd, storage_gib_hour_usd, egress_gb_usd, gpu_second_usd)", path, k)
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return p, fmt.Errorf("price table %s: %s: %w", path, k, err)
		}
	}
	return p, ValidatePrices(p)
}

// ValidatePrices refuses negative or non-finite prices.
func ValidatePrices(p api.Prices) error {
	for name, v := range map[string]float64{
		"vcpu_second_usd": p.VCPUSecond, "memory_gib_second_usd": p.MemoryGiBSecond,
		"storage_gib_hour_usd": p.StorageGiBHour, "egress_gb_usd": p.EgressGB,
		"gpu_second_usd": p.GPUSecond,
	} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("price %s = %v: want a finite number, 0 or more", name, v)
		}
	}
	return nil
}

// PerHour is what a sandbox with resources r costs an hour: running (its
// reserved CPUs and memory) and asleep (its whole disk kept, an upper
// bound: a save is charged for what it stores).
func PerHour(p api.Prices, r api.Resources) api.PricePerHour {
	mem := float64(r.MemoryMiB) / 1024
	return api.PricePerHour{
		Running: (r.CPUs*p.VCPUSecond + mem*p.MemoryGiBSecond) * 3600,
		Asleep:  float64(r.DiskMiB) / 1024 * p.StorageGiBHour,
	}
}

// Use is what a sandbox used in a span of time.
type Use struct {
	CPUS        float64 // vCPU-seconds reserved
	MemoryGiBS  float64 // GiB-seconds of memory reserved
	StorageGiBH float64 // GiB-hours stored
	EgressBytes int64
	GPUS        float64 // GPU-seconds reserved (workloads)
}

// Running is the use of a running sandbox with resources r over seconds,
// having sent egress bytes.
func Running(r api.Resources, seconds float64, egress int64) Use {
	return Use{CPUS: r.CPUs * seconds, MemoryGiBS: float64(r.MemoryMiB) / 1024 * seconds, EgressBytes: egress}
}

// Stored is the use of a save of bytes kept for seconds.
func Stored(bytes int64, seconds float64) Use {
	return Use{StorageGiBH: float64(bytes) / GiB * seconds / 3600}
}

// Cost prices u.
func (u Use) Cost(p api.Prices) float64 {
	return u.CPUS*p.VCPUSecond + u.MemoryGiBS*p.MemoryGiBSecond + u.StorageGiBH*p.StorageGiBHour +
		float64(u.EgressBytes)/GB*p.EgressGB + u.GPUS*p.GPUSecond
}

// Workload is the use of a workload with resources r that ran for seconds:
// its CPUs and memory as a running sandbox's, and its GPUs.
func Workload(r api.WorkloadResources, seconds float64) Use {
	return Use{CPUS: r.CPUs * seconds, MemoryGiBS: float64(r.MemoryMiB) / 1024 * seconds, GPUS: float64(r.GPUs) * seconds}
}

// Scale is u times f (a share of a span).
func (u Use) Scale(f float64) Use {
	return Use{CPUS: u.CPUS * f, MemoryGiBS: u.MemoryGiBS * f, StorageGiBH: u.StorageGiBH * f,
		EgressBytes: int64(math.Round(float64(u.EgressBytes) * f)), GPUS: u.GPUS * f}
}
