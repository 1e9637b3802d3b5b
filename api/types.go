// Package api holds cove's wire types and its one error type. It imports only
// the standard library so that the server, the Go SDK and the CLI share it.
package api

import "time"

// SandboxState is a step of a sandbox's life (API.md "Sandboxes").
type SandboxState string

// Sandbox states.
const (
	StateCreating    SandboxState = "creating"
	StateSettingUp   SandboxState = "setting_up"
	StateRunning     SandboxState = "running"
	StateSleeping    SandboxState = "sleeping"
	StateAsleep      SandboxState = "asleep"
	StateWaking      SandboxState = "waking"
	StateTerminating SandboxState = "terminating"
	StateTerminated  SandboxState = "terminated"
	StateFailed      SandboxState = "failed"
)

// Terminal reports whether a sandbox in state s can never run again.
func (s SandboxState) Terminal() bool { return s == StateTerminated || s == StateFailed }

// Valid reports whether s is one of the known states.
func (s SandboxState) Valid() bool {
	switch s {
	case StateCreating, StateSettingUp, StateRunning, StateSleeping, StateAsleep,
		StateWaking, StateTerminating, StateTerminated, StateFailed:
		return true
	}
	return false
}

// Resources are what a sandbox reserves.
type Resources struct {
	CPUs      float64 `json:"cpus"`
	MemoryMiB int64   `json:"memory_mib"`
	DiskMiB   int64   `json:"disk_mib"`
}

// NetworkPolicy lists the destinations a sandbox may reach: `host`,
// `*.suffix`, either with `:port`, or `CIDR[:port]`. Nothing else is
// reachable. SetupAllow applies instead while a setup command runs.
type NetworkPolicy struct {
	Allow      []string `json:"allow"`
	SetupAllow []string `json:"setup_allow,omitempty"`
}

// NetworkObservation is what the node saw of a sandbox's traffic to one
// destination and port.
type NetworkObservation struct {
	Destination string `json:"destination"`
	Port        int    `json:"port"`
	Decision    string `json:"decision"` // allowed or denied
	// Reason is set on a denial by one of the node's per-sandbox limits
	// rather than the policy: connection_limit or dns_limit.
	Reason        string    `json:"reason,omitempty"`
	Count         int64     `json:"count"`
	BytesOut      int64     `json:"bytes_out"`
	BytesIn       int64     `json:"bytes_in"`
	FirstSeen     time.Time `json:"first_seen"`
	LastSeen      time.Time `json:"last_seen"`
	LastCommandID string    `json:"last_command_id"`
}

// NetworkView answers GET /v1/sandboxes/{ref}/network.
type NetworkView struct {
	Policy       NetworkPolicy        `json:"policy"`
	Observations []NetworkObservation `json:"observations"`
}

// UpdateSandboxRequest is the body of PATCH /v1/sandboxes/{ref}; absent
// fields stay as they are.
type UpdateSandboxRequest struct {
	IdleTimeoutS  *int64            `json:"idle_timeout_s,omitempty"`
	OnIdle        *string           `json:"on_idle,omitempty"`
	MaxLifetimeS  *int64            `json:"max_lifetime_s,omitempty"`
	SpendLimitUSD *float64          `json:"spend_limit_usd,omitempty"`
	OnBudget      *string           `json:"on_budget,omitempty"`
	BudgetAlerts  *[]float64        `json:"budget_alerts,omitempty"`
	Network       *NetworkPolicy    `json:"network,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// Sandbox is a remote machine of an agent's own.
type Sandbox struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	TeamID    string            `json:"team_id"`
	Template  string            `json:"template"`
	State     SandboxState      `json:"state"`
	Resources Resources         `json:"resources"`
	Env       map[string]string `json:"env,omitempty"`
	// Secrets maps environment variables to the names of team secrets.
	Secrets       map[string]string `json:"secrets,omitempty"`
	Workdir       string            `json:"workdir"`
	Network       NetworkPolicy     `json:"network"`
	Labels        map[string]string `json:"labels"`
	IdleTimeoutS  int64             `json:"idle_timeout_s"`
	OnIdle        string            `json:"on_idle"`
	MaxLifetimeS  int64             `json:"max_lifetime_s"`
	SpendLimitUSD *float64          `json:"spend_limit_usd"`
	OnBudget      string            `json:"on_budget"`
	BudgetAlerts  []float64         `json:"budget_alerts"`
	// CostUSD is accrued by the meter, at most one sampling interval
	// behind; stores keep it apart from the other fields.
	CostUSD         float64       `json:"cost_usd"`
	PricePerHourUSD *PricePerHour `json:"price_per_hour_usd,omitempty"`
	CreatedAt       time.Time     `json:"created_at"`
	StartedAt       *time.Time    `json:"started_at"`
	LastActiveAt    *time.Time    `json:"last_active_at"`
	ExpiresAt       *time.Time    `json:"expires_at"`
	StateReason     string        `json:"state_reason"`
	Provision
}

// CreateSandboxRequest is the body of POST /v1/sandboxes. Every field is
// optional; pointers tell "absent" from "zero".
type CreateSandboxRequest struct {
	Name          string            `json:"name,omitempty"`
	Template      string            `json:"template,omitempty"`
	Resources     *ResourcesRequest `json:"resources,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Secrets       map[string]string `json:"secrets,omitempty"`
	Workdir       string            `json:"workdir,omitempty"`
	Network       *NetworkPolicy    `json:"network,omitempty"`
	Source        *Source           `json:"source,omitempty"`
	Setup         *Setup            `json:"setup,omitempty"`
	IdleTimeoutS  *int64            `json:"idle_timeout_s,omitempty"`
	OnIdle        string            `json:"on_idle,omitempty"`
	MaxLifetimeS  *int64            `json:"max_lifetime_s,omitempty"`
	SpendLimitUSD *float64          `json:"spend_limit_usd,omitempty"`
	OnBudget      string            `json:"on_budget,omitempty"`
	BudgetAlerts  []float64         `json:"budget_alerts,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// ResourcesRequest is Resources with every field optional.
type ResourcesRequest struct {
	CPUs      *float64 `json:"cpus,omitempty"`
	MemoryMiB *int64   `json:"memory_mib,omitempty"`
	DiskMiB   *int64   `json:"disk_mib,omitempty"`
	// GPUs is refused for sandboxes (their templates are CPU-based): GPU
	// code runs as a workload (POST /v1/workloads).
	GPUs int `json:"gpus,omitempty"`
}

// CommandState is a step of a command's life.
type CommandState string

// Command states.
const (
	CommandRunning  CommandState = "running"
	CommandExited   CommandState = "exited"
	CommandKilled   CommandState = "killed"
	CommandTimedOut CommandState = "timed_out"
	CommandLost     CommandState = "lost"
)

// Done reports whether a command in state s has ended.
func (s CommandState) Done() bool { return s != CommandRunning && s != "" }

// PTY asks for a pseudo-terminal of the given size.
type PTY struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Command is one process tree started in a sandbox.
type Command struct {
	ID             string            `json:"id"`
	SandboxID      string            `json:"sandbox_id"`
	Command        string            `json:"command,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	Cwd            string            `json:"cwd"`
	Env            map[string]string `json:"env,omitempty"`
	Secrets        map[string]string `json:"secrets,omitempty"`
	User           string            `json:"user"`
	TimeoutS       int64             `json:"timeout_s"`
	Stdin          bool              `json:"stdin"`
	PTY            *PTY              `json:"pty,omitempty"`
	NoOutputAlertS int64             `json:"no_output_alert_s,omitempty"`
	State          CommandState      `json:"state"`
	ExitCode       *int              `json:"exit_code"`
	Signal         string            `json:"signal"`
	TimedOut       bool              `json:"timed_out"`
	StartedAt      time.Time         `json:"started_at"`
	EndedAt        *time.Time        `json:"ended_at"`
	StdoutBytes    int64             `json:"stdout_bytes"`
	StderrBytes    int64             `json:"stderr_bytes"`
}

