// Package previews is the control plane's part of previews: the ports a
// sandbox publishes (at most a few each), public or private, the private
// ones' tokens and one-time links, and the decision to let a preview's
// request through to the node (internal/preview routes the traffic).
package previews

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
)

// PortNode is what previews ask of the node: which ports of a sandbox it
// may connect to, and a connection to one of them.
type PortNode interface {
	// Publish makes ports the only ports of the sandbox that the node may
	// connect to; they hold across sleeps until published again. It
	// publishes again what a restarted node forgot.
	Publish(ctx context.Context, sandboxID string, ports []int) error
	// PublishPort adds one port and UnpublishPort takes one away, each at
	// a cost that does not grow with the ports the sandbox publishes.
	PublishPort(ctx context.Context, sandboxID string, port int) error
	UnpublishPort(ctx context.Context, sandboxID string, port int) error
	// DialPort connects to a published port of a running sandbox.
	DialPort(ctx context.Context, sandboxID string, port int) (net.Conn, error)
}

// Store is what previews read and write of the store.
type Store interface {
	CreatePreview(ctx context.Context, p store.Preview) error
	GetPreview(ctx context.Context, teamID, id string) (store.Preview, error)
	PreviewByPort(ctx context.Context, sandboxID string, port int) (store.Preview, error)
	ListPreviews(ctx context.Context, sandboxID string) ([]store.Preview, error)
	ListAllPreviews(ctx context.Context) ([]store.Preview, error)
	DeletePreview(ctx context.Context, teamID, id string) error
	GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error)
}

// Lifecycle is what previews ask of the sandboxes' lifecycle.
type Lifecycle interface {
	// LockSandbox finds a team's sandbox by ID or name and holds its
	// life-cycle lock, reading it again under the lock, until unlock.
	LockSandbox(ctx context.Context, teamID, ref string) (sb api.Sandbox, unlock func(), err error)
	// GetSandbox finds a team's sandbox by ID or name.
	GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	// LiveSandbox returns a running sandbox, waking an asleep one when
	// wake says so; else conflict with the sandbox.
	LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error)
	// Touch counts as activity of the sandbox (its idle timeout).
	Touch(sandboxID string)
}

// Admission checks a team's admission flags.
type Admission interface {
	RequireAdmission(ctx context.Context, teamID, flag string) error
}

// Config is the previews' part of the server's configuration.
type Config struct {
	// MaxPerSandbox is how many previews one sandbox may publish.
	MaxPerSandbox int
	// AdmitFlag is the admission a team needs for previews.
	AdmitFlag string
}

// Deps are the services previews call.
type Deps struct {
	Store     Store
	Lifecycle Lifecycle
	Admission Admission
	Log       *slog.Logger
	// Now is the clock (UTC).
	Now func() time.Time
}

// TokenPrefix marks preview tokens (never API keys).
const TokenPrefix = "cpt_"

// LinkParam is the query parameter of a one-time link.
const LinkParam = "cove_preview_link"

// linkTTL is how long a one-time link may wait for its first use.
const linkTTL = 10 * time.Minute

// wakeDialWait is how long, after a preview's request woke a sandbox, a
// refused connection to its port is tried again: processes do not survive
// a sleep, so the first request waits while the app is started again
// (by its owner, through the API) instead of failing at once.
const wakeDialWait = 60 * time.Second

// URLs says where previews are reached.
type URLs struct {
	// Domain is the preview domain, host[:port]: previews are served at
	// <port>-<sandbox id>.<Domain>, each an origin of its own.
	Domain string
	// Scheme of the host-form URLs. Default http.
	Scheme string
}

type link struct {
	previewID string
	token     string
	expires   time.Time
}

// Service publishes previews and lets their requests in. It holds the
// one-time links of private previews in memory (a link that outlives a
// restart is simply asked for again), and when a preview's request last
// woke each sandbox.
type Service struct {
	cfg  Config
	deps Deps
	// node and urls are set before serving, then only read.
	node PortNode
	urls URLs

	mu    sync.Mutex
	links map[string]link      // by code
	woken map[string]time.Time // by sandbox
}

