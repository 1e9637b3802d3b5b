package api

import "time"

// Spend-limit actions (on_budget): what happens to a sandbox when its own
// or its team's spend limit is reached.
const (
	OnBudgetSleep     = "sleep"
	OnBudgetTerminate = "terminate"
)

// DefaultBudgetAlerts are the percentages of a spend limit at which a
// budget.alert event is raised unless budget_alerts says otherwise.
var DefaultBudgetAlerts = []float64{50, 80}

// PricePerHour is what a sandbox costs per hour at the server's prices:
// running for its reserved CPUs and memory, asleep for its files kept
// (at most: a save is charged for the bytes it stores, here counted as
// the whole disk).
type PricePerHour struct {
	// US dollars an hour while running: reserved CPUs and memory (egress is
	// extra).
	Running float64 `json:"running"`
	// US dollars an hour while asleep, at most: the save is charged for the
	// bytes it stores, here counted as the whole disk.
	Asleep float64 `json:"asleep"`
}

// MetricSample is a sandbox's resource use at time. In a sample of the
// raw series (step_s the sampling interval), CPU is the average over the
// interval that ends at time and network bytes those of that interval. In
// a coarser step, CPU, memory and disk are averages over the step with
// their maxima beside them, memory_peak_bytes is the largest peak and
// network bytes are the step's sum.
type MetricSample struct {
	Time time.Time `json:"time"`
	// CPU used: 1000 is one CPU busy.
	CPUMillicores int64 `json:"cpu_millicores"`
	// Memory in use (page cache included, as the memory limit counts it).
	MemoryBytes int64 `json:"memory_bytes"`
	// The most memory used since the sandbox (this run of it) started.
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	// Used on its own disk.
	DiskBytes int64 `json:"disk_bytes"`
	// Into the sandbox at its interface during the interval or step.
	NetInBytes int64 `json:"net_in_bytes"`
	// Out of the sandbox at its interface during the interval or step (billed
	// as egress).
	NetOutBytes int64 `json:"net_out_bytes"`
	// Maxima over the step, set when the step is coarser than the
	// sampling interval.
	CPUMillicoresMax *int64 `json:"cpu_millicores_max,omitempty"`
	MemoryBytesMax   *int64 `json:"memory_bytes_max,omitempty"`
	DiskBytesMax     *int64 `json:"disk_bytes_max,omitempty"`
}

// MetricsGap is a span without samples and why: the sandbox was not
// started yet, asleep, stopped, or not sampled.
type MetricsGap struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// starting, asleep, terminated, failed, not sampled, not created yet
	Reason string `json:"reason"`
}

// Metrics answers GET /v1/sandboxes/{ref}/metrics.
type Metrics struct {
	SandboxID string         `json:"sandbox_id"`
	From      time.Time      `json:"from"`
	To        time.Time      `json:"to"`
	StepS     int64          `json:"step_s"`
	Samples   []MetricSample `json:"samples"`
	Gaps      []MetricsGap   `json:"gaps"`
}

// Usage is what was used and what it cost, for one sandbox, one day or a
// whole report.
type Usage struct {
	// With group_by=sandbox: a sandbox's ID, an ended workload's (wl_…), or a snapshot's (snap_…, storage only).
	SandboxID string `json:"sandbox_id,omitempty"`
	// With group_by=day (UTC).
	Day string `json:"day,omitempty" schema:"format=date"` // 2006-01-02, UTC
	// vCPU-seconds reserved while running.
	CPUS float64 `json:"cpu_s"`
	// GiB-seconds of memory reserved while running.
	MemoryGiBS float64 `json:"memory_gib_s"`
	// GiB-hours stored while asleep.
	StorageGiBH float64 `json:"storage_gib_h"`
	// Bytes sent by the sandbox.
	EgressBytes int64 `json:"egress_bytes"`
	// GPU-seconds reserved by workloads (0 for sandboxes).
	GPUS    float64 `json:"gpu_s"`
	CostUSD float64 `json:"cost_usd"`
}

// SandboxUsage answers GET /v1/sandboxes/{ref}/usage.
type SandboxUsage struct {
	Usage
	SpendLimitUSD   *float64     `json:"spend_limit_usd"`
	PricePerHourUSD PricePerHour `json:"price_per_hour_usd"`
}

// UsageReport answers GET /v1/usage.
type UsageReport struct {
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	GroupBy string    `json:"group_by"`
	Items   []Usage   `json:"items"`
	Total   Usage     `json:"total"`
	// The team's spend this calendar month (UTC).
	MonthCostUSD float64 `json:"month_cost_usd"`
	// The team's monthly limit.
	SpendLimitUSD *float64 `json:"spend_limit_usd"`
}

// Prices are what cove charges, in US dollars.
type Prices struct {
	VCPUSecond      float64 `json:"vcpu_second_usd"`
	MemoryGiBSecond float64 `json:"memory_gib_second_usd"`
	StorageGiBHour  float64 `json:"storage_gib_hour_usd"`
	EgressGB        float64 `json:"egress_gb_usd"`
	// GPUSecond is the price of one GPU for a second (workloads).
	GPUSecond float64 `json:"gpu_second_usd"`
}

// UpdateTeamRequest is the body of PATCH /v1/teams/{id} (admin); absent
// fields stay as they are. A negative spend_limit_usd removes the limit.
type UpdateTeamRequest struct {
	Admission *Admission `json:"admission,omitempty"`
	// Monthly limit in US dollars; a negative value removes it.
	SpendLimitUSD *float64 `json:"spend_limit_usd,omitempty"`
	// Percentages of the spend limit at which budget.alert is raised, once
	// each; default [50, 80].
	BudgetAlerts *[]float64 `json:"budget_alerts,omitempty" schema:"exclusiveMinimum=0 exclusiveMaximum=100"`
}
