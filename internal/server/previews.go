package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
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

// previewTokenPrefix marks preview tokens (never API keys).
const previewTokenPrefix = "cpt_"

// previewLinkTTL is how long a one-time link may wait for its first use.
const previewLinkTTL = 10 * time.Minute

// previewLinks holds the one-time links of private previews, in memory
// (a link that outlives a restart is simply asked for again), and when a
// preview's request last woke each sandbox.
type previewLinks struct {
	mu    sync.Mutex
	links map[string]previewLink // by code
	woken map[string]time.Time   // by sandbox
}

// wakeDialWait is how long, after a preview's request woke a sandbox, a
// refused connection to its port is tried again: processes do not survive
// a sleep, so the first request waits while the app is started again
// (by its owner, through the API) instead of failing at once.
const wakeDialWait = 60 * time.Second

type previewLink struct {
	previewID string
	token     string
	expires   time.Time
}

// PreviewURLs says where previews are reached; set before serving.
type PreviewURLs struct {
	// Domain is the preview domain, host[:port]: previews are served at
	// <port>-<sandbox id>.<Domain>, each an origin of its own.
	Domain string
	// Scheme of the host-form URLs. Default http.
	Scheme string
}

// SetPreviewURLs sets where previews are reached. Call it before serving.
func (s *Server) SetPreviewURLs(u PreviewURLs) {
	if u.Scheme == "" {
		u.Scheme = "http"
	}
	s.previewURLs = u
}

func (s *Server) previewView(p store.Preview) api.Preview {
	return api.Preview{
		ID: p.ID, SandboxID: p.SandboxID, Port: p.Port, Visibility: p.Visibility,
		Wake: p.Wake, CreatedAt: p.CreatedAt,
		URL: fmt.Sprintf("%s://%d-%s.%s/", s.previewURLs.Scheme, p.Port, p.SandboxID, s.previewURLs.Domain),
	}
}

// CreatePreview publishes a port of a sandbox. The team needs the preview
// admission. A private preview's token (and a one-time link that sets it
// as a cookie) is answered once.
func (s *Server) CreatePreview(ctx context.Context, teamID, ref string, req api.CreatePreviewRequest) (api.Preview, error) {
	if err := s.requireAdmission(ctx, teamID, admitPreview); err != nil {
		return api.Preview{}, err
	}
	if req.Port < 1 || req.Port > 65535 {
		return api.Preview{}, invalid("port %d is not a TCP port; use 1 to 65535", req.Port)
	}
	switch req.Visibility {
	case "":
		req.Visibility = api.VisibilityPrivate
	case api.VisibilityPrivate, api.VisibilityPublic:
	default:
		return api.Preview{}, invalid("visibility is %q; use private or public", req.Visibility)
	}
	sb, o, err := s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return api.Preview{}, err
	}
	defer o.mu.Unlock()
	if sb.State.Terminal() || sb.State == api.StateTerminating {
		return api.Preview{}, api.Errorf(api.CodeConflict, "sandbox %s is %s; previews need a sandbox that lives", sb.ID, sb.State)
	}
	// Counted under the sandbox's lock, which every create and delete of
	// its previews holds.
	existing, err := s.store.ListPreviews(ctx, sb.ID)
	if err != nil {
		return api.Preview{}, err
	}
	if max := s.cfg.MaxPreviewsPerSandbox; len(existing) >= max {
		e := api.Errorf(api.CodeConflict, "sandbox %s has %d previews, the most one sandbox may publish (cove serve --max-previews-per-sandbox); delete one first: DELETE /v1/sandboxes/%s/previews/{id} (cove preview %s --rm ID)", sb.ID, len(existing), sb.ID, sb.ID)
		e.Details = map[string]any{"limit": max}
		return api.Preview{}, e
	}
	p := store.Preview{
		ID: id.New("prv"), TeamID: teamID, SandboxID: sb.ID, Port: req.Port,
		Visibility: req.Visibility, Wake: req.Wake, CreatedAt: s.now(),
	}
	var token string
	if p.Visibility == api.VisibilityPrivate {
		var b [24]byte
		rand.Read(b[:])
		token = previewTokenPrefix + hex.EncodeToString(b[:])
		p.TokenHash = hashKey(token)
	}
	if err := s.store.CreatePreview(ctx, p); err != nil {
		return api.Preview{}, err
	}
	if err := s.node.PublishPort(ctx, sb.ID, p.Port); err != nil {
		if derr := s.store.DeletePreview(context.WithoutCancel(ctx), teamID, p.ID); derr != nil {
			s.log.Error("drop a preview that could not be published", "preview", p.ID, "err", derr)
		}
		return api.Preview{}, err
	}
	s.log.Info("preview created", "preview", p.ID, "sandbox", sb.ID, "port", p.Port, "visibility", p.Visibility)
	v := s.previewView(p)
	if token != "" {
		v.Token = token
		v.Link = v.URL + "?" + PreviewLinkParam + "=" + s.newPreviewLink(p.ID, token)
	}
	return v, nil
}

// PreviewLinkParam is the query parameter of a one-time link.
const PreviewLinkParam = "cove_preview_link"

func (s *Server) newPreviewLink(previewID, token string) string {
	var b [24]byte
	rand.Read(b[:])
	code := hex.EncodeToString(b[:])
	now := s.now()
	s.links.mu.Lock()
	defer s.links.mu.Unlock()
	if s.links.links == nil {
		s.links.links = map[string]previewLink{}
	}
	for c, l := range s.links.links {
		if now.After(l.expires) {
			delete(s.links.links, c)
		}
	}
	s.links.links[code] = previewLink{previewID: previewID, token: token, expires: now.Add(previewLinkTTL)}
	return code
}

