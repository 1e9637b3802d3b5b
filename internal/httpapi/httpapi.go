// Package httpapi serves cove's public REST API (API.md) over the server:
// routes, authentication into the request context, request decoding, and
// the one table that maps error codes to HTTP statuses.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/preview"
	"github.com/cove-dev/cove/internal/store"
)

// statusOf is the one place error codes become HTTP statuses.
var statusOf = map[api.Code]int{
	api.CodeInvalidArgument:    http.StatusBadRequest,
	api.CodeUnauthenticated:    http.StatusUnauthorized,
	api.CodePermissionDenied:   http.StatusForbidden,
	api.CodeNotFound:           http.StatusNotFound,
	api.CodeConflict:           http.StatusConflict,
	api.CodePreconditionFailed: http.StatusPreconditionFailed,
	api.CodePayloadTooLarge:    http.StatusRequestEntityTooLarge,
	api.CodeUnprocessable:      http.StatusUnprocessableEntity,
	api.CodeResourceExhausted:  http.StatusTooManyRequests,
	api.CodeInternal:           http.StatusInternalServerError,
	api.CodeUnavailable:        http.StatusServiceUnavailable,

	api.CodeInsufficientStorage: http.StatusInsufficientStorage,
	api.CodeBudgetExceeded:      http.StatusPaymentRequired,
}

// Replica is the replica of the control plane that serves the API, as
// GET /healthz reports it.
type Replica interface {
	// StoreHealth answers whether the store answers now.
	StoreHealth(ctx context.Context) error
	// Leader reports whether this replica leads.
	Leader() bool
}

// healthStoreTimeout bounds GET /healthz's check of the store: it answers
// in time even when the store hangs.
const healthStoreTimeout = 2 * time.Second

// StatusOf is the HTTP status of an error code, from the one table; the
// listeners that translate other APIs (internal/e2b) answer with it too.
func StatusOf(c api.Code) int {
	if status, ok := statusOf[c]; ok {
		return status
	}
	return http.StatusInternalServerError
}

// maxBody bounds JSON request bodies.
const maxBody = 1 << 20

// Handler serves the API. The services are set before serving, then
// only read; a nil one answers its routes with not_found.
type Handler struct {
	ImageService    ImageService
	TemplateService TemplateService
	PreviewService  PreviewService
	// Sandboxes, Commands, Events and Workloads serve the sandboxes' life
	// cycle, their commands, the event logs and the batch runs.
	Sandboxes Sandboxes
	Commands  Commands
	Events    Events
	Workloads Workloads
	// GPUs reports the node's GPUs in GET /healthz; nil: none reported.
	GPUs GPUPlane
	// Replica reports this replica's store and lead in GET /healthz;
	// nil: not reported.
	Replica Replica
	// Ready are GET /readyz's checks, by name; set before serving.
	Ready map[string]ReadyCheck

	// sh is what the route groups share: the log, authentication,
	// idempotency, tickets, the upload limit and the metrics.
	sh *shared
	// build makes the mux from the services, once, at the first request.
	build sync.Once
	mux   *http.ServeMux
	// patterns lists the authenticated routes, for the OpenAPI test.
	patterns []string
	// listeners are the addresses the service bound, by name; set before
	// serving, then only read.
	listeners map[string]string
	// previews routes preview traffic; nil until ServePreviews.
	previews *preview.Router
	// eventStreams counts each team's open event streams.
	eventStreams *streamSlots
	// watchStreams counts the open file watch streams.
	watchStreams *watchSlots

	// Teams authenticates keys and manages teams and keys.
	Teams Teams
	// Idempotency keeps the answers of create requests.
	Idempotency Idempotency
	// Secrets keeps the teams' secrets.
	Secrets Secrets
	// Webhooks keeps the teams' webhooks; nil: not served (404).
	Webhooks Webhooks
	// Files and Assets serve the file and asset calls; set before
	// serving.
	Files  Files
	Assets Assets
	// Snapshots serve snapshots, restores and forks; set before serving.
	Snapshots Snapshots
	// Volumes serve a team's volumes; set before serving.
	Volumes Volumes
	// Metering answers usage, spend and metrics reads; set before serving.
	Metering Metering
	// Observations answers a sandbox's network reads; set before serving.
	Observations Observations
	// Nodes and JoinTokens serve a fleet's nodes to the admin team; nil
	// on a server without a fleet (404).
	Nodes      Nodes
	JoinTokens JoinTokens
}

// New returns the API handler; set its services' fields before serving.
func New(log *slog.Logger) *Handler {
	return &Handler{sh: &shared{log: log, tickets: newTicketBook()}, eventStreams: &streamSlots{}, watchStreams: &watchSlots{}}
}

