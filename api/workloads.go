package api

import "time"

// WorkloadState is a step of a workload's life: queued until a node can
// place it, running to completion, then one of the ends.
type WorkloadState string

// Workload states.
const (
	WorkloadQueued    WorkloadState = "queued"
	WorkloadStarting  WorkloadState = "starting"
	WorkloadRunning   WorkloadState = "running"
	WorkloadExited    WorkloadState = "exited"
	WorkloadFailed    WorkloadState = "failed"
	WorkloadCancelled WorkloadState = "cancelled"
)

// Done reports whether a workload in state s has ended.
func (s WorkloadState) Done() bool {
	return s == WorkloadExited || s == WorkloadFailed || s == WorkloadCancelled
}

// Valid reports whether s is one of the known states.
func (s WorkloadState) Valid() bool {
	switch s {
	case WorkloadQueued, WorkloadStarting, WorkloadRunning, WorkloadExited, WorkloadFailed, WorkloadCancelled:
		return true
	}
	return false
}

// WorkloadResources are what a workload reserves while it runs.
type WorkloadResources struct {
	CPUs      float64 `json:"cpus"`
	MemoryMiB int64   `json:"memory_mib"`
	DiskMiB   int64   `json:"disk_mib"`
	GPUs      int     `json:"gpus"`
	// GPUType, when set, is the kind of GPU the workload needs (the type a
	// node advertises, e.g. nvidia.com/gpu).
	GPUType string `json:"gpu_type,omitempty"`
}

// WorkloadResourcesRequest is WorkloadResources with every field optional.
type WorkloadResourcesRequest struct {
	CPUs      *float64 `json:"cpus,omitempty"`
	MemoryMiB *int64   `json:"memory_mib,omitempty"`
	DiskMiB   *int64   `json:"disk_mib,omitempty"`
	GPUs      int      `json:"gpus,omitempty"`
	GPUType   string   `json:"gpu_type,omitempty"`
}

// CreateWorkloadRequest is the body of POST /v1/workloads. Template (or
// Image, a template by its image's name) and command or argv say what
// runs; the source lands in the workdir first.
type CreateWorkloadRequest struct {
	Template  string                    `json:"template,omitempty"`
	Image     string                    `json:"image,omitempty"`
	Command   string                    `json:"command,omitempty"`
	Argv      []string                  `json:"argv,omitempty"`
	Source    *Source                   `json:"source,omitempty"`
	Env       map[string]string         `json:"env,omitempty"`
	Secrets   map[string]string         `json:"secrets,omitempty"`
	Workdir   string                    `json:"workdir,omitempty"`
	User      string                    `json:"user,omitempty"`
	Resources *WorkloadResourcesRequest `json:"resources,omitempty"`
	TimeoutS  *int64                    `json:"timeout_s,omitempty"`
	MaxQueueS *int64                    `json:"max_queue_s,omitempty"`
	Labels    map[string]string         `json:"labels,omitempty"`
}

// Workload is a batch run: queued until a node can place it, then run to
// completion in a container of its own, isolated as a sandbox is.
type Workload struct {
	ID        string            `json:"id"`
	TeamID    string            `json:"team_id"`
	Template  string            `json:"template"`
	Command   string            `json:"command,omitempty"`
	Argv      []string          `json:"argv,omitempty"`
	Source    *Source           `json:"source,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Secrets   map[string]string `json:"secrets,omitempty"`
	Workdir   string            `json:"workdir"`
	User      string            `json:"user"`
	Resources WorkloadResources `json:"resources"`
	TimeoutS  int64             `json:"timeout_s"`
	MaxQueueS int64             `json:"max_queue_s"`
	Labels    map[string]string `json:"labels"`
	State     WorkloadState     `json:"state"`
	// StateReason says why a workload waits in the queue, or how it ended.
	StateReason string `json:"state_reason"`
	// Devices are the GPUs the node gave the workload (CDI names).
	Devices   []string   `json:"devices"`
	ExitCode  *int       `json:"exit_code"`
	Signal    string     `json:"signal"`
	TimedOut  bool       `json:"timed_out"`
	CostUSD   float64    `json:"cost_usd"`
	CreatedAt time.Time  `json:"created_at"`
	PlacedAt  *time.Time `json:"placed_at,omitempty"` // when a node took it: charged from here to its end
	StartedAt *time.Time `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// StdoutBytes and StderrBytes are what its output recorded.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
}

// GPUHealth is what GET /healthz says of the node's GPUs: their type and
// how many there are, and how many running workloads hold.
type GPUHealth struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
	InUse int    `json:"in_use"`
}
