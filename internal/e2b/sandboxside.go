package e2b

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"golang.org/x/time/rate"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem/filesystemconnect"
	"github.com/cove-dev/cove/internal/e2b/envd/process/processconnect"
)

// SandboxSide serves what E2B's envd serves inside each sandbox, for all
// sandboxes on one listener (the SDKs' E2B_SANDBOX_URL). A request names
// its sandbox in E2b-Sandbox-Id and is let in only with that sandbox's
// access token in X-Access-Token: a sandbox's ID is public, its token is
// not. A signed file URL (signed.go) is let in by its signature alone.
type SandboxSide struct {
	sandboxes Sandboxes
	store     SandboxStore
	tokens    *Tokens
	log       *slog.Logger
	mux       *http.ServeMux
	now       func() time.Time
	// searches is the budget of signed URLs' searches (signed.go).
	searches *rate.Limiter
}

// NewSandboxSide returns the sandbox listener's handler; st is read to
// find the sandbox of a signed file URL.
func NewSandboxSide(sandboxes Sandboxes, cmds Commands, fs Files, tokens *Tokens, st SandboxStore, log *slog.Logger) *SandboxSide {
	s := &SandboxSide{sandboxes: sandboxes, store: st, tokens: tokens, log: log, mux: http.NewServeMux(), now: time.Now, searches: newSignedBudget()}
	s.mux.HandleFunc("GET /health", s.health)
	fsvc := &fsService{files: fs}
	fsvc.polled.sandboxes = sandboxes
	s.mux.Handle(filesystemconnect.NewFilesystemHandler(fsvc))
	fa := &filesAPI{files: fs, side: s}
	s.mux.HandleFunc("GET /files", fa.download)
	s.mux.HandleFunc("POST /files", fa.upload)
	s.mux.Handle(processconnect.NewProcessHandler(&processes{sandboxes: sandboxes, cmds: cmds, log: log, keepalive: keepalive}))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, s.log, api.Errorf(api.CodeNotFound, "cove's E2B sandbox listener has no %s %s", r.Method, r.URL.Path))
	})
	return s
}

// keepalive is how often a quiet process stream gets a keepalive event,
// well within the idle timeouts of proxies and of E2B's SDKs.
const keepalive = 30 * time.Second

// target is the sandbox a request is for, let in by its token.
type target struct {
	TeamID, SandboxID string
}

type targetKey struct{}

func targetOf(ctx context.Context) target {
	t, _ := ctx.Value(targetKey{}).(target)
	return t
}

// ServeHTTP checks the sandbox and its token before any route: without
// both, nothing of a sandbox, not even whether it exists, is answered.
func (s *SandboxSide) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if r.Header.Get("X-Access-Token") == "" && r.URL.Query().Has("signature") {
		s.serveSigned(w, r, id)
		return
	}
	if id == "" {
		writeError(w, r, s.log, api.Errorf(api.CodeInvalidArgument, "missing E2b-Sandbox-Id header"))
		return
	}
	teamID, ok := s.tokens.Team(id, r.Header.Get("X-Access-Token"))
	if !ok {
		writeError(w, r, s.log, api.Errorf(api.CodeUnauthenticated, "missing or wrong X-Access-Token for this sandbox"))
		return
	}
	ctx := context.WithValue(r.Context(), targetKey{}, target{TeamID: teamID, SandboxID: id})
	s.mux.ServeHTTP(w, r.WithContext(ctx))
}

// health answers 204 while the sandbox runs and 502, as E2B's proxy does
// for a sandbox that is gone, otherwise: the SDKs read a 502 as "killed".
func (s *SandboxSide) health(w http.ResponseWriter, r *http.Request) {
	t := targetOf(r.Context())
	sb, err := s.sandboxes.GetSandbox(r.Context(), t.TeamID, t.SandboxID)
	switch {
	case err == nil && sb.State == api.StateRunning:
		w.WriteHeader(http.StatusNoContent)
	case err == nil || api.ErrorCode(err) == api.CodeNotFound:
		writeJSON(w, http.StatusBadGateway, errorBody{Code: http.StatusBadGateway, Message: "the sandbox is not running"})
	default:
		writeError(w, r, s.log, err)
	}
}
