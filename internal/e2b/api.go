package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/httpapi"
)

// API serves E2B's REST API (the SDKs' E2B_API_URL) over cove's control
// plane. Keys are cove keys, sent as X-API-Key; errors are E2B's
// {code, message} with the HTTP status in code.
type API struct {
	cfg       Config
	sandboxes Sandboxes
	keys      Keys
	metrics   Metrics
	tokens    *Tokens
	log       *slog.Logger
	now       func() time.Time
	mux       *http.ServeMux
}

// NewAPI returns the REST API; metrics may be nil (GET …/metrics answers
// an empty list).
func NewAPI(cfg Config, sandboxes Sandboxes, keys Keys, metrics Metrics, tokens *Tokens, log *slog.Logger, now func() time.Time) *API {
	a := &API{cfg: cfg, sandboxes: sandboxes, keys: keys, metrics: metrics, tokens: tokens, log: log, now: now, mux: http.NewServeMux()}
	a.handle("POST /sandboxes", a.create)
	a.handle("POST /v2/sandboxes", a.create)
	a.handle("GET /sandboxes", a.listRunning)
	a.handle("GET /v2/sandboxes", a.list)
	a.handle("GET /sandboxes/{id}", a.get)
	a.handle("DELETE /sandboxes/{id}", a.kill)
	a.handle("POST /sandboxes/{id}/timeout", a.setTimeout)
	a.handle("POST /sandboxes/{id}/connect", a.connect)
	a.handle("POST /v2/sandboxes/{id}/connect", a.connect)
	a.handle("POST /sandboxes/{id}/resume", a.connect)
	a.handle("POST /sandboxes/{id}/pause", a.pause)
	a.handle("GET /sandboxes/{id}/metrics", a.sandboxMetrics)
	a.handle("/", func(w http.ResponseWriter, r *http.Request, _ string) error {
		return api.Errorf(api.CodeNotFound, "cove's E2B API has no %s %s", r.Method, r.URL.Path)
	})
	return a
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, teamID string) error

// handle registers fn behind the key check; every route needs a key, so
// the API's shape is not probed without one.
func (a *API) handle(pattern string, fn handlerFunc) {
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		err := func() error {
			key := r.Header.Get("X-API-Key")
			if key == "" {
				return api.Errorf(api.CodeUnauthenticated, "missing API key; send it as X-API-Key")
			}
			p, err := a.keys.Authenticate(r.Context(), key)
			if err != nil {
				return err
			}
			return fn(w, r, p.Team.ID)
		}()
		if err != nil {
			writeError(w, r, a.log, err)
		}
	})
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// errorBody is E2B's error: code repeats the HTTP status, for the SDKs
// test it rather than the status.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError answers err in E2B's shape, with the status of cove's one
// table. An error without a code is logged and shown as "internal error".
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var e *api.Error
	if !errors.As(err, &e) {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return // the client went away
		}
		log.Error("E2B request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		e = &api.Error{Code: api.CodeInternal, Message: "internal error"}
	}
	status := httpapi.StatusOf(e.Code)
	writeJSON(w, status, errorBody{Code: status, Message: e.Message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // a write error is the client's going away
}

// decodeBody reads a JSON object into v. Unknown fields are allowed: the
// SDKs send options cove does not take (docs/e2b.md lists them).
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return api.Errorf(api.CodeInvalidArgument, "request body: %v", err)
	}
	return nil
}

// newSandbox is E2B's NewSandbox, the fields cove takes.
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int64            `json:"timeout"`
	Secure     *bool             `json:"secure"`
	Internet   *bool             `json:"allow_internet_access"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
}

// sandboxJSON is E2B's Sandbox, the answer of create and connect.
type sandboxJSON struct {
	TemplateID      string  `json:"templateID"`
	SandboxID       string  `json:"sandboxID"`
	Alias           string  `json:"alias,omitempty"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken"`
	Domain          *string `json:"domain"`
}