// New returns the previews' service; it needs a node (SetNode) before
// it serves.
func New(cfg Config, d Deps) *Service {
	return &Service{cfg: cfg, deps: d, urls: URLs{Scheme: "http"},
		links: map[string]link{}, woken: map[string]time.Time{}}
}

// SetNode connects the node; call it before serving.
func (s *Service) SetNode(n PortNode) { s.node = n }

// SetURLs sets where previews are reached. Call it before serving.
func (s *Service) SetURLs(u URLs) {
	if u.Scheme == "" {
		u.Scheme = "http"
	}
	s.urls = u
}

// hashToken is how a private preview's token is stored: its SHA-256,
// hex, as API keys are.
func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func (s *Service) view(p store.Preview) api.Preview {
	return api.Preview{
		ID: p.ID, SandboxID: p.SandboxID, Port: p.Port, Visibility: p.Visibility,
		Wake: p.Wake, CreatedAt: p.CreatedAt,
		URL: fmt.Sprintf("%s://%d-%s.%s/", s.urls.Scheme, p.Port, p.SandboxID, s.urls.Domain),
	}
}

// CreatePreview publishes a port of a sandbox. The team needs the preview
// admission. A private preview's token (and a one-time link that sets it
// as a cookie) is answered once.
func (s *Service) CreatePreview(ctx context.Context, teamID, ref string, req api.CreatePreviewRequest) (api.Preview, error) {
	if err := s.deps.Admission.RequireAdmission(ctx, teamID, s.cfg.AdmitFlag); err != nil {
		return api.Preview{}, err
	}
	if req.Port < 1 || req.Port > 65535 {
		return api.Preview{}, api.Errorf(api.CodeInvalidArgument, "port %d is not a TCP port; use 1 to 65535", req.Port)
	}
	switch req.Visibility {
	case "":
		req.Visibility = api.VisibilityPrivate
	case api.VisibilityPrivate, api.VisibilityPublic:
	default:
		return api.Preview{}, api.Errorf(api.CodeInvalidArgument, "visibility is %q; use private or public", req.Visibility)
	}
	sb, unlock, err := s.deps.Lifecycle.LockSandbox(ctx, teamID, ref)
	if err != nil {
		return api.Preview{}, err
	}
	defer unlock()
	if sb.State.Terminal() || sb.State == api.StateTerminating {
		return api.Preview{}, api.Errorf(api.CodeConflict, "sandbox %s is %s; previews need a sandbox that lives", sb.ID, sb.State)
	}
	// Counted under the sandbox's lock, which every create and delete of
	// its previews holds.
	existing, err := s.deps.Store.ListPreviews(ctx, sb.ID)
	if err != nil {
		return api.Preview{}, err
	}
	pid := id.For(ctx, "prv")
	for _, e := range existing {
		if e.ID == pid {
			// The ID is derived from an Idempotency-Key: a second attempt
			// of the request (its first on a replica that died) answers
			// the preview the first attempt made.
			return s.view(e), nil
		}
	}
	if max := s.cfg.MaxPerSandbox; len(existing) >= max {
		e := api.Errorf(api.CodeConflict, "sandbox %s has %d previews, the most one sandbox may publish (cove serve --max-previews-per-sandbox); delete one first: DELETE /v1/sandboxes/%s/previews/{id} (cove preview %s --rm ID)", sb.ID, len(existing), sb.ID, sb.ID)
		e.Details = map[string]any{"limit": max}
		return api.Preview{}, e
	}
	p := store.Preview{
		ID: pid, TeamID: teamID, SandboxID: sb.ID, Port: req.Port,
		Visibility: req.Visibility, Wake: req.Wake, CreatedAt: s.deps.Now(),
	}
	var token string
	if p.Visibility == api.VisibilityPrivate {
		var b [24]byte
		rand.Read(b[:])
		token = TokenPrefix + hex.EncodeToString(b[:])
		p.TokenHash = hashToken(token)
	}
	if err := s.deps.Store.CreatePreview(ctx, p); err != nil {
		return api.Preview{}, err
	}
	if err := s.node.PublishPort(ctx, sb.ID, p.Port); err != nil {
		if derr := s.deps.Store.DeletePreview(context.WithoutCancel(ctx), teamID, p.ID); derr != nil {
			s.deps.Log.Error("drop a preview that could not be published", "preview", p.ID, "err", derr)
		}
		return api.Preview{}, err
	}
	s.deps.Log.Info("preview created", "preview", p.ID, "sandbox", sb.ID, "port", p.Port, "visibility", p.Visibility)
	v := s.view(p)
	if token != "" {
		v.Token = token
		v.Link = v.URL + "?" + LinkParam + "=" + s.newLink(p.ID, token)
	}
	return v, nil
}