// RedeemPreviewLink uses up a one-time link of the preview of a sandbox's
// port and returns the token its cookie carries.
func (s *Server) RedeemPreviewLink(ctx context.Context, sandboxID string, port int, code string) (string, error) {
	gone := api.Errorf(api.CodeUnauthenticated, "this preview link was used already or expired; ask for a new preview token")
	p, err := s.store.PreviewByPort(ctx, sandboxID, port)
	if err != nil {
		return "", gone
	}
	s.links.mu.Lock()
	l, ok := s.links.links[code]
	if ok && l.previewID == p.ID {
		delete(s.links.links, code)
	}
	s.links.mu.Unlock()
	if !ok || l.previewID != p.ID || s.now().After(l.expires) {
		return "", gone
	}
	return l.token, nil
}

// ListPreviews lists a sandbox's previews (without tokens).
func (s *Server) ListPreviews(ctx context.Context, teamID, ref string) (api.List[api.Preview], error) {
	sb, err := s.GetSandbox(ctx, teamID, ref)
	if err != nil {
		return api.List[api.Preview]{}, err
	}
	ps, err := s.store.ListPreviews(ctx, sb.ID)
	if err != nil {
		return api.List[api.Preview]{}, err
	}
	items := make([]api.Preview, len(ps))
	for i, p := range ps {
		items[i] = s.previewView(p)
	}
	return api.List[api.Preview]{Items: items}, nil
}

// DeletePreview unpublishes a preview's port.
func (s *Server) DeletePreview(ctx context.Context, teamID, ref, previewID string) error {
	sb, o, err := s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return err
	}
	defer o.mu.Unlock()
	p, err := s.store.GetPreview(ctx, teamID, previewID)
	if err != nil || p.SandboxID != sb.ID {
		return api.Errorf(api.CodeNotFound, "preview %s of sandbox %s not found", previewID, sb.ID)
	}
	if err := s.store.DeletePreview(ctx, teamID, previewID); err != nil {
		return err
	}
	return s.node.UnpublishPort(ctx, sb.ID, p.Port)
}

// publishAll publishes again the ports of every live sandbox's previews
// (a restarted node forgot them).
func (s *Server) publishAll(ctx context.Context) error {
	ps, err := s.store.ListAllPreviews(ctx)
	if err != nil {
		return err
	}
	ports := map[string][]int{}
	for _, p := range ps {
		ports[p.SandboxID] = append(ports[p.SandboxID], p.Port)
	}
	for sbx, pp := range ports {
		sb, err := s.store.GetSandbox(ctx, "", sbx)
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
func (s *Server) OpenPreview(ctx context.Context, sandboxID string, port int, tokens []string) (api.Preview, error) {
	r := struct {
		SandboxID string
		Tokens    []string
		Port      int
	}{sandboxID, tokens, port}
	noPreview := api.Errorf(api.CodeNotFound, "no preview of port %d of sandbox %s; publish it with POST /v1/sandboxes/%s/previews", r.Port, r.SandboxID, r.SandboxID)
	if !id.HasPrefix(r.SandboxID, "sbx") {
		return api.Preview{}, noPreview
	}
	p, err := s.store.PreviewByPort(ctx, r.SandboxID, r.Port)
	if api.ErrorCode(err) == api.CodeNotFound {
		return api.Preview{}, noPreview
	} else if err != nil {
		return api.Preview{}, err
	}
	if p.Visibility != api.VisibilityPublic {
		if len(r.Tokens) == 0 {
			return api.Preview{}, api.Errorf(api.CodeUnauthenticated, "this preview is private: send its token in the %s header, or open its one-time link", api.PreviewTokenHeader)
		}
		valid := 0
		for _, t := range r.Tokens {
			valid |= subtle.ConstantTimeCompare([]byte(hashKey(t)), []byte(p.TokenHash))
		}
		if valid != 1 {
			return api.Preview{}, api.Errorf(api.CodeUnauthenticated, "the preview token is not valid for this preview")
		}
	}
	if err := s.requireAdmission(ctx, p.TeamID, admitPreview); err != nil {
		return api.Preview{}, err
	}
	before, err := s.store.GetSandbox(ctx, p.TeamID, p.SandboxID)
	if err != nil {
		return api.Preview{}, err
	}
	sb, err := s.LiveSandbox(ctx, p.TeamID, p.SandboxID, p.Wake)
	if err == nil && before.State != api.StateRunning {
		s.links.mu.Lock()
		if s.links.woken == nil {
			s.links.woken = map[string]time.Time{}
		}
		for id, t := range s.links.woken {
			if s.now().Sub(t) > wakeDialWait {
				delete(s.links.woken, id)
			}
		}
		s.links.woken[sb.ID] = s.now()
		s.links.mu.Unlock()
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
	return s.previewView(p), nil
}

// DialPreview connects to the port of a preview that OpenPreview let in.
// Right after a preview's request woke the sandbox, a refused connection
// is tried again for a while (wakeDialWait).
func (s *Server) DialPreview(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	s.touch(sandboxID)
	for {
		c, err := s.node.DialPort(ctx, sandboxID, port)
		if err == nil || api.ErrorCode(err) != api.CodeUnavailable {
			return c, err
		}
		s.links.mu.Lock()
		woken, ok := s.links.woken[sandboxID]
		s.links.mu.Unlock()
		if !ok || s.now().Sub(woken) > wakeDialWait {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}
