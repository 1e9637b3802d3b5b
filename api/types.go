// Package api holds cove's wire types and its one error type. It imports only
// the standard library so that the server, the Go SDK and the CLI share it.
package api

import (
	"slices"
	"time"
)

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
func (s SandboxState) Valid() bool { return slices.Contains(s.Values(), string(s)) }

// Values lists the states in the order of a sandbox's life: the enum of
// the OpenAPI document.
func (SandboxState) Values() []string {
	return []string{
		string(StateCreating), string(StateSettingUp), string(StateRunning), string(StateSleeping), string(StateAsleep),
		string(StateWaking), string(StateTerminating), string(StateTerminated), string(StateFailed),
	}
}

// Resources are what a sandbox reserves.
type Resources struct {
	CPUs      float64 `json:"cpus"`
	MemoryMiB int64   `json:"memory_mib"`
	DiskMiB   int64   `json:"disk_mib"`
}

// NetworkPolicy lists the destinations a sandbox may reach: `host`,
// `*.suffix`, either with `:port`, or `CIDR[:port]`. Nothing else is
// reachable. setup_allow applies instead while a setup command runs.
type NetworkPolicy struct {
	// host, *.suffix, either with :port, or CIDR[:port]. Nothing else is
	// reachable (default: deny all). Private, loopback, link-local and
	// metadata addresses only through a CIDR entry.
	Allow []string `json:"allow"`
	// the policy applied instead while a setup command runs (set at create
	// through setup.network.allow)
	SetupAllow []string `json:"setup_allow,omitempty"`
	// Headers the node's network gateway adds to the sandbox's HTTPS
	// requests to a destination, holding team secrets the sandbox never
	// sees; at most 64. A rule does not allow its destination: allow
	// still decides. In a PATCH, absent keeps the rules and [] removes
	// them.
	Inject []InjectRule `json:"inject,omitempty"`
}

// InjectRule adds a header holding team secrets to the HTTPS requests a
// sandbox sends to one host. The gateway terminates the sandbox's TLS to
// that host with a certificate of a CA of the sandbox's own (installed
// in its CA bundle), checks that each request is for that host, sets the
// header (replacing one the sandbox sent) and replaces, in the request's
// headers, the placeholders of the secrets the rule names; then it sends
// the request on over its own TLS connection, verified against the node's
// trust store and the operator's CAs. Plain HTTP is never injected.
type InjectRule struct {
	// An exact DNS name (no wildcard, no address), e.g. api.openai.com.
	Host string `json:"host"`
	// Default 443.
	Port int `json:"port,omitempty" schema:"minimum=1 maximum=65535"`
	// Limits the rule to request paths beginning with it, e.g. /v1/.
	PathPrefix string `json:"path_prefix,omitempty"`
	// The header set, e.g. Authorization. Host, Connection,
	// Content-Length, Transfer-Encoding, TE, Trailer, Upgrade, Keep-Alive,
	// Expect and Proxy-* cannot be set.
	Header string `json:"header"`
	// The header's value, naming team secrets as {secret:NAME}, e.g.
	// "Bearer {secret:openai}"; at least one.
	Value string `json:"value"`
}

// NetworkPolicyRequest is the network of a create request and of its
// setup: NetworkPolicy without setup_allow (a create sets that through
// setup.network.allow; network.setup_allow answers 400).
type NetworkPolicyRequest struct {
	// Destinations a sandbox may reach, as in NetworkPolicy: host,
	// *.suffix, either with :port, or CIDR[:port]; at most 256. Absent,
	// null or [] reach nothing.
	Allow []string `json:"allow" schema:"nullable optional"`
	// Headers the gateway adds to HTTPS requests, as in NetworkPolicy
	// (not in setup.network: a setup command's requests are never
	// injected).
	Inject []InjectRule `json:"inject,omitempty"`
}