// shared is what every route group uses: the log for errors,
// authentication (keys and tickets), idempotency, the upload limit and
// the metrics. The Handler's setters change it before serving.
type shared struct {
	log         *slog.Logger
	Teams       Teams
	Idempotency Idempotency
	tickets     *ticketBook
	// uploadIdle cuts an upload's body that sends nothing this long; 0
	// for never (LimitUploads).
	uploadIdle time.Duration
	// metrics serves GET /metrics to admin keys (ServeMetrics).
	metrics http.Handler
	// dataDisk names the disk a full write is reported on (NameDataDisk).
	dataDisk string
}

// serveMux is the API's mux, made at the first request from the services
// set by then (they are set before serving, then only read).
func (h *Handler) serveMux() *http.ServeMux {
	h.build.Do(h.routes)
	return h.mux
}

// routes makes the mux: each group of routes is given its service and the
// shared bits, and registers its own routes.
func (h *Handler) routes() {
	h.mux = http.NewServeMux()
	sh := h.sh
	sh.Teams, sh.Idempotency = h.Teams, h.Idempotency
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ready, target := h.Sandboxes.WarmPool()
		health := map[string]any{
			"status":    "ok",
			"warm_pool": map[string]int{"ready": ready, "target": target},
		}
		if h.listeners != nil {
			health["listeners"] = h.listeners
		}
		if h.TemplateService != nil {
			health["templates"] = h.TemplateService.TemplateHealth()
		}
		if h.GPUs != nil {
			health["gpus"] = h.GPUs.GPUHealth()
		}
		if h.Replica != nil {
			// Neither fails the answer: a liveness probe must not restart
			// every replica while the database restarts.
			health["store"] = "ok"
			ctx, cancel := context.WithTimeout(r.Context(), healthStoreTimeout)
			if err := h.Replica.StoreHealth(ctx); err != nil {
				health["store"] = err.Error()
			}
			cancel()
			health["leader"] = h.Replica.Leader()
		}
		writeJSON(w, http.StatusOK, health)
	})
	h.mux.HandleFunc("GET /readyz", h.serveReady)
	h.mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(api.OpenAPI)
	})
	serve := func(pattern string, authn func(*http.Request) (lifecycle.Principal, error), fn handlerFunc) {
		h.patterns = append(h.patterns, pattern)
		h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			p, err := authn(r)
			if err == nil {
				err = fn(w, r, p)
			}
			if err != nil {
				sh.writeError(w, r, err)
			}
		})
	}
	auth := func(pattern string, fn handlerFunc) { serve(pattern, sh.authenticate, fn) }
	sandboxRoutes{sh, h.Sandboxes, h.Observations, h.Nodes}.routes(auth)
	nodeRoutes{sh, h.Nodes, h.JoinTokens}.routes(auth)
	commandRoutes{sh, h.Commands}.routes(auth, serve)
	fileRoutes{sh, h.Files, h.watchStreams, h.Sandboxes}.routes(auth)
	assetRoutes{sh, h.Assets}.routes(auth)
	snapshotRoutes{sh, h.Snapshots, h.Sandboxes}.routes(auth)
	volumeRoutes{sh, h.Volumes}.routes(auth)
	eventRoutes{sh, h.Events, h.eventStreams}.routes(auth)
	teamRoutes{sh}.routes(auth)
	secretRoutes{sh, h.Secrets}.routes(auth)
	usageRoutes{sh, h.Metering}.routes(auth)
	webhookRoutes{sh, h.Webhooks}.routes(auth)
	previewRoutes{sh, h.PreviewService, h.TemplateService}.routes(auth)
	// The former path form of previews: a 404 naming the preview's own
	// host, for the API's host serves nothing of a tenant.
	h.mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}", h.servePreviewPath)
	h.mux.HandleFunc("/v1/sandboxes/{id}/ports/{port}/{rest...}", h.servePreviewPath)
	imageRoutes{sh, h.ImageService}.routes(auth)
	workloadRoutes{sh, h.Workloads}.routes(auth)
	// Anything else under /v1 is a JSON 404, after authentication so that
	// the API's shape is not probed without a key.
	auth("/v1/", func(w http.ResponseWriter, r *http.Request, _ lifecycle.Principal) error {
		return api.Errorf(api.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
}

// ReportListeners makes GET /healthz name the addresses the service bound
// ("api", "gateway", "dns", …). Call it before serving.
func (h *Handler) ReportListeners(l map[string]string) { h.listeners = l }

// ServeHTTP serves the API.
// IsPreview reports whether r is for a preview's host, the app's traffic
// (the console stays off those hosts).
func (h *Handler) IsPreview(r *http.Request) bool {
	if h.previews == nil {
		return false
	}
	_, _, ok := h.previews.Match(r.Host)
	return ok
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A preview's host never reaches the API: its requests are the app's.
	if h.previews != nil {
		if _, _, ok := h.previews.Match(r.Host); ok {
			h.previews.ServeHTTP(w, r)
			return
		}
	}
	// Every answer names its request: the client's X-Request-Id when it
	// sent a usable one, else one made here. The server's log of a failed
	// request carries the same ID.
	rid := r.Header.Get(requestIDHeader)
	if !validRequestID(rid) {
		rid = id.New("req")
		r.Header.Set(requestIDHeader, rid)
	}
	w.Header().Set(requestIDHeader, rid)
	h.serveMux().ServeHTTP(w, r)
}

// requestIDHeader carries a request's ID both ways.
const requestIDHeader = "X-Request-Id"

// validRequestID accepts a client's request ID of 1 to 128 printable
// ASCII characters without spaces: anything else is replaced, so the ID
// written to logs and headers is always plain.
func validRequestID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (h *shared) authenticate(r *http.Request) (lifecycle.Principal, error) {
	key, ok := bearerKey(r)
	if !ok {
		return lifecycle.Principal{}, api.Errorf(api.CodeUnauthenticated, "missing API key; send 'Authorization: Bearer <key>'")
	}
	return h.Teams.Authenticate(r.Context(), key)
}

// bearerKey is the API key of a request's Authorization header.
func bearerKey(r *http.Request) (string, bool) {
	// The scheme's name is case-insensitive (RFC 9110, section 11.1).
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	key = strings.TrimSpace(key)
	return key, ok && strings.EqualFold(scheme, "Bearer") && key != ""
}

// writeError answers with the API's error format. Errors without a code are
// logged and shown as "internal error", but for a full disk (diskFull) and
// a store that is away (unavailable).
func (h *shared) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *api.Error
	if !errors.As(err, &e) {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return // the client went away
		}
		if store.DiskFull(err) {
			e = h.diskFull(r, err) // it logs the cause
		} else {
			h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", r.Header.Get(requestIDHeader), "err", err)
			e = &api.Error{Code: api.CodeInternal, Message: "internal error"}
			if store.Unavailable(err) {
				// The database is away for a moment (a restart, a failover):
				// the request may be retried, under its Idempotency-Key.
				e = &api.Error{Code: api.CodeUnavailable, Message: "the control plane's store is unavailable; retry",
					Details: map[string]any{"retry_after_s": 1}}
			}
		}
	}
	status := StatusOf(e.Code)
	if s, ok := e.Details["retry_after_s"].(int); ok && s > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
	writeJSON(w, status, api.ErrorResponse{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// decode reads one JSON object into v, refusing unknown fields, trailing
// data and bodies over maxBody. An empty body leaves v as it is when
// emptyOK, else it is an error.
func decode(r *http.Request, v any, emptyOK bool) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return api.Errorf(api.CodeInvalidArgument, "Content-Type is %q; send application/json", ct)
	}
	body := http.MaxBytesReader(nil, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.Is(err, io.EOF):
			if emptyOK {
				return nil
			}
			return api.Errorf(api.CodeInvalidArgument, "request body is empty; send a JSON object")
		case errors.As(err, &tooBig):
			return api.Errorf(api.CodePayloadTooLarge, "request body is larger than %d bytes", maxBody)
		}
		return jsonError(bodyJSON, reflect.TypeOf(v), err)
	}
	if dec.More() {
		return api.Errorf(api.CodeInvalidArgument, "request body has data after the JSON object")
	}
	return nil
}

// paging reads limit= and cursor=; the control plane checks the limit.
func paging(r *http.Request) (lifecycle.Page, error) {
	q := r.URL.Query()
	p := lifecycle.Page{Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > lifecycle.MaxPageLimit {
			return p, api.Errorf(api.CodeInvalidArgument, "limit must be a number from 1 to %d", lifecycle.MaxPageLimit)
		}
		p.Limit = n
	}
	return p, nil
}

// csv reads a query parameter that may repeat and hold comma-separated
// values.
func csv(r *http.Request, name string) []string {
	var out []string
	for _, v := range r.URL.Query()[name] {
		for _, s := range strings.Split(v, ",") {
			if s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

func queryInt(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, api.Errorf(api.CodeInvalidArgument, "%s must be a whole number from %d to %d", name, lo, hi)
	}
	return n, nil
}

func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, api.Errorf(api.CodeInvalidArgument, "%s must be true or false", name)
	}
	return b, nil
}