// detailJSON is E2B's SandboxDetail and ListedSandbox.
type detailJSON struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	CPUCount        int64             `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
}

// Home is the home of E2B's user, user, where its processes start and
// its relative paths lead. A sandbox keeps its template's working
// directory, so that an E2B create takes a sandbox from the warm pool as
// cove's own does; commands start in the user's home instead.
const Home = "/home/user"

// clientID is E2B's deprecated, required clientID; cove has no clients.
const clientID = "cove"

// defaultTimeout (seconds) is a sandbox's timeout when a create or a
// connect names none: the five minutes E2B's SDKs document.
const defaultTimeout = 300

// e2bState is an E2B state for a cove state, "" for a sandbox E2B would
// not know (ended or failed).
func e2bState(s api.SandboxState) string {
	switch s {
	case api.StateCreating, api.StateSettingUp, api.StateRunning, api.StateWaking:
		return "running"
	case api.StateSleeping, api.StateAsleep:
		return "paused"
	}
	return ""
}

// coveStates are the cove states of an E2B state.
func coveStates(s string) []api.SandboxState {
	switch s {
	case "running":
		return []api.SandboxState{api.StateCreating, api.StateSettingUp, api.StateRunning, api.StateWaking}
	case "paused":
		return []api.SandboxState{api.StateSleeping, api.StateAsleep}
	}
	return nil
}

func (a *API) templateOf(sb api.Sandbox) string {
	if t := sb.Labels[labelTemplate]; t != "" {
		return t
	}
	return sb.Template
}

func (a *API) summary(sb api.Sandbox) sandboxJSON {
	return sandboxJSON{
		TemplateID: a.templateOf(sb), SandboxID: sb.ID, ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: a.tokens.Token(sb.TeamID, sb.ID),
	}
}

func (a *API) detail(sb api.Sandbox, withToken bool) detailJSON {
	d := detailJSON{
		TemplateID: a.templateOf(sb), SandboxID: sb.ID, ClientID: clientID,
		StartedAt: sb.CreatedAt, EnvdVersion: EnvdVersion,
		CPUCount: int64(math.Ceil(sb.Resources.CPUs)),
		MemoryMB: sb.Resources.MemoryMiB, DiskSizeMB: sb.Resources.DiskMiB,
		Metadata: map[string]string{}, State: e2bState(sb.State),
	}
	if sb.StartedAt != nil {
		d.StartedAt = *sb.StartedAt
	}
	// A sandbox without a lifetime never ends; E2B's endAt is required, so
	// it says a year from now.
	d.EndAt = a.now().AddDate(1, 0, 0)
	if sb.ExpiresAt != nil {
		d.EndAt = *sb.ExpiresAt
	}
	for k, v := range sb.Labels {
		if !strings.HasPrefix(k, LabelPrefix) {
			d.Metadata[k] = v
		}
	}
	if withToken {
		d.EnvdAccessToken = a.tokens.Token(sb.TeamID, sb.ID)
	}
	return d
}

// live is the team's sandbox as E2B sees it: an ended one is not found.
func (a *API) live(ctx context.Context, teamID, id string) (api.Sandbox, error) {
	sb, err := a.sandboxes.GetSandbox(ctx, teamID, id)
	if err != nil {
		return api.Sandbox{}, err
	}
	if e2bState(sb.State) == "" {
		return api.Sandbox{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", id)
	}
	return sb, nil
}

func (a *API) create(w http.ResponseWriter, r *http.Request, teamID string) error {
	var req newSandbox
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.TemplateID == "" {
		return api.Errorf(api.CodeInvalidArgument, "templateID is required")
	}
	timeout := int64(defaultTimeout)
	if req.Timeout != nil {
		if *req.Timeout < 0 {
			return api.Errorf(api.CodeInvalidArgument, "timeout is negative")
		}
		timeout = *req.Timeout
	}
	labels := map[string]string{}
	for k, v := range req.Metadata {
		if strings.HasPrefix(k, LabelPrefix) {
			return api.Errorf(api.CodeInvalidArgument, "metadata keys under %s are cove's", LabelPrefix)
		}
		labels[k] = v
	}
	labels[labelTemplate] = req.TemplateID
	// allow_internet_access is not taken: the team's default network
	// policy applies either way, never open internet (docs/e2b.md).
	creq := api.CreateSandboxRequest{
		Template: a.cfg.coveTemplate(req.TemplateID), Env: req.EnvVars, Labels: labels,
		MaxLifetimeS: &timeout,
	}
	// E2B's sandboxes run sudo: set-uid programs raise privileges in
	// them, and only in them (docs/security.md). Nothing a client sends
	// decides it.
	sb, err := a.sandboxes.CreateSandboxWith(r.Context(), teamID, creq, lifecycle.CreateOptions{SetID: true})
	if err != nil {
		return err
	}
	if sb, err = a.awaitRunning(r.Context(), teamID, sb.ID); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, a.summary(sb))
	return nil
}

// awaitRunning waits for a sandbox to run, as E2B answers a create or a
// resume only then.
func (a *API) awaitRunning(ctx context.Context, teamID, id string) (api.Sandbox, error) {
	sb, err := a.sandboxes.WaitSandbox(ctx, teamID, id, api.StateRunning, a.cfg.readyTimeout())
	if err != nil {
		return api.Sandbox{}, err
	}
	if sb.State != api.StateRunning {
		reason := sb.StateReason
		if reason == "" {
			reason = "it is " + string(sb.State)
		}
		return api.Sandbox{}, api.Errorf(api.CodeUnavailable, "sandbox %s did not start: %s", id, reason)
	}
	return sb, nil
}

func (a *API) get(w http.ResponseWriter, r *http.Request, teamID string) error {
	sb, err := a.live(r.Context(), teamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.detail(sb, true))
	return nil
}

func (a *API) kill(w http.ResponseWriter, r *http.Request, teamID string) error {
	sb, err := a.live(r.Context(), teamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	if _, err := a.sandboxes.TerminateSandbox(r.Context(), teamID, sb.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listRunning is the deprecated GET /sandboxes: every running sandbox,
// in one answer.
func (a *API) listRunning(w http.ResponseWriter, r *http.Request, teamID string) error {
	labels, err := metadataQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		return err
	}
	out := []detailJSON{}
	q := lifecycle.SandboxQuery{States: coveStates("running"), Labels: labels}
	for {
		page, err := a.sandboxes.ListSandboxes(r.Context(), teamID, q)
		if err != nil {
			return err
		}
		for _, sb := range page.Items {
			out = append(out, a.detail(sb, false))
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// list is GET /v2/sandboxes: a page, the next one's token in X-Next-Token.
func (a *API) list(w http.ResponseWriter, r *http.Request, teamID string) error {
	v := r.URL.Query()
	labels, err := metadataQuery(v.Get("metadata"))
	if err != nil {
		return err
	}
	q := lifecycle.SandboxQuery{Labels: labels, Page: lifecycle.Page{Cursor: v.Get("nextToken")}}
	states := []string{"running", "paused"}
	if s := v.Get("state"); s != "" {
		states = strings.Split(s, ",")
	}
	for _, s := range states {
		cs := coveStates(s)
		if cs == nil {
			return api.Errorf(api.CodeInvalidArgument, "state %q is not running or paused", s)
		}
		q.States = append(q.States, cs...)
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return api.Errorf(api.CodeInvalidArgument, "limit must be a positive number")
		}
		q.Limit = min(n, lifecycle.MaxPageLimit)
	}
	page, err := a.sandboxes.ListSandboxes(r.Context(), teamID, q)
	if err != nil {
		return err
	}
	out := make([]detailJSON, 0, len(page.Items))
	for _, sb := range page.Items {
		out = append(out, a.detail(sb, false))
	}
	if page.NextCursor != "" {
		w.Header().Set("X-Next-Token", page.NextCursor)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// metadataQuery reads E2B's metadata filter, a query string of its own
// ("k=v&k2=v2", each part URL-encoded).
func metadataQuery(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	v, err := url.ParseQuery(s)
	if err != nil {
		return nil, api.Errorf(api.CodeInvalidArgument, "metadata filter %q: %v", s, err)
	}
	out := map[string]string{}
	for k, vals := range v {
		out[k] = vals[len(vals)-1]
	}
	return out, nil
}

type timeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

// seconds is the timeout asked for, def when none is.
func (t timeoutBody) seconds(def int64) (int64, error) {
	if t.Timeout == nil {
		if def < 0 {
			return 0, api.Errorf(api.CodeInvalidArgument, "timeout (seconds, 0 or more) is required")
		}
		return def, nil
	}
	if *t.Timeout < 0 {
		return 0, api.Errorf(api.CodeInvalidArgument, "timeout is negative; want seconds, 0 or more")
	}
	return *t.Timeout, nil
}

// lifetimeUntil is the max_lifetime_s that ends sb at end: cove counts a
// lifetime from creation, E2B a timeout from now.
func lifetimeUntil(sb api.Sandbox, end time.Time) int64 {
	return int64(math.Ceil(end.Sub(sb.CreatedAt).Seconds()))
}

func (a *API) setTimeout(w http.ResponseWriter, r *http.Request, teamID string) error {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	secs, err := body.seconds(-1)
	if err != nil {
		return err
	}
	sb, err := a.live(r.Context(), teamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	lifetime := lifetimeUntil(sb, a.now().Add(time.Duration(secs)*time.Second))
	if _, err := a.sandboxes.UpdateSandbox(r.Context(), teamID, sb.ID, api.UpdateSandboxRequest{MaxLifetimeS: &lifetime}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect resumes a paused sandbox (cove's wake) and extends its timeout,
// never shortens it: 201 when it was resumed, 200 when it ran.
func (a *API) connect(w http.ResponseWriter, r *http.Request, teamID string) error {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	secs, err := body.seconds(defaultTimeout)
	if err != nil {
		return err
	}
	sb, err := a.live(r.Context(), teamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	status := http.StatusOK
	if e2bState(sb.State) == "paused" {
		if sb.State == api.StateSleeping {
			if sb, err = a.sandboxes.WaitSandbox(r.Context(), teamID, sb.ID, api.StateAsleep, a.cfg.readyTimeout()); err != nil {
				return err
			}
		}
		if _, err := a.sandboxes.WakeSandbox(r.Context(), teamID, sb.ID); err != nil {
			return err
		}
		status = http.StatusCreated
	}
	if sb, err = a.awaitRunning(r.Context(), teamID, sb.ID); err != nil {
		return err
	}
	end := a.now().Add(time.Duration(secs) * time.Second)
	if sb.ExpiresAt != nil && sb.ExpiresAt.Before(end) {
		lifetime := lifetimeUntil(sb, end)
		if sb, err = a.sandboxes.UpdateSandbox(r.Context(), teamID, sb.ID, api.UpdateSandboxRequest{MaxLifetimeS: &lifetime}); err != nil {
			return err
		}
	}
	writeJSON(w, status, a.summary(sb))
	return nil
}

// pause is cove's sleep; it answers once the sandbox is asleep, so a
// resume right after finds it so. A paused sandbox answers 409.
func (a *API) pause(w http.ResponseWriter, r *http.Request, teamID string) error {
	sb, err := a.live(r.Context(), teamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	if e2bState(sb.State) == "paused" {
		return api.Errorf(api.CodeConflict, "sandbox %s is already paused", sb.ID)
	}
	if _, err := a.sandboxes.SleepSandbox(r.Context(), teamID, sb.ID, "paused through the E2B API"); err != nil {
		return err
	}
	sb, err = a.sandboxes.WaitSandbox(r.Context(), teamID, sb.ID, api.StateAsleep, a.cfg.readyTimeout())
	if err != nil {
		return err
	}
	if sb.State != api.StateAsleep {
		return api.Errorf(api.CodeUnavailable, "sandbox %s did not pause: it is %s", sb.ID, sb.State)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// metricJSON is E2B's SandboxMetric.
type metricJSON struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int64     `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