func (s *Service) newLink(previewID, token string) string {
	var b [24]byte
	rand.Read(b[:])
	code := hex.EncodeToString(b[:])
	now := s.deps.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, l := range s.links {
		if now.After(l.expires) {
			delete(s.links, c)
		}
	}
	s.links[code] = link{previewID: previewID, token: token, expires: now.Add(linkTTL)}
	return code
}

// RedeemPreviewLink uses up a one-time link of the preview of a sandbox's
// port and returns the token its cookie carries.
func (s *Service) RedeemPreviewLink(ctx context.Context, sandboxID string, port int, code string) (string, error) {
	gone := api.Errorf(api.CodeUnauthenticated, "this preview link was used already or expired; ask for a new preview token")
	p, err := s.deps.Store.PreviewByPort(ctx, sandboxID, port)
	if err != nil {
		return "", gone
	}
	s.mu.Lock()
	l, ok := s.links[code]
	if ok && l.previewID == p.ID {
		delete(s.links, code)
	}
	s.mu.Unlock()
	if !ok || l.previewID != p.ID || s.deps.Now().After(l.expires) {
		return "", gone
	}
	return l.token, nil
}

// ListPreviews lists a sandbox's previews (without tokens).
func (s *Service) ListPreviews(ctx context.Context, teamID, ref string) (api.List[api.Preview], error) {
	sb, err := s.deps.Lifecycle.GetSandbox(ctx, teamID, ref)
	if err != nil {
		return api.List[api.Preview]{}, err
	}
	ps, err := s.deps.Store.ListPreviews(ctx, sb.ID)
	if err != nil {
		return api.List[api.Preview]{}, err
	}
	items := make([]api.Preview, len(ps))
	for i, p := range ps {
		items[i] = s.view(p)
	}
	return api.List[api.Preview]{Items: items}, nil
}

// DeletePreview unpublishes a preview's port.
func (s *Service) DeletePreview(ctx context.Context, teamID, ref, previewID string) error {
	sb, unlock, err := s.deps.Lifecycle.LockSandbox(ctx, teamID, ref)
	if err != nil {
		return err
	}
	defer unlock()
	p, err := s.deps.Store.GetPreview(ctx, teamID, previewID)
	if err != nil || p.SandboxID != sb.ID {
		return api.Errorf(api.CodeNotFound, "preview %s of sandbox %s not found", previewID, sb.ID)
	}
	if err := s.deps.Store.DeletePreview(ctx, teamID, previewID); err != nil {
		return err
	}
	return s.node.UnpublishPort(ctx, sb.ID, p.Port)
}

