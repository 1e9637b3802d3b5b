// Package nodeapi is a node's API: every call the control plane makes of
// a node (lifecycle.Node, stats, GPUs, previews' ports) served over HTTP
// with JSON, with streams for file bodies, archives, stdin and recorded
// output, a raw tunnel for DialPort, de-duplication of state-changing
// calls by their operation ID, and one stream of the node's events
// (command exits, network denials) resumable by sequence number.
//
// The server does not do TLS itself: its caller serves Handler on a TLS
// listener configured by TLSConfig, which takes only the control plane's
// client certificate. Handler refuses any request without it.
package nodeapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
)

// Node is what the API serves: the node's contract, its ports for
// previews, Stats and GPUs. internal/node/local implements it.
type Node interface {
	node.Contract
	node.Ports
	node.Watches
	Stats(ctx context.Context, ids []string) map[string]node.Stats
	GPUs() node.GPUs
}

// Server serves a node's API. Close ends its streams and tunnels.
type Server struct {
	n   Node
	log *slog.Logger
	mux *http.ServeMux

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	ops    *operations
	events *backlog
}

// New returns the API of n. Pass OnExit to the node as its exit function
// and Denied to its network policy's denial reports.
func New(n Node, log *slog.Logger) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	b := make([]byte, 8)
	rand.Read(b)
	s := &Server{
		n: n, log: log, mux: http.NewServeMux(), ctx: ctx, cancel: cancel,
		ops:    newOperations(),
		events: newBacklog(hex.EncodeToString(b), backlogSize),
	}
	s.routes()
	return s
}

// Close ends the event and output streams and the tunnels, and waits for
// the server's own goroutines.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// OnExit records a command's end as an event.
func (s *Server) OnExit(sandboxID, commandID string, exit node.Exit, lost bool) {
	s.events.add(Event{Kind: EventExit, Sandbox: sandboxID, Command: commandID, Exit: &exit, Lost: lost})
}

// Denied records a network denial of a sandbox as an event.
func (s *Server) Denied(sandboxID string, o api.NetworkObservation, suppressed int64) {
	s.events.add(Event{Kind: EventDenied, Sandbox: sandboxID, Observation: &o, Suppressed: suppressed})
}

// Injected records what the node's gateway reports of a request it
// terminated for an injection rule as an event.
func (s *Server) Injected(sandboxID string, e netpolicy.InjectEvent) {
	s.events.add(Event{Kind: EventInjected, Sandbox: sandboxID, Injected: &e})
}

// HTTPServer is an http.Server for Handler, to serve on a listener with
// TLSConfig: it pings a silent control plane's connections, so that its
// streams end when the control plane is gone. Close the Server before
// shutting it down: its streams end only then.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second},
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// Handler serves the API to the control plane alone: a request that did
// not come over TLS with a verified client certificate naming
// fleetwire.ControlURI is refused.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fromControl(r) {
			writeError(w, api.Errorf(api.CodePermissionDenied, "only the control plane may call a node"))
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

func fromControl(r *http.Request) bool {
	return r.TLS != nil && names(*r.TLS, fleetwire.ControlURI)
}

// Status is the HTTP status of an error code on the node API.
func Status(code api.Code) int {
	switch code {
	case api.CodeInvalidArgument:
		return http.StatusBadRequest
	case api.CodeUnauthenticated:
		return http.StatusUnauthorized
	case api.CodePermissionDenied:
		return http.StatusForbidden
	case api.CodeNotFound:
		return http.StatusNotFound
	case api.CodeConflict:
		return http.StatusConflict
	case api.CodePreconditionFailed:
		return http.StatusPreconditionFailed
	case api.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case api.CodeUnprocessable:
		return http.StatusUnprocessableEntity
	case api.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case api.CodeUnavailable:
		return http.StatusServiceUnavailable
	case api.CodeInsufficientStorage:
		return http.StatusInsufficientStorage
	case api.CodeBudgetExceeded:
		return http.StatusPaymentRequired
	}
	return http.StatusInternalServerError
}

// wireError is err as the node sends it: a coded error as it is, anything
// else as internal with its text (the control plane is the only reader,
// and keeps it from users as it does a local node's).
func wireError(err error) *api.Error {
	var e *api.Error
	if errors.As(err, &e) {
		return e
	}
	return &api.Error{Code: api.CodeInternal, Message: err.Error()}
}

func writeError(w http.ResponseWriter, err error) {
	e := wireError(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(Status(e.Code))
	json.NewEncoder(w).Encode(api.ErrorResponse{Error: e})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
