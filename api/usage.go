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
// Running for its reserved CPUs and memory, Asleep for its files kept
// (at most: a save is charged for the bytes it stores, here counted as
// the whole disk).
type PricePerHour struct {
	Running float64 `json:"running"`
	Asleep  float64 `json:"asleep"`
}

// MetricSample is a sandbox's resource use at Time. In a sample of the
// raw series (step_s the sampling interval), CPU is the average over the
// interval that ends at Time and network bytes those of that interval. In
// a coarser step, CPU, memory and disk are averages over the step with
// their maxima beside them, memory_peak_bytes is the largest peak and
// network bytes are the step's sum.
type MetricSample struct {
	Time            time.Time `json:"time"`
	CPUMillicores   int64     `json:"cpu_millicores"`
	MemoryBytes     int64     `json:"memory_bytes"`
	MemoryPeakBytes int64     `json:"memory_peak_bytes"`
	DiskBytes       int64     `json:"disk_bytes"`
	NetInBytes      int64     `json:"net_in_bytes"`
	NetOutBytes     int64     `json:"net_out_bytes"`
	// Maxima over the step, set when the step is coarser than the
	// sampling interval.
	CPUMillicoresMax *int64 `json:"cpu_millicores_max,omitempty"`
	MemoryBytesMax   *int64 `json:"memory_bytes_max,omitempty"`
	DiskBytesMax     *int64 `json:"disk_bytes_max,omitempty"`
}

// MetricsGap is a span without samples and why: the sandbox was not
// started yet, asleep, stopped, or not sampled.
type MetricsGap struct {
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Reason string    `json:"reason"`
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
	SandboxID   string  `json:"sandbox_id,omitempty"`
	Day         string  `json:"day,omitempty"` // 2006-01-02, UTC
	CPUS        float64 `json:"cpu_s"`
	MemoryGiBS  float64 `json:"memory_gib_s"`
	StorageGiBH float64 `json:"storage_gib_h"`
	EgressBytes int64   `json:"egress_bytes"`
	// GPUS is GPU-seconds reserved by workloads.
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
	// Month is the team's spend in the current calendar month (UTC) and
	// its monthly limit, if any.
	MonthCostUSD  float64  `json:"month_cost_usd"`
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
	Admission     *Admission `json:"admission,omitempty"`
	SpendLimitUSD *float64   `json:"spend_limit_usd,omitempty"`
	BudgetAlerts  *[]float64 `json:"budget_alerts,omitempty"`
}
