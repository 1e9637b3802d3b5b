package api

import (
	"slices"
	"time"
)

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
func (s WorkloadState) Valid() bool { return slices.Contains(s.Values(), string(s)) }

// Values lists the states in the order of a workload's life: the enum of
// the OpenAPI document.
func (WorkloadState) Values() []string {
	return []string{
		string(WorkloadQueued), string(WorkloadStarting), string(WorkloadRunning),
		string(WorkloadExited), string(WorkloadFailed), string(WorkloadCancelled),
	}
}

// WorkloadResources are what a workload reserves while it runs.
type WorkloadResources struct {
	CPUs      float64 `json:"cpus"`
	MemoryMiB int64   `json:"memory_mib"`
	DiskMiB   int64   `json:"disk_mib"`
	GPUs      int     `json:"gpus" schema:"minimum=0"`
	// GPUType, when set, is the kind of GPU the workload needs (the type a
	// node advertises, e.g. nvidia.com/gpu).
	GPUType string `json:"gpu_type,omitempty"`
}

// WorkloadResourcesRequest is WorkloadResources with every field optional;
// cpus, memory_mib and disk_mib default and are bounded as a sandbox's.
// gpus above 0 needs the team's gpu admission (else 403) and a node whose
// CDI specs list that many GPUs (else the workload waits queued,
// state_reason saying so, until max_queue_s).
type WorkloadResourcesRequest struct {
	CPUs      *float64 `json:"cpus,omitempty"`
	MemoryMiB *int64   `json:"memory_mib,omitempty"`
	DiskMiB   *int64   `json:"disk_mib,omitempty"`
	GPUs      int      `json:"gpus,omitempty" schema:"minimum=0 maximum=64 default=0"`
	// The GPU type a node advertises (its CDI kind, e.g. nvidia.com/gpu);
	// empty: any.
	GPUType string `json:"gpu_type,omitempty"`
}

// CreateWorkloadRequest is the body of POST /v1/workloads. template (or
// image, a template by its image's name) and command or argv say what
// runs: command (a shell string, run by the template's bash -lc) or argv,
// exactly one; the source lands in the workdir first.
type CreateWorkloadRequest struct {
	// Default: the server's default template.
	Template string `json:"template,omitempty"`
	// An image, by name, used as a template; give template or image.
	Image   string            `json:"image,omitempty"`
	Command string            `json:"command,omitempty"`
	Argv    []string          `json:"argv,omitempty"`
	Source  *Source           `json:"source,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Environment variable → name of a team secret; values are redacted from
	// the output.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Default /workspace; the source lands there.
	Workdir   string                    `json:"workdir,omitempty"`
	User      string                    `json:"user,omitempty" schema:"enum=user,root default=user"`
	Resources *WorkloadResourcesRequest `json:"resources,omitempty"`
	// The program is killed after it (state failed, timed_out true); default
	// 3600.
	TimeoutS *int64 `json:"timeout_s,omitempty"`
	// A workload no node could place within it fails; default 3600.
	MaxQueueS *int64            `json:"max_queue_s,omitempty" schema:"minimum=1"`
	Labels    map[string]string `json:"labels,omitempty"`
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
	Devices  []string `json:"devices"`
	ExitCode *int     `json:"exit_code"`
	Signal   string   `json:"signal"`
	TimedOut bool     `json:"timed_out"`
	// CPUs and memory as a running sandbox's, plus GPU-seconds, for the time
	// it held them: from placed_at to its end (so far, while it runs; the
	// meter charges it every metrics interval).
	CostUSD   float64   `json:"cost_usd"`
	CreatedAt time.Time `json:"created_at"`
	// When a node took it (its container starts); absent while queued. It is
	// charged from here, whether its program ran or its start failed.
	PlacedAt  *time.Time `json:"placed_at,omitempty"` // when a node took it: charged from here to its end
	StartedAt *time.Time `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// Bytes its output recorded on stdout.
	StdoutBytes int64 `json:"stdout_bytes"`
	// Bytes its output recorded on stderr.
	StderrBytes int64 `json:"stderr_bytes"`
	// Version is the store's row version, never on the wire (see
	// Sandbox.Version).
	Version int64 `json:"-"`
}

// GPUHealth is what GET /healthz says of the node's GPUs: their type and
// how many there are, and how many running workloads hold.
type GPUHealth struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
	InUse int    `json:"in_use"`
}