func (a *API) sandboxMetrics(w http.ResponseWriter, r *http.Request, teamID string) error {
	sb, err := a.sandboxes.GetSandbox(r.Context(), teamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := []metricJSON{}
	if a.metrics == nil {
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	var q meter.MetricsQuery
	for name, t := range map[string]*time.Time{"start": &q.From, "end": &q.To} {
		if v := r.URL.Query().Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return api.Errorf(api.CodeInvalidArgument, "%s must be a Unix time in seconds", name)
			}
			*t = time.Unix(n, 0)
		}
	}
	m, err := a.metrics.Metrics(r.Context(), teamID, sb.ID, q)
	if err != nil {
		return err
	}
	const mib = 1 << 20
	cpus := math.Ceil(sb.Resources.CPUs)
	for _, s := range m.Samples {
		pct := 0.0
		if sb.Resources.CPUs > 0 {
			pct = float64(s.CPUMillicores) / (sb.Resources.CPUs * 10)
		}
		out = append(out, metricJSON{
			Timestamp: s.Time.UTC(), TimestampUnix: s.Time.Unix(), CPUCount: int64(cpus), CPUUsedPct: pct,
			MemUsed: s.MemoryBytes, MemTotal: sb.Resources.MemoryMiB * mib,
			DiskUsed: s.DiskBytes, DiskTotal: sb.Resources.DiskMiB * mib,
		})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
