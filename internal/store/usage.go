package store

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
)

// Usage is what the meter persists: resource samples of running
// sandboxes, usage and cost accrued per sandbox and hour, the meter's
// progress, and which budget thresholds already alerted.
//
// A sandbox's cost_usd belongs to the meter: AccrueUsage adds to it, and
// UpdateSandbox leaves it as it is.
type Usage interface {
	// AppendSamples stores raw samples and folds each into its sandbox's
	// 1-minute rollup.
	AppendSamples(ctx context.Context, samples []Sample) error
	// ListSamples returns a sandbox's raw samples with from < time <= to,
	// oldest first, at most limit (0: no limit).
	ListSamples(ctx context.Context, sandboxID string, from, to time.Time, limit int) ([]Sample, error)
	// ListMinutes returns a sandbox's 1-minute rollups whose minute
	// starts in [from, to), oldest first.
	ListMinutes(ctx context.Context, sandboxID string, from, to time.Time, limit int) ([]Minute, error)
	// DeleteSamplesBefore drops raw samples older than raw and rollups
	// older than minutes.
	DeleteSamplesBefore(ctx context.Context, raw, minutes time.Time) error

	// AccrueUsage adds each accrual to its sandbox's hour and cost_usd and
	// moves the sandbox's meter to its Until, in one transaction. Each
	// accrual is conditional on the meter's cursor: when a sandbox's meter
	// is no longer at the accrual's Cursor (another replica charged it
	// meanwhile), nothing of the batch is written and the answer is
	// CodeConflict, so usage is never charged twice.
	AccrueUsage(ctx context.Context, accruals []Accrual) error
	// GetMeter returns a sandbox's meter; a sandbox never metered has a
	// zero one.
	GetMeter(ctx context.Context, sandboxID string) (Meter, error)
	// SetStoredBytes records the size of a sandbox's save.
	SetStoredBytes(ctx context.Context, sandboxID string, bytes int64) error
	// SumUsage adds up the usage f selects, grouped by f.GroupBy.
	SumUsage(ctx context.Context, f UsageFilter) ([]api.Usage, error)

	// GetBudgetState returns the state of a budget by key (a sandbox ID, or
	// a team ID and month); an unknown key has a zero state.
	GetBudgetState(ctx context.Context, key string) (BudgetState, error)
	PutBudgetState(ctx context.Context, b BudgetState) error
	// UpdateTeam replaces every field of the team with t's ID (its spend
	// limit and alerts, its admission).
	UpdateTeam(ctx context.Context, t api.Team) error
}

// Sample is one raw sample of a running sandbox.
type Sample struct {
	SandboxID       string
	Time            time.Time
	CPUMillicores   int64
	MemoryBytes     int64
	MemoryPeakBytes int64
	DiskBytes       int64
	NetInBytes      int64
	NetOutBytes     int64
}

// Minute is the rollup of a sandbox's samples in the minute starting at
// Minute: N samples, sums (for averages) and maxima.
type Minute struct {
	SandboxID      string
	Minute         time.Time
	N              int64
	CPUSum, CPUMax int64
	MemorySum      int64
	MemoryMax      int64
	MemoryPeakMax  int64
	DiskSum        int64
	DiskMax        int64
	NetInBytes     int64
	NetOutBytes    int64
}

// Accrual is usage of one sandbox within one hour, to be added.
type Accrual struct {
	SandboxID   string
	TeamID      string
	Hour        time.Time // truncated to the hour, UTC
	CPUS        float64
	MemoryGiBS  float64
	StorageGiBH float64
	EgressBytes int64
	GPUS        float64 // GPU-seconds (workloads)
	CostUSD     float64
	// Until is how far the sandbox is now metered.
	Until time.Time
	// Cursor is how far the sandbox was metered when the accrual was
	// made (nil: never): the meter's accrued_until it continues from.
	Cursor *time.Time
}

// Meter is how far a sandbox is metered, and the size of its save.
type Meter struct {
	AccruedUntil *time.Time
	StoredBytes  int64
}

// UsageFilter selects a team's usage with hours in [From, To) ("" team
// for every team), of one sandbox if SandboxID is set. GroupBy is "day",
// "sandbox" or "" (one total).
type UsageFilter struct {
	TeamID    string
	SandboxID string
	From, To  time.Time
	GroupBy   string
}

// BudgetState is which thresholds (percentages) of a budget alerted, and
// whether it is exceeded (budget.exceeded was raised).
type BudgetState struct {
	Key      string
	Alerted  []float64
	Exceeded bool
}
