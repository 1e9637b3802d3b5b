package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
)

// Metering is what the API asks of the meter (*meter.Meter): samples,
// usage and costs. A team's spend limit is changed with the team
// (Teams.UpdateTeam).
type Metering interface {
	Metrics(ctx context.Context, teamID, ref string, q meter.MetricsQuery) (api.Metrics, error)
	SandboxUsage(ctx context.Context, teamID, ref string) (api.SandboxUsage, error)
	Usage(ctx context.Context, teamID string, q meter.UsageQuery) (api.UsageReport, error)
}

var _ Metering = (*meter.Meter)(nil)

func (h usageRoutes) metering() (Metering, error) {
	if h.Metering == nil {
		return nil, api.Errorf(api.CodeNotFound, "this server does not meter")
	}
	return h.Metering, nil
}

// usageRoutes serve the metering's reads: usage, spend and metrics.
type usageRoutes struct {
	*shared
	Metering Metering
}

func (h usageRoutes) routes(auth authFunc) {
	auth("GET /v1/sandboxes/{ref}/metrics", h.sandboxMetrics)
	auth("GET /v1/sandboxes/{ref}/usage", h.sandboxUsage)
	auth("GET /v1/usage", h.usage)
	auth("GET /metrics", h.serveMetrics)
}

// queryTime reads an RFC 3339 time; absent is the zero time.
func queryTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, api.Errorf(api.CodeInvalidArgument, "%s is %q; use an RFC 3339 time such as 2026-01-02T15:04:05Z", name, v)
	}
	return t.UTC(), nil
}

// queryStep reads a step as seconds ("60") or a duration ("1m", "30s").
func queryStep(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("step")
	if v == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && n <= 366*24*3600 {
		return time.Duration(n) * time.Second, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= time.Second {
		return d.Truncate(time.Second), nil
	}
	return 0, api.Errorf(api.CodeInvalidArgument, "step is %q; use whole seconds (60) or a duration (1m), at least 1s", v)
}

func (h usageRoutes) sandboxMetrics(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var q meter.MetricsQuery
	var err error
	if q.From, err = queryTime(r, "from"); err != nil {
		return err
	}
	if q.To, err = queryTime(r, "to"); err != nil {
		return err
	}
	if q.Step, err = queryStep(r); err != nil {
		return err
	}
	mt, err := h.metering()
	if err != nil {
		return err
	}
	m, err := mt.Metrics(r.Context(), p.Team.ID, r.PathValue("ref"), q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, m)
}

func (h usageRoutes) sandboxUsage(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	mt, err := h.metering()
	if err != nil {
		return err
	}
	u, err := mt.SandboxUsage(r.Context(), p.Team.ID, r.PathValue("ref"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, u)
}

func (h usageRoutes) usage(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	q := meter.UsageQuery{GroupBy: r.URL.Query().Get("group_by")}
	var err error
	if q.From, err = queryTime(r, "from"); err != nil {
		return err
	}
	if q.To, err = queryTime(r, "to"); err != nil {
		return err
	}
	mt, err := h.metering()
	if err != nil {
		return err
	}
	u, err := mt.Usage(r.Context(), p.Team.ID, q)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, u)
}

func (h teamRoutes) updateTeam(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	var req api.UpdateTeamRequest
	if err := decode(r, &req, false); err != nil {
		return err
	}
	t, err := h.Teams.UpdateTeam(r.Context(), p, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

// ServeMetrics serves m (Prometheus text) at GET /metrics to admin keys.
// Call it before serving; without it /metrics answers not_found.
func (h *Handler) ServeMetrics(m http.Handler) { h.sh.metrics = m }

func (h usageRoutes) serveMetrics(w http.ResponseWriter, r *http.Request, p lifecycle.Principal) error {
	if h.metrics == nil {
		return api.Errorf(api.CodeNotFound, "this server does not serve metrics")
	}
	if !p.Admin() {
		return api.Errorf(api.CodePermissionDenied, "metrics are for operators: use the admin key, or scrape --metrics-listen")
	}
	h.metrics.ServeHTTP(w, r)
	return nil
}
