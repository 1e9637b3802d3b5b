package store

import "context"

// WorkloadUsage persists what ended workloads used, beside the sandboxes'
// usage: SumUsage adds both, a workload's rows keyed by its ID.
type WorkloadUsage interface {
	// PutWorkloadUsage sets a workload's usage in each accrual's hour
	// (SandboxID is the workload's ID). It replaces what the hour held,
	// so putting the same usage twice counts it once.
	PutWorkloadUsage(ctx context.Context, accruals []Accrual) error
}