// NetworkObservation is what the node saw of a sandbox's traffic to one
// destination and port.
type NetworkObservation struct {
	// the name (from SNI, Host, CONNECT or DNS) or the IP
	Destination string `json:"destination"`
	Port        int    `json:"port"`
	Decision    string `json:"decision" schema:"enum=allowed,denied"`
	// Reason is set on a denial by one of the node's per-sandbox limits
	// rather than the policy: too many connections through the gateway at
	// once (connection_limit), too many DNS queries in flight (dns_limit).
	Reason string `json:"reason,omitempty" schema:"enum=connection_limit,dns_limit"`
	Count  int64  `json:"count"`
	// bytes the sandbox sent
	BytesOut int64 `json:"bytes_out"`
	// bytes the sandbox received
	BytesIn   int64     `json:"bytes_in"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// the command whose process made the latest connection whose command
	// could be found; empty when none could
	LastCommandID string `json:"last_command_id"`
	// requests the network gateway added an injection rule's header to
	// (network.inject); omitted when none
	Injected int64 `json:"injected,omitempty"`
	// the status of the latest request the gateway terminated for an
	// injection rule: the destination's, or the gateway's own (403 for a
	// request naming another host than its TLS server name, 502 for a
	// destination whose certificate does not verify); omitted when none
	LastStatus int `json:"last_status,omitempty"`
}

// NetworkView answers GET /v1/sandboxes/{ref}/network.
type NetworkView struct {
	Policy       NetworkPolicy        `json:"policy"`
	Observations []NetworkObservation `json:"observations"`
}

// UpdateSandboxRequest is the body of PATCH /v1/sandboxes/{ref}; absent
// fields stay as they are.
type UpdateSandboxRequest struct {
	IdleTimeoutS *int64  `json:"idle_timeout_s,omitempty" schema:"minimum=0"`
	OnIdle       *string `json:"on_idle,omitempty" schema:"enum=sleep,terminate"`
	// counted from created_at; expires_at moves with it
	MaxLifetimeS  *int64   `json:"max_lifetime_s,omitempty" schema:"minimum=0"`
	SpendLimitUSD *float64 `json:"spend_limit_usd,omitempty" schema:"minimum=0"`
	// Default sleep.
	OnBudget *string `json:"on_budget,omitempty" schema:"enum=sleep,terminate"`
	// Percentages of the spend limit at which budget.alert is raised, once
	// each; default [50, 80].
	BudgetAlerts *[]float64     `json:"budget_alerts,omitempty" schema:"exclusiveMinimum=0 exclusiveMaximum=100"`
	Network      *NetworkPolicy `json:"network,omitempty"`
	// replaces all labels
	Labels map[string]string `json:"labels,omitempty"`
}

// Sandbox is a remote machine of an agent's own.
type Sandbox struct {
	// sbx_…
	ID string `json:"id"`
	// Empty when none was given.
	Name string `json:"name"`
	// team_…
	TeamID    string       `json:"team_id"`
	Template  string       `json:"template"`
	State     SandboxState `json:"state"`
	Resources Resources    `json:"resources"`
	// Environment of every command; omitted when empty.
	Env map[string]string `json:"env,omitempty"`
	// Environment variable → secret name (never a value); omitted when
	// empty.
	Secrets map[string]string `json:"secrets,omitempty"`
	// The variables of secrets that hold a placeholder instead of the
	// value (a network.inject rule adds the value on the way out);
	// omitted when none.
	Placeholders []string      `json:"placeholders,omitempty"`
	Workdir      string        `json:"workdir"`
	Network      NetworkPolicy `json:"network"`
	// Labels; {} when none.
	Labels       map[string]string `json:"labels"`
	IdleTimeoutS int64             `json:"idle_timeout_s"`
	OnIdle       string            `json:"on_idle" schema:"enum=sleep,terminate"`
	// 0 means no limit.
	MaxLifetimeS int64 `json:"max_lifetime_s"`
	// null means no limit.
	SpendLimitUSD *float64 `json:"spend_limit_usd"`
	// What happens when spend_limit_usd (or the team's) is reached.
	OnBudget string `json:"on_budget" schema:"enum=sleep,terminate"`
	// Percentages of the spend limit at which budget.alert is raised, once
	// each; default [50, 80].
	BudgetAlerts []float64 `json:"budget_alerts" schema:"exclusiveMinimum=0 exclusiveMaximum=100"`
	// Accrued per second while running (reserved CPUs and memory, egress)
	// and asleep (the save); at most one metrics interval behind; kept
	// after termination.
	CostUSD         float64       `json:"cost_usd"` // stores keep it apart from the other fields
	PricePerHourUSD *PricePerHour `json:"price_per_hour_usd,omitempty"`
	CreatedAt       time.Time     `json:"created_at"`
	// null until it first runs.
	StartedAt *time.Time `json:"started_at"`
	// null until it is first active.
	LastActiveAt *time.Time `json:"last_active_at"`
	// created_at + max_lifetime_s; null without a lifetime.
	ExpiresAt *time.Time `json:"expires_at"`
	// Why it is in this state, notably for failed; empty otherwise.
	StateReason string `json:"state_reason"`
	// The node it is placed on, shown to the admin team only, in a fleet
	// (`cove control`); omitted otherwise.
	Node *SandboxNode `json:"node,omitempty"`
	// The volumes it mounts, as created; omitted when none.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	Provision
	// Version is the store's row version, never on the wire: an update
	// succeeds only on the version it read (internal/store).
	Version int64 `json:"-"`
	// IdempotencyRef is the ID an idempotent create derived from its
	// Idempotency-Key, kept when the sandbox has another (it was taken
	// from the warm pool), so that a second attempt of the request finds
	// it; never on the wire. Stored at create and matched by
	// store.SandboxFilter.IdempotencyRef; reads leave it empty.
	IdempotencyRef string `json:"-"`
	// SetID lets set-uid and set-gid programs (sudo) raise privileges
	// inside the sandbox: its processes run without no_new_privs and its
	// root filesystem without nosuid. Only E2B's listener sets it, at
	// create (internal/e2b); never on the wire, never changed after,
	// stored with the sandbox so that a wake or a restart keeps it
	// (docs/security.md).
	SetID bool `json:"-"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes. Every field is
// optional; unknown fields answer 400.
type CreateSandboxRequest struct {
	// Unique in the team; usable as {ref}.
	Name string `json:"name,omitempty" schema:"pattern=^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"`
	// Default managed (the server's default template).
	Template  string            `json:"template,omitempty"`
	Resources *ResourcesRequest `json:"resources,omitempty"`
	// Variable names match ^[A-Za-z_][A-Za-z0-9_]*$; at most 256.
	Env map[string]string `json:"env,omitempty"`
	// Environment variable → the name of a team secret ("openai"), or
	// {"secret": "openai", "placeholder": true}. A name's value is read
	// when each command starts (an updated secret reaches the next command)
	// and redacted from recorded output. A placeholder variable holds a
	// random cove_ph_… string of this sandbox and secret instead, which
	// the network gateway replaces with the value only in requests to a
	// destination whose network.inject rule names that secret. An unknown
	// name answers 404 not_found.
	Secrets map[string]SecretRef `json:"secrets,omitempty"`
	// Absolute path, not /; default /workspace.
	Workdir      string         `json:"workdir,omitempty"`
	Network      *NetworkPolicy `json:"network,omitempty" schema:"ref=NetworkPolicyRequest"`
	Source       *Source        `json:"source,omitempty"`
	Setup        *Setup         `json:"setup,omitempty"`
	IdleTimeoutS *int64         `json:"idle_timeout_s,omitempty" schema:"minimum=0"`
	// Default sleep.
	OnIdle string `json:"on_idle,omitempty" schema:"enum=sleep,terminate"`
	// 0 means no limit.
	MaxLifetimeS  *int64   `json:"max_lifetime_s,omitempty" schema:"minimum=0"`
	SpendLimitUSD *float64 `json:"spend_limit_usd,omitempty" schema:"minimum=0"`
	// Default sleep.
	OnBudget string `json:"on_budget,omitempty" schema:"enum=sleep,terminate"`
	// Percentages of the spend limit at which budget.alert is raised, once
	// each; default [50, 80].
	BudgetAlerts []float64 `json:"budget_alerts,omitempty" schema:"exclusiveMinimum=0 exclusiveMaximum=100"`
	// At most 64; keys match ^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$, values at
	// most 256 bytes.
	Labels map[string]string `json:"labels,omitempty"`
	// Volumes of the team to mount, at most 16; an unknown one answers
	// 404 not_found.
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// ResourcesRequest is Resources with every field optional; an out-of-range
// value answers 400 with details field, min and max.
type ResourcesRequest struct {
	// Default 1; from 0.1 up to the server's maximum.
	CPUs *float64 `json:"cpus,omitempty"`
	// Default 1024.
	MemoryMiB *int64 `json:"memory_mib,omitempty"`
	// Default 4096.
	DiskMiB *int64 `json:"disk_mib,omitempty"`
	// GPUs is refused for sandboxes (their templates are CPU-based): a
	// value above 0 answers 422, which says to submit the code as a
	// workload (POST /v1/workloads).
	GPUs int `json:"gpus,omitempty" schema:"minimum=0"`
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

// Values lists the command states: the enum of the OpenAPI document.
func (CommandState) Values() []string {
	return []string{string(CommandRunning), string(CommandExited), string(CommandKilled), string(CommandTimedOut), string(CommandLost)}
}

// PTY asks for a pseudo-terminal of the given size.
type PTY struct {
	Cols int `json:"cols" schema:"minimum=1 maximum=1000"`
	Rows int `json:"rows" schema:"minimum=1 maximum=1000"`
}

// Command is one process tree started in a sandbox; it has command or
// argv.
type Command struct {
	// cmd_…
	ID        string `json:"id"`
	SandboxID string `json:"sandbox_id"`
	// The shell string; omitted for argv commands.
	Command string `json:"command,omitempty"`
	// Omitted for shell commands.
	Argv []string `json:"argv,omitempty"`
	Cwd  string   `json:"cwd"`
	// Omitted when empty.
	Env map[string]string `json:"env,omitempty"`
	// The command's own environment variable → secret name (never a value);
	// omitted when empty.
	Secrets map[string]string `json:"secrets,omitempty"`
	User    string            `json:"user" schema:"enum=user,root"`
	// 0 means no timeout.
	TimeoutS int64 `json:"timeout_s"`
	Stdin    bool  `json:"stdin"`
	PTY      *PTY  `json:"pty,omitempty"`
	// Omitted when 0.
	NoOutputAlertS int64        `json:"no_output_alert_s,omitempty"`
	State          CommandState `json:"state"`
	// null while running or when killed by a signal.
	ExitCode  *int      `json:"exit_code"`
	Signal    string    `json:"signal"`
	TimedOut  bool      `json:"timed_out"`
	StartedAt time.Time `json:"started_at"`
	// null while running.
	EndedAt *time.Time `json:"ended_at"`
	// PID is the command's process ID in the sandbox's own pid namespace,
	// as ps and kill inside the sandbox see it: set once the command
	// runs, kept after it ends (the sandbox may then give the number to
	// another process); 0 when not known.
	PID int `json:"pid"`
	// Tag is the caller's name for the command, as sent; omitted when
	// empty.
	Tag         string `json:"tag,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	// Version is the store's row version, never on the wire (see
	// Sandbox.Version).
	Version int64 `json:"-"`
}

// CreateCommandRequest is the body of POST /v1/sandboxes/{ref}/commands:
// exactly one of command and argv.
type CreateCommandRequest struct {
	// A shell string run by /bin/bash -lc.
	Command string `json:"command,omitempty"`
	// A program and its arguments, run with no shell.
	Argv []string `json:"argv,omitempty"`
	// Absolute path; default the sandbox's workdir.
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Environment variable → the name of a team secret; its value is read
	// when each command starts (an updated secret reaches the next command)
	// and redacted from recorded output. An unknown name answers 404
	// not_found. Taken with the sandbox's secrets; a variable in the
	// command's env or secrets wins over the sandbox's.
	Secrets map[string]string `json:"secrets,omitempty"`
	// 0 or absent means no timeout.
	TimeoutS *int64 `json:"timeout_s,omitempty" schema:"minimum=0 maximum=604800"`
	// Keep stdin open for POST …/stdin.
	Stdin          bool   `json:"stdin,omitempty"`
	NoOutputAlertS *int64 `json:"no_output_alert_s,omitempty" schema:"minimum=0"`
	// Default user.
	User string `json:"user,omitempty" schema:"enum=user,root"`
	PTY  *PTY   `json:"pty,omitempty"`
	// Tag is a name of the caller's for the command (E2B's process tag),
	// kept with it and shown; not unique. At most 256 bytes of UTF-8.
	Tag string `json:"tag,omitempty"`
}

// SignalRequest is the body of POST …/commands/{id}/signal.
type SignalRequest struct {
	// e.g. TERM, KILL, INT; sent to the whole process group.
	Signal string `json:"signal"`
}

// CommandResult is the answer of POST …/commands?wait=true; its output is
// UTF-8, invalid bytes replaced.
type CommandResult struct {
	Command   Command `json:"command"`
	Stdout    string  `json:"stdout"`
	Stderr    string  `json:"stderr"`
	Truncated bool    `json:"truncated"`
}

// OutputRecord is one line of the NDJSON output stream (GET
// …/commands/{id}/output): a chunk has stream and data; a gap in the
// record has type truncated; the last record has type exit with
// exit_code, signal and timed_out.
type OutputRecord struct {
	Seq      int64  `json:"seq"`
	Stream   string `json:"stream,omitempty" schema:"enum=stdout,stderr"`
	Data     []byte `json:"data,omitempty"`
	Type     string `json:"type,omitempty" schema:"enum=exit,truncated"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

// Team owns sandboxes, keys and secrets.
type Team struct {
	// team_…
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Admission Admission `json:"admission"`
	// Monthly (UTC calendar month) limit of the team's spend; null means
	// none.
	SpendLimitUSD *float64 `json:"spend_limit_usd"`
	// Percentages of the spend limit at which budget.alert is raised, once
	// each; default [50, 80].
	BudgetAlerts []float64 `json:"budget_alerts" schema:"exclusiveMinimum=0 exclusiveMaximum=100"`
	CreatedAt    time.Time `json:"created_at"`
}

// Admission is the flags that say what a team may use. The admin team has
// every flag.
type Admission struct {
	// sandboxes of the templates the server ships (the managed image and the
	// images of its images dir)
	ManagedEnvironment bool `json:"managed_environment"`
	// publishing sandboxes' ports as previews
	Preview      bool `json:"preview"`
	CustomImages bool `json:"custom_images"`
	GPU          bool `json:"gpu"`
}

// CreateTeamRequest is the body of POST /v1/teams.
type CreateTeamRequest struct {
	// 1-63 lowercase letters, digits and '-'.
	Name string `json:"name"`
}

// CreateTeamResponse answers POST /v1/teams; the key is shown only here.
type CreateTeamResponse struct {
	Team   Team   `json:"team"`
	APIKey string `json:"api_key"`
	KeyID  string `json:"key_id"`
}

// Key formats of CreateKeyRequest.
const (
	// KeyFormatCove is cove's own shape, cove_<hex>; the default.
	KeyFormatCove = "cove"
	// KeyFormatE2B is e2b_<hex>, the shape E2B's SDKs check before they
	// send a key. Either shape is a key of its team on every API.
	KeyFormatE2B = "e2b"
)

// CreateKeyRequest is the body of POST /v1/teams/{id}/keys; it may be
// empty.
type CreateKeyRequest struct {
	// Default cove.
	Format string `json:"format,omitempty" schema:"enum=cove,e2b"`
}

// KeyResponse answers POST /v1/teams/{id}/keys; the key is shown only here.
type KeyResponse struct {
	KeyID  string `json:"key_id"`
	TeamID string `json:"team_id"`
	APIKey string `json:"api_key"`
}

// List is the shape of every list answer.
type List[T any] struct {
	Items []T `json:"items"`
	// Pass as cursor for the next page; empty on the last.
	NextCursor string `json:"next_cursor"`
}

// Event is one entry of a team's event log.
type Event struct {
	// evt_…; IDs sort in the order events were appended and serve as cursors
	ID string `json:"id"`
	// sandbox.creating|setting_up|running|sleeping|asleep|waking|terminating|terminated|failed|expired|idle,
	// command.started|exited|no_output, setup.exited, network.denied, network.injected,
	// budget.alert|exceeded, image.imported|deleted,
	// workload.queued|started|exited|failed|cancelled
	Type      string         `json:"type"`
	SandboxID string         `json:"sandbox_id"`
	CommandID string         `json:"command_id"`
	Time      time.Time      `json:"time"`
	Data      map[string]any `json:"data"`
}
