package netpolicy

import (
	"cmp"
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Decisions recorded in observations.
const (
	Allowed = "allowed"
	Denied  = "denied"
)

// Reasons of denials that are the node's limits rather than the policy's
// (Observation.Reason).
const (
	// ReasonConnectionLimit: the sandbox already had as many connections
	// open through the gateway as GatewayConfig.MaxConns allows.
	ReasonConnectionLimit = "connection_limit"
	// ReasonDNSLimit: the sandbox already had as many DNS queries in
	// flight (or TCP connections open to the resolver) as
	// ResolverConfig.MaxQueries allows.
	ReasonDNSLimit = "dns_limit"
)

// Observation is what a sandbox did with one destination and port, for one
// decision: a name (from DNS, SNI, Host or CONNECT) or, when none was known,
// an address.
type Observation struct {
	Destination string `json:"destination"`
	Port        int    `json:"port"`
	Decision    string `json:"decision"`
	// Reason is empty for decisions of the policy (and of the node's own
	// rules); a denial by one of the node's per-sandbox limits says which
	// (ReasonConnectionLimit, ReasonDNSLimit) and is counted apart.
	Reason string `json:"reason,omitempty"`
	Count  int64  `json:"count"`
	// BytesOut counts bytes the sandbox sent through the gateway, BytesIn the
	// bytes it received.
	BytesOut  int64     `json:"bytes_out"`
	BytesIn   int64     `json:"bytes_in"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// LastCommandID is the command whose process made the latest
	// connection of this observation whose command was found (Owners);
	// empty when none was.
	LastCommandID string `json:"last_command_id"`
	// Injected counts the requests the gateway added an injection rule's
	// header to; LastStatus is the status of the latest of them, or the
	// gateway's own refusal (403 for a request to another host, 502 for
	// an upstream that does not verify).
	Injected   int64 `json:"injected,omitempty"`
	LastStatus int   `json:"last_status,omitempty"`
}

// Denial is what OnDenied is told of one denial.
type Denial struct {
	// Observation is the observation the denial was counted in, as it
	// stands: its Count includes the denials of that destination that were
	// not reported on their own (DeniedEvery).
	Observation
	// Suppressed counts the sandbox's other denials that DeniedPerSecond
	// held back since its previous report; they are in the observations,
	// and in no other report.
	Suppressed int64
}

// Report is what a sandbox did since the last Drain, for one observation:
// counts and bytes to add, first and last seen in that time, and a command
// learnt in that time.
type Report struct {
	SandboxID string
	Observation
}

// RegistryConfig configures a Registry. The zero value is usable.
type RegistryConfig struct {
	// DeniedEvery limits OnDenied to one call per sandbox, destination and
	// port in this interval. Default 10s; negative: every denial.
	DeniedEvery time.Duration
	// DeniedPerSecond limits OnDenied to this many calls a second per
	// sandbox, all destinations together (a token bucket holding as many):
	// a sandbox that is denied thousands of destinations a second cannot
	// flood the event log. A denial held back is counted, and the count
	// goes with the sandbox's next report (Denial.Suppressed); Run makes
	// that report once the sandbox's rate allows, if no denial does first.
	// Default 10; negative: no bound.
	DeniedPerSecond float64
	// OnDenied, if set, is called for denials (rate-limited), outside any
	// lock, on the goroutine that denied or Run's; it should not block for
	// long. The server turns it into a network.denied event.
	OnDenied func(sandboxID string, d Denial)
	// Now is the clock; default time.Now.
	Now func() time.Time
	// MaxObservations bounds the observations kept per sandbox; past it, new
	// destinations are counted under the destination "other", port 0.
	// Default 4096.
	MaxObservations int
	// MaxRemembered bounds the (address, name) pairs the resolver remembers
	// per sandbox; past it the oldest are forgotten. Default 16384.
	MaxRemembered int
	// Owners, if set, names the commands whose processes hold sockets of a
	// sandbox (the node asks the sandbox's agent): the i-th ID answers
	// socks[i], "" when unknown. It is called only while RunOwners runs,
	// at most once at a time per sandbox, with batches of at most
	// MaxOwnerBatch sockets.
	Owners func(ctx context.Context, sandboxID string, socks []Socket) ([]string, error)
	// OwnerTimeout bounds one call of Owners. Default 2s.
	OwnerTimeout time.Duration
	// OwnerWait bounds how long a denial waits for its connection's owner
	// to be found before it is answered: once the sandbox's socket is
	// reset or closed, its holder cannot be found. Allowed connections
	// never wait. Default 500ms.
	OwnerWait time.Duration
	// Counters, if set, counts every decision and the bytes moved, for the
	// operators' metrics.
	Counters Counters
	// OnInjected, if set, is told of requests the gateway terminated for
	// an injection rule: once a minute at most per sandbox, destination
	// and rule for those that went through, and every failure. It is
	// called outside any lock and never given a secret's value.
	OnInjected func(sandboxID string, e InjectEvent)
	// InjectedEvery is the interval of OnInjected's reports of requests
	// that went through. Default 1 minute.
	InjectedEvery time.Duration
}

// Counters is told every decision (Allowed, Denied) and the bytes the
// gateway moved; it is called outside any lock and must not block.
type Counters interface {
	GatewayDecision(decision string)
	GatewayBytes(out, in int64)
}

func (c *RegistryConfig) setDefaults() {
	if c.DeniedEvery == 0 {
		c.DeniedEvery = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxObservations <= 0 {
		c.MaxObservations = 4096
	}
	if c.MaxRemembered <= 0 {
		c.MaxRemembered = 16384
	}
	if c.DeniedPerSecond == 0 {
		c.DeniedPerSecond = 10
	}
	if c.OwnerTimeout <= 0 {
		c.OwnerTimeout = 2 * time.Second
	}
	if c.OwnerWait <= 0 {
		c.OwnerWait = 500 * time.Millisecond
	}
	if c.InjectedEvery <= 0 {
		c.InjectedEvery = time.Minute
	}
}

// Registry holds the sandboxes known to a node, by source address: their
// policies, what the resolver told them and what they did. It is safe for
// concurrent use.
type Registry struct {
	cfg RegistryConfig
	log *slog.Logger

	mu     sync.Mutex
	byID   map[string]*sandbox
	byAddr map[netip.Addr]*sandbox
	// holding are the sandboxes with denials held back by DeniedPerSecond
	// and not yet reported.
	holding map[*sandbox]struct{}
	// gone are removed sandboxes with reports not drained yet (connections
	// still open may add to them).
	gone map[*sandbox]struct{}

	owners owners
}

// sandbox is one sandbox's state, guarded by Registry.mu. Connections keep a
// pointer to it, so one that outlives Remove updates a forgotten struct.
type sandbox struct {
	id      string
	addr    netip.Addr
	policy  Policy
	setup   Policy
	inSetup bool

	obs        map[obsKey]*Observation
	pending    map[obsKey]*Observation // what Drain has not taken yet
	cmdSeq     map[obsKey]uint64       // the connection whose command obs names
	removed    bool
	lastDenied map[destKey]time.Time
	given      map[netip.Addr]map[string]time.Time // address → names it was given for → when
	nGiven     int

	// life ends when the sandbox is removed, and with it the sandbox's
	// connections through the gateway: a relay to a destination that never
	// reads nor closes outlives no sandbox.
	life context.Context
	end  context.CancelFunc

	// held counts what the sandbox holds of the node now, by kind (slot).
	held [nSlots]int
	// tokens of the DeniedPerSecond bucket, as of tokensAt.
	tokens   float64
	tokensAt time.Time
	// suppressed counts denials held back by DeniedPerSecond since the last
	// report; lastHeld is the observation of the last of them.
	suppressed int64
	lastHeld   obsKey

	// inject are the sandbox's injection rules and secrets, ca the CA its
	// gateway leaves are signed by; lastInjected when each destination
	// and rule was last reported.
	inject       *Injection
	ca           *SandboxCA
	lastInjected map[injectKey]time.Time
}

// slot is a kind of what a sandbox holds of the node at once.
type slot int

const (
	slotConn  slot = iota // a connection open through the gateway
	slotQuery             // a DNS query in flight, or a TCP connection to the resolver
	nSlots
)

type destKey struct {
	dest string
	port int
}

type obsKey struct {
	destKey
	decision string
	reason   string
}

// NewRegistry returns an empty registry.
func NewRegistry(cfg RegistryConfig, log *slog.Logger) *Registry {
	cfg.setDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{
		cfg:     cfg,
		log:     log,
		byID:    make(map[string]*sandbox),
		byAddr:  make(map[netip.Addr]*sandbox),
		holding: make(map[*sandbox]struct{}),
		gone:    make(map[*sandbox]struct{}),
		owners:  owners{queues: make(map[string]*ownerQueue), wake: make(chan struct{}, 1)},
	}
}

// Add makes a sandbox known at source address addr with its normal and setup
// policies. Adding a known sandbox again moves it to addr and replaces its
// policies, keeping its observations and remembered addresses. A sandbox
// previously at addr is no longer found by address.
func (r *Registry) Add(sandboxID string, addr netip.Addr, policy, setup Policy) {
	addr = addr.Unmap()
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.byID[sandboxID]
	if sb == nil {
		sb = &sandbox{
			id:           sandboxID,
			obs:          make(map[obsKey]*Observation),
			pending:      make(map[obsKey]*Observation),
			cmdSeq:       make(map[obsKey]uint64),
			lastDenied:   make(map[destKey]time.Time),
			lastInjected: make(map[injectKey]time.Time),
			given:        make(map[netip.Addr]map[string]time.Time),
			tokens:       max(r.cfg.DeniedPerSecond, 0),
			tokensAt:     r.cfg.Now(),
		}
		sb.life, sb.end = context.WithCancel(context.Background())
		r.byID[sandboxID] = sb
	} else if r.byAddr[sb.addr] == sb {
		delete(r.byAddr, sb.addr)
	}
	if old := r.byAddr[addr]; old != nil && old != sb {
		r.log.Warn("address moved to another sandbox", "addr", addr, "from", old.id, "to", sandboxID)
	}
	sb.addr, sb.policy, sb.setup = addr, policy, setup
	r.byAddr[addr] = sb
}

// SetPolicy replaces a sandbox's policies; new connections and DNS queries
// use them at once. It does nothing for an unknown sandbox.
func (r *Registry) SetPolicy(sandboxID string, policy, setup Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb := r.byID[sandboxID]; sb != nil {
		sb.policy, sb.setup = policy, setup
	}
}

// UseSetup switches a sandbox to its setup policy (on) or back to its normal
// policy, for new connections and DNS queries.
func (r *Registry) UseSetup(sandboxID string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb := r.byID[sandboxID]; sb != nil {
		sb.inSetup = on
	}
}

// Policy returns the policy a sandbox uses now and whether it is its setup
// policy.
func (r *Registry) Policy(sandboxID string) (p Policy, setup, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.byID[sandboxID]
	if sb == nil {
		return Policy{}, false, false
	}
	return sb.current(), sb.inSetup, true
}

// Remove forgets a sandbox: its policies, observations and remembered
// addresses. Its connections through the gateway are closed (its network
// is going away; a destination that never reads nor closes would hold
// them for good). What Drain has not taken yet, and what those
// connections add as they end, stays for Drain.
func (r *Registry) Remove(sandboxID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.byID[sandboxID]
	if sb == nil {
		return
	}
	sb.removed = true
	sb.end()
	if len(sb.pending) > 0 {
		r.gone[sb] = struct{}{}
	}
	delete(r.byID, sandboxID)
	delete(r.holding, sb)
	if r.byAddr[sb.addr] == sb {
		delete(r.byAddr, sb.addr)
	}
}

// Observations returns a sandbox's observations sorted by destination, port,
// decision and reason.
func (r *Registry) Observations(sandboxID string) []Observation {
	r.mu.Lock()
	sb := r.byID[sandboxID]
	var out []Observation
	if sb != nil {
		out = make([]Observation, 0, len(sb.obs))
		for _, o := range sb.obs {
			out = append(out, *o)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, compareObs)
	return out
}

func (sb *sandbox) current() Policy {
	if sb.inSetup {
		return sb.setup
	}
	return sb.policy
}

// peer is a snapshot of the sandbox behind a source address, taken when a
// connection or query arrives.
type peer struct {
	sb     *sandbox
	id     string
	policy Policy
	setup  bool
	// conn looks up the command behind the connection; nil when none is
	// looked up.
	conn *conn
	// sock is the sandbox's socket of a DNS query, looked up only when the
	// query is denied.
	sock Socket
	// inject and ca are the sandbox's injection, when it has rules (never
	// in its setup policy).
	inject *Injection
	ca     *SandboxCA
}

func (r *Registry) peer(addr netip.Addr) (peer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.byAddr[addr.Unmap()]
	if sb == nil {
		return peer{}, false
	}
	return sb.peer(), true
}

// peer snapshots sb; the caller holds Registry.mu.
func (sb *sandbox) peer() peer {
	p := peer{sb: sb, id: sb.id, policy: sb.current(), setup: sb.inSetup}
	if !sb.inSetup && sb.ca != nil && sb.inject != nil && len(sb.inject.Rules) > 0 {
		p.inject, p.ca = sb.inject, sb.ca
	}
	return p
}

// admit finds the sandbox at addr, as peer does, and takes one of its
// slots of kind k if it holds fewer than max of them (max <= 0: no bound).
// known is false for an address that is no sandbox's; ok is false for a
// sandbox at its bound. A slot taken is given back with release.
func (r *Registry) admit(addr netip.Addr, k slot, max int) (p peer, known, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb := r.byAddr[addr.Unmap()]
	if sb == nil {
		return peer{}, false, false
	}
	p = sb.peer()
	if max > 0 && sb.held[k] >= max {
		return p, true, false
	}
	sb.held[k]++
	return p, true, true
}

// release gives back a slot admit took.
func (r *Registry) release(sb *sandbox, k slot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb.held[k] > 0 {
		sb.held[k]--
	}
}

// held reports how many gateway connections and DNS slots a sandbox holds
// now.
func (r *Registry) held(sandboxID string) (conns, queries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sb := r.byID[sandboxID]; sb != nil {
		return sb.held[slotConn], sb.held[slotQuery]
	}
	return 0, 0
}

// remember records that the resolver gave addrs to a sandbox for name.
func (r *Registry) remember(sb *sandbox, name string, addrs []netip.Addr) {
	name = normName(name)
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range addrs {
		a = a.Unmap()
		names := sb.given[a]
		if names == nil {
			names = make(map[string]time.Time)
			sb.given[a] = names
		}
		if _, ok := names[name]; !ok {
			sb.nGiven++
		}
		names[name] = now
	}
	for sb.nGiven > r.cfg.MaxRemembered {
		sb.forgetOldest()
	}
}

// forgetOldest drops the (address, name) pair given longest ago. It is
// linear, and runs only once the bound is reached.
func (sb *sandbox) forgetOldest() {
	var (
		oldA netip.Addr
		oldN string
		oldT time.Time
	)
	for a, names := range sb.given {
		for n, t := range names {
			if oldN == "" || t.Before(oldT) {
				oldA, oldN, oldT = a, n, t
			}
		}
	}
	if oldN == "" {
		sb.nGiven = 0
		return
	}
	delete(sb.given[oldA], oldN)
	if len(sb.given[oldA]) == 0 {
		delete(sb.given, oldA)
	}
	sb.nGiven--
}

// gave reports whether the resolver gave addr to the sandbox for name.
func (r *Registry) gave(sb *sandbox, addr netip.Addr, name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := sb.given[addr.Unmap()][normName(name)]
	return ok
}

// namesFor returns the names the resolver gave addr to the sandbox for,
// sorted.
func (r *Registry) namesFor(sb *sandbox, addr netip.Addr) []string {
	r.mu.Lock()
	names := sb.given[addr.Unmap()]
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	r.mu.Unlock()
	slices.Sort(out)
	return out
}

// observe counts one decision and, for a denial that is not rate-limited,
// calls OnDenied. A denial first waits (OwnerWait at most) for the command
// behind the connection to be found, while the sandbox still holds its
// socket. It returns the key to add bytes under.
func (r *Registry) observe(p peer, dest string, port int, decision string) obsKey {
	return r.record(p, obsKey{destKey{dest, port}, decision, ""})
}

// refuse counts a denial by one of the node's limits (reason), apart from
// the policy's denials of the same destination.
func (r *Registry) refuse(sb *sandbox, dest string, port int, reason string) {
	r.record(peer{sb: sb, id: sb.id}, obsKey{destKey{dest, port}, Denied, reason})
}

func (r *Registry) record(p peer, k obsKey) obsKey {
	sb := p.sb
	if k.decision == Denied && p.conn != nil {
		p.conn.wait(r.cfg.OwnerWait)
	}
	now := r.cfg.Now()
	r.mu.Lock()
	o := sb.obs[k]
	if o == nil {
		if len(sb.obs) >= r.cfg.MaxObservations {
			k.destKey = destKey{"other", 0}
			o = sb.obs[k]
		}
		if o == nil {
			o = &Observation{Destination: k.dest, Port: k.port, Decision: k.decision, Reason: k.reason, FirstSeen: now}
			sb.obs[k] = o
		}
	}
	o.Count++
	o.LastSeen = now
	po := r.pendingLocked(sb, k, now)
	po.Count++
	if p.conn != nil {
		p.conn.countedLocked(r, k)
	}
	var (
		notify bool
		d      Denial
	)
	if k.decision == Denied && r.cfg.OnDenied != nil && r.byID[sb.id] == sb {
		last, seen := sb.lastDenied[k.destKey]
		if !seen || r.cfg.DeniedEvery < 0 || now.Sub(last) >= r.cfg.DeniedEvery {
			if r.spend(sb, now) {
				notify = true
				d = Denial{Observation: *o, Suppressed: sb.suppressed}
				// The event names this connection's command, not the
				// observation's latest.
				d.LastCommandID = ""
				if p.conn != nil {
					d.LastCommandID = p.conn.command()
				}
				sb.suppressed = 0
				delete(r.holding, sb)
				r.reported(sb, k.destKey, now)
			} else {
				sb.suppressed++
				sb.lastHeld = k
				r.holding[sb] = struct{}{}
			}
		}
	}
	r.mu.Unlock()
	if r.cfg.Counters != nil {
		r.cfg.Counters.GatewayDecision(k.decision)
	}
	if notify {
		if k.reason != "" {
			// Rate-limited as the reports are: the operator sees which
			// sandboxes run into the node's limits.
			r.log.Info("sandbox at a network limit", "sandbox", sb.id, "reason", k.reason, "destination", k.dest, "port", k.port, "count", d.Count, "suppressed", d.Suppressed)
		}
		r.cfg.OnDenied(sb.id, d)
	}
	return k
}

// reported notes that a denial of dest was reported now.
func (r *Registry) reported(sb *sandbox, dest destKey, now time.Time) {
	sb.lastDenied[dest] = now
	if len(sb.lastDenied) > 2*r.cfg.MaxObservations {
		sb.pruneDenied(now, r.cfg.DeniedEvery)
	}
}

// spend takes a token of the sandbox's DeniedPerSecond bucket, if it has
// one.
func (r *Registry) spend(sb *sandbox, now time.Time) bool {
	rate := r.cfg.DeniedPerSecond
	if rate < 0 {
		return true
	}
	if dt := now.Sub(sb.tokensAt); dt > 0 {
		sb.tokens = min(rate, sb.tokens+dt.Seconds()*rate)
	}
	sb.tokensAt = now
	if sb.tokens < 1 {
		return false
	}
	sb.tokens--
	return true
}

// Run reports, about once a second until ctx is done, the denials that
// DeniedPerSecond held back and no later report carried: for each such
// sandbox whose rate allows, the last one held back, with the count of the
// others. It returns nil when ctx is done.
func (r *Registry) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.flush()
		}
	}
}

// flush makes the reports Run makes.
func (r *Registry) flush() {
	if r.cfg.OnDenied == nil {
		return
	}
	type report struct {
		id string
		d  Denial
	}
	var out []report
	now := r.cfg.Now()
	r.mu.Lock()
	for sb := range r.holding {
		if r.byID[sb.id] != sb {
			delete(r.holding, sb)
			continue
		}
		if !r.spend(sb, now) {
			continue
		}
		o := sb.obs[sb.lastHeld]
		if o == nil { // counted under "other"
			o = sb.obs[obsKey{destKey{"other", 0}, sb.lastHeld.decision, sb.lastHeld.reason}]
		}
		if o != nil {
			out = append(out, report{sb.id, Denial{Observation: *o, Suppressed: sb.suppressed - 1}})
		}
		sb.suppressed = 0
		delete(r.holding, sb)
		r.reported(sb, sb.lastHeld.destKey, now)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b report) int { return cmp.Compare(a.id, b.id) })
	for _, rep := range out {
		r.cfg.OnDenied(rep.id, rep.d)
	}
}

func (sb *sandbox) pruneDenied(now time.Time, every time.Duration) {
	for k, t := range sb.lastDenied {
		if now.Sub(t) >= every {
			delete(sb.lastDenied, k)
		}
	}
}

// addBytes adds transferred bytes to an observation.
func (r *Registry) addBytes(sb *sandbox, k obsKey, out, in int64) {
	if out == 0 && in == 0 {
		return
	}
	if r.cfg.Counters != nil {
		r.cfg.Counters.GatewayBytes(out, in)
	}
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if o := sb.obs[k]; o != nil {
		o.BytesOut += out
		o.BytesIn += in
		o.LastSeen = now
		po := r.pendingLocked(sb, k, now)
		po.BytesOut += out
		po.BytesIn += in
	}
}

// pendingLocked returns the report of k that Drain has not taken yet,
// starting one seen now, and marks it seen now.
func (r *Registry) pendingLocked(sb *sandbox, k obsKey, now time.Time) *Observation {
	po := sb.pending[k]
	if po == nil {
		po = &Observation{Destination: k.dest, Port: k.port, Decision: k.decision, Reason: k.reason, FirstSeen: now}
		sb.pending[k] = po
		if sb.removed {
			r.gone[sb] = struct{}{}
		}
	}
	po.LastSeen = now
	return po
}

// attributeLocked makes cmd the command of observation k, unless a later
// connection's command already is.
func (r *Registry) attributeLocked(sb *sandbox, k obsKey, seq uint64, cmd string) {
	o := sb.obs[k]
	if cmd == "" || o == nil || seq < sb.cmdSeq[k] {
		return
	}
	sb.cmdSeq[k] = seq
	o.LastCommandID = cmd
	po := sb.pending[k]
	if po == nil {
		// Drain took the counts already: report the command alone, at
		// the time the observation was last seen.
		po = r.pendingLocked(sb, k, o.LastSeen)
		po.FirstSeen = o.LastSeen
	}
	po.LastCommandID = cmd
}

// Drain returns every sandbox's reports since the last Drain, removed
// sandboxes' included, and starts anew. The caller adds them to what it
// keeps.
func (r *Registry) Drain() []Report {
	r.mu.Lock()
	var out []Report
	take := func(sb *sandbox) {
		for _, o := range sb.pending {
			out = append(out, Report{SandboxID: sb.id, Observation: *o})
		}
		clear(sb.pending)
	}
	for _, sb := range r.byID {
		take(sb)
	}
	for sb := range r.gone {
		take(sb)
	}
	clear(r.gone)
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Report) int {
		return cmp.Or(cmp.Compare(a.SandboxID, b.SandboxID), compareObs(a.Observation, b.Observation))
	})
	return out
}

// Pending returns a sandbox's reports that Drain has not taken yet (a
// sandbox removed and added again may have two of one observation).
func (r *Registry) Pending(sandboxID string) []Observation {
	r.mu.Lock()
	var out []Observation
	take := func(sb *sandbox) {
		for _, o := range sb.pending {
			out = append(out, *o)
		}
	}
	if sb := r.byID[sandboxID]; sb != nil {
		take(sb)
	}
	for sb := range r.gone {
		if sb.id == sandboxID {
			take(sb)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, compareObs)
	return out
}

func compareObs(a, b Observation) int {
	return cmp.Or(cmp.Compare(a.Destination, b.Destination), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Decision, b.Decision), cmp.Compare(a.Reason, b.Reason))
}