// PublishAll publishes again the ports of every live sandbox's previews
// (a restarted node forgot them).
func (s *Service) PublishAll(ctx context.Context) error {
	ps, err := s.deps.Store.ListAllPreviews(ctx)
	if err != nil {
		return err
	}
	ports := map[string][]int{}
	for _, p := range ps {
		ports[p.SandboxID] = append(ports[p.SandboxID], p.Port)
	}
	for sbx, pp := range ports {
		sb, err := s.deps.Store.GetSandbox(ctx, "", sbx)
		if err != nil || sb.State.Terminal() {
			continue
		}
		if err := s.node.Publish(ctx, sbx, pp); err != nil {
			return fmt.Errorf("publish ports of %s: %w", sbx, err)
		}
	}
	return nil
}

// OpenPreview decides a request to a preview: the preview must exist, its
// team must still have the preview admission, a private one needs its
// token, and the sandbox must run (an asleep one is woken when the preview
// says wake). The request counts as activity. It answers the preview.
// tokens are what the request carried (its header's, or its cookies'); a
// private preview needs one of them to be its own.
func (s *Service) OpenPreview(ctx context.Context, sandboxID string, port int, tokens []string) (api.Preview, error) {
	noPreview := api.Errorf(api.CodeNotFound, "no preview of port %d of sandbox %s; publish it with POST /v1/sandboxes/%s/previews", port, sandboxID, sandboxID)
	if !id.HasPrefix(sandboxID, "sbx") {
		return api.Preview{}, noPreview
	}
	p, err := s.deps.Store.PreviewByPort(ctx, sandboxID, port)
	if api.ErrorCode(err) == api.CodeNotFound {
		return api.Preview{}, noPreview
	} else if err != nil {
		return api.Preview{}, err
	}
	if p.Visibility != api.VisibilityPublic {
		if len(tokens) == 0 {
			return api.Preview{}, api.Errorf(api.CodeUnauthenticated, "this preview is private: send its token in the %s header, or open its one-time link", api.PreviewTokenHeader)
		}
		valid := 0
		for _, t := range tokens {
			valid |= subtle.ConstantTimeCompare([]byte(hashToken(t)), []byte(p.TokenHash))
		}
		if valid != 1 {
			return api.Preview{}, api.Errorf(api.CodeUnauthenticated, "the preview token is not valid for this preview")
		}
	}
	if err := s.deps.Admission.RequireAdmission(ctx, p.TeamID, s.cfg.AdmitFlag); err != nil {
		return api.Preview{}, err
	}
	before, err := s.deps.Store.GetSandbox(ctx, p.TeamID, p.SandboxID)
	if err != nil {
		return api.Preview{}, err
	}
	sb, err := s.deps.Lifecycle.LiveSandbox(ctx, p.TeamID, p.SandboxID, p.Wake)
	if err == nil && before.State != api.StateRunning {
		now := s.deps.Now()
		s.mu.Lock()
		for id, t := range s.woken {
			if now.Sub(t) > wakeDialWait {
				delete(s.woken, id)
			}
		}
		s.woken[sb.ID] = now
		s.mu.Unlock()
	}
	if err != nil {
		if api.ErrorCode(err) == api.CodeConflict {
			msg := fmt.Sprintf("sandbox %s is %s", sb.ID, sb.State)
			if sb.State == api.StateAsleep && !p.Wake {
				msg += "; this preview does not wake it (create it with wake: true, or wake the sandbox)"
			}
			return api.Preview{}, api.Errorf(api.CodeUnavailable, "%s", msg)
		}
		return api.Preview{}, err
	}
	return s.view(p), nil
}

// DialPreview connects to the port of a preview that OpenPreview let in.
// Right after a preview's request woke the sandbox, a refused connection
// is tried again for a while (wakeDialWait).
func (s *Service) DialPreview(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	s.deps.Lifecycle.Touch(sandboxID)
	for {
		c, err := s.node.DialPort(ctx, sandboxID, port)
		if err == nil || api.ErrorCode(err) != api.CodeUnavailable {
			return c, err
		}
		s.mu.Lock()
		woken, ok := s.woken[sandboxID]
		s.mu.Unlock()
		if !ok || s.deps.Now().Sub(woken) > wakeDialWait {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}