// CreateCommandRequest is the body of POST /v1/sandboxes/{ref}/commands.
type CreateCommandRequest struct {
	Command        string            `json:"command,omitempty"`
	Argv           []string          `json:"argv,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Secrets        map[string]string `json:"secrets,omitempty"`
	TimeoutS       *int64            `json:"timeout_s,omitempty"`
	Stdin          bool              `json:"stdin,omitempty"`
	NoOutputAlertS *int64            `json:"no_output_alert_s,omitempty"`
	User           string            `json:"user,omitempty"`
	PTY            *PTY              `json:"pty,omitempty"`
}

// CommandResult answers POST …/commands?wait=true.
type CommandResult struct {
	Command   Command `json:"command"`
	Stdout    string  `json:"stdout"`
	Stderr    string  `json:"stderr"`
	Truncated bool    `json:"truncated"`
}

// OutputRecord is one line of GET …/commands/{id}/output (NDJSON). A chunk
// has Stream and Data; the last record has Type "exit".
type OutputRecord struct {
	Seq      int64  `json:"seq"`
	Stream   string `json:"stream,omitempty"`
	Data     []byte `json:"data,omitempty"`
	Type     string `json:"type,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// Team owns sandboxes, keys and secrets.
type Team struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Admission Admission `json:"admission"`
	// SpendLimitUSD bounds the team's spend in a calendar month (UTC).
	SpendLimitUSD *float64  `json:"spend_limit_usd"`
	BudgetAlerts  []float64 `json:"budget_alerts"`
	CreatedAt     time.Time `json:"created_at"`
}

// Admission flags say what a team may use.
type Admission struct {
	ManagedEnvironment bool `json:"managed_environment"`
	Preview            bool `json:"preview"`
	CustomImages       bool `json:"custom_images"`
	GPU                bool `json:"gpu"`
}

// CreateTeamRequest is the body of POST /v1/teams.
type CreateTeamRequest struct {
	Name string `json:"name"`
}

// CreateTeamResponse answers POST /v1/teams; the key is shown only here.
type CreateTeamResponse struct {
	Team   Team   `json:"team"`
	APIKey string `json:"api_key"`
	KeyID  string `json:"key_id"`
}

// KeyResponse answers POST /v1/teams/{id}/keys; the key is shown only here.
type KeyResponse struct {
	KeyID  string `json:"key_id"`
	TeamID string `json:"team_id"`
	APIKey string `json:"api_key"`
}

// List is the shape of every list answer.
type List[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

// Event is one entry of a team's event log.
type Event struct {
	ID        string         `json:"id"`
	Type      string         `json:"type"`
	SandboxID string         `json:"sandbox_id"`
	CommandID string         `json:"command_id"`
	Time      time.Time      `json:"time"`
	Data      map[string]any `json:"data"`
}
