// Package preview routes HTTP requests into sandboxes' published ports by
// Host: <port>-<sandbox id>.<preview domain>. The control plane decides
// each request (the preview exists, its token, the sandbox awake); this
// package proxies it: HTTP/1.1, WebSocket and other upgrades, server-sent
// events and large bodies stream through (no buffering, flushed at once).
//
// Preview content is the sandbox's, never trusted: every preview is an
// origin of its own, and nothing of a tenant is ever served on the API's
// host, whose origin is the console's (the path form that once did is
// answered 404 with the preview's address). What the router adds (its
// token header and cookie, a cove API key) never reaches the sandbox, and
// a private preview's cookie is used only by its own pages and by
// top-level navigations: a request that carries it from another origin
// (a script's, an image, a frame, a WebSocket) is refused.
package preview

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
)

// CookieName is the cookie a one-time link sets over http: the preview's
// host label and token, host-only.
const CookieName = "cove_preview"

// SecureCookieName is the cookie over https (also behind a TLS-terminating
// proxy): the __Host- prefix makes browsers keep it host-only, Secure and
// at path /, so a sibling preview cannot set one for the whole domain.
const SecureCookieName = "__Host-" + CookieName

// Backend decides and connects preview requests (the control plane).
type Backend interface {
	// OpenPreview lets a request to a sandbox's port in, or answers why
	// not (not_found, unauthenticated, permission_denied, unavailable).
	// tokens are those the request carried; a private preview needs one
	// of them to be its own.
	OpenPreview(ctx context.Context, sandboxID string, port int, tokens []string) (api.Preview, error)
	// DialPreview connects to the port of a preview that was let in.
	DialPreview(ctx context.Context, sandboxID string, port int) (net.Conn, error)
	// RedeemPreviewLink uses up a one-time link and returns the token its
	// cookie will carry.
	RedeemPreviewLink(ctx context.Context, sandboxID string, port int, code string) (string, error)
}

// LinkParam is the query parameter of a one-time link.
const LinkParam = "cove_preview_link"

// Router proxies requests to previews.
type Router struct {
	backend Backend
	// domain is the preview domain's host name, lower case, without a
	// port; "" routes no Host.
	domain string
	// address is the domain as URLs name it (host[:port]) and scheme
	// theirs: "https" makes the cookie __Host- and Secure even where a
	// proxy in front ended TLS.
	address, scheme string
	onError         func(http.ResponseWriter, *http.Request, error)
	proxy           *httputil.ReverseProxy
}

// target is what a request was routed to; it travels in the request's
// context from ServeHTTP to the proxy's Rewrite.
type target struct {
	sandboxID string
	port      int
	// byCookie says the visitor's cookie let the request in: its answer
	// may be framed by the preview's own pages alone.
	byCookie bool
}

// label is the preview's first host label, <port>-<sandbox id>.
func (t target) label() string { return strconv.Itoa(t.port) + "-" + t.sandboxID }

type targetKey struct{}

// New returns a router over b for the preview domain (host[:port]) whose
// URLs have scheme (http or https). onError answers an error in the API's
// format.
func New(b Backend, domain, scheme string, onError func(http.ResponseWriter, *http.Request, error)) *Router {
	address := strings.ToLower(domain)
	if h, _, err := net.SplitHostPort(domain); err == nil {
		domain = h
	}
	if scheme == "" {
		scheme = "http"
	}
	r := &Router{
		backend: b, domain: strings.ToLower(strings.TrimSuffix(domain, ".")),
		address: address, scheme: scheme, onError: onError,
	}
	tr := &http.Transport{
		// The address is "<sandbox id>:<port>", never a host name.
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			p, err := strconv.Atoi(port)
			if err != nil {
				return nil, err
			}
			return b.DialPreview(ctx, host, p)
		},
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 0, // a slow app answers when it answers
		DisableCompression:    true,
	}
	r.proxy = &httputil.ReverseProxy{
		Rewrite:        r.rewrite,
		Transport:      tr,
		FlushInterval:  -1,
		ModifyResponse: r.modifyResponse,
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			var e *api.Error
			if !errors.As(err, &e) {
				if req.Context().Err() != nil {
					return // the client went away
				}
				e = api.Errorf(api.CodeUnavailable, "the sandbox's server did not answer: start it and check that it speaks HTTP/1.1 on the port")
			}
			r.onError(w, req, e)
		},
	}
	return r
}

// URL is the address of a preview: scheme://<port>-<sandbox id>.<domain>/.
func (r *Router) URL(sandboxID string, port int) string {
	return fmt.Sprintf("%s://%d-%s.%s/", r.scheme, port, sandboxID, r.address)
}

// Match reports whether host names a preview: <port>-<sandbox id>.<domain>.
func (r *Router) Match(host string) (sandboxID string, port int, ok bool) {
	if r.domain == "" {
		return "", 0, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	label, ok := strings.CutSuffix(host, "."+r.domain)
	if !ok || strings.Contains(label, ".") {
		return "", 0, false
	}
	ps, sbx, ok := strings.Cut(label, "-")
	if !ok {
		return "", 0, false
	}
	port, ok = parsePort(ps)
	if !ok || sbx == "" {
		return "", 0, false
	}
	return sbx, port, true
}

func parsePort(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == s
}

// ServeHTTP serves a request whose Host names a preview; other requests
// get a 404.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	sbx, port, ok := r.Match(req.Host)
	if !ok {
		r.onError(w, req, api.Errorf(api.CodeNotFound, "this address is for previews: <port>-<sandbox id>.%s", r.domain))
		return
	}
	r.serve(w, req, target{sandboxID: sbx, port: port})
}

// ServePath answers the former path form, /v1/sandboxes/{id}/ports/{port}/…
// on the API's host, with a 404 that names the preview's own address: the
// API's origin is the console's, and a tenant's page served there could
// read the console's key or register a Service Worker over it.
func (r *Router) ServePath(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Security-Policy", "sandbox")
	sbx := req.PathValue("id")
	port, ok := parsePort(req.PathValue("port"))
	if !ok || sbx == "" || strings.ContainsAny(sbx, "./:") {
		r.onError(w, req, api.Errorf(api.CodeNotFound, "previews are not served on the API's address; open <port>-<sandbox id>.%s", r.address))
		return
	}
	u := strings.TrimSuffix(r.URL(sbx, port), "/") + "/" + req.PathValue("rest")
	r.onError(w, req, api.Errorf(api.CodeNotFound, "previews are not served on the API's address, only on hosts of their own: open %s", u))
}

func (r *Router) serve(w http.ResponseWriter, req *http.Request, t target) {
	ctx := req.Context()
	if code := req.URL.Query().Get(LinkParam); code != "" {
		r.redeem(w, req, t, code)
		return
	}
	tokens, byCookie := r.tokens(req, t)
	why := ""
	if byCookie {
		why = crossOrigin(req)
	}
	if why != "" {
		// A page of another origin (a sibling preview, any site) sends
		// this preview's cookie along: it may use a public preview as
		// anyone may, never the visitor's access to a private one.
		tokens = nil
	}
	p, err := r.backend.OpenPreview(ctx, t.sandboxID, t.port, tokens)
	if err != nil {
		if why != "" && api.ErrorCode(err) == api.CodeUnauthenticated {
			err = api.Errorf(api.CodePermissionDenied, "this private preview refuses requests that carry its cookie from a page of another origin (%s); open it at %s", why, r.URL(t.sandboxID, t.port))
		}
		r.onError(w, req, err)
		return
	}
	// Only the visitor's cookie can be abused by another origin's page
	// (a token header is a program's, a public preview anyone's).
	t.byCookie = byCookie && p.Visibility != api.VisibilityPublic
	r.proxy.ServeHTTP(informational{w}, req.WithContext(context.WithValue(ctx, targetKey{}, t)))
}

// crossOrigin says why a request that carries a private preview's cookie
// came from a page of another origin, or "" when it may use the cookie.
// Sibling previews are the same site, so the cookie (SameSite=Lax) goes
// along with whatever their pages make the browser send. Fetch Metadata,
// where the browser sends it, tells: the preview's own pages and what
// the visitor typed or bookmarked (same-origin, none) may use it; from
// anywhere else, only a top-level navigation (a link followed) may, not
// an image, script, style, no-cors fetch, frame or WebSocket. Without it
// (older browsers, curl), and whatever it says, an Origin of another
// host, or null, is refused.
func crossOrigin(req *http.Request) string {
	if origin, foreign := foreignOrigin(req); foreign {
		return "Origin: " + origin
	}
	switch site := req.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
		return ""
	default:
		mode, dest := req.Header.Get("Sec-Fetch-Mode"), req.Header.Get("Sec-Fetch-Dest")
		if mode == "navigate" && dest == "document" {
			return ""
		}
		return fmt.Sprintf("Sec-Fetch-Site: %s, Sec-Fetch-Mode: %s, Sec-Fetch-Dest: %s; only a top-level navigation may come from elsewhere", site, mode, dest)
	}
}

// foreignOrigin reports whether the request's Origin names a host other
// than the request's own (or is "null": a sandboxed frame, a data: URL,
// a redirect across origins). A request without Origin (a navigation)
// is not foreign.
func foreignOrigin(req *http.Request) (string, bool) {
	origins := req.Header.Values("Origin")
	for _, o := range origins {
		u, err := url.Parse(strings.TrimSpace(o))
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return o, true
		}
		if hostPort(u.Host, u.Scheme) != hostPort(req.Host, u.Scheme) {
			return o, true
		}
	}
	return "", false
}

// hostPort is host[:port] in one spelling: lower case, no final dot, the
// scheme's default port when none is named.
func hostPort(hp, scheme string) string {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		host, port = hp, ""
	}
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(strings.ToLower(strings.TrimSuffix(host, ".")), port)
}

// secure reports whether the preview's cookie is the __Host- one: the
// request came over TLS, or the previews' URLs are https (TLS ended by a
// proxy in front).
func (r *Router) secure(req *http.Request) bool {
	return req.TLS != nil || r.scheme == "https"
}

func (r *Router) cookieName(req *http.Request) string {
	if r.secure(req) {
		return SecureCookieName
	}
	return CookieName
}

// redeem exchanges a one-time link for a host-only cookie of the preview
// and sends the browser to the same address without the code.
func (r *Router) redeem(w http.ResponseWriter, req *http.Request, t target, code string) {
	tok, err := r.backend.RedeemPreviewLink(req.Context(), t.sandboxID, t.port, code)
	if err != nil {
		r.onError(w, req, err)
		return
	}
	// The value names the preview it is for: over http, where __Host- is
	// not available, a sibling preview may set a cookie of the same name
	// for the whole domain, and such a cookie is never this preview's.
	http.SetCookie(w, &http.Cookie{
		Name: r.cookieName(req), Value: t.label() + "." + tok, Path: "/", HttpOnly: true,
		Secure: r.secure(req), SameSite: http.SameSiteLaxMode,
	})
	u := *req.URL
	q := u.Query()
	q.Del(LinkParam)
	u.RawQuery = q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, req, u.RequestURI(), http.StatusSeeOther)
}

// tokens are the preview tokens a request carries: the header's, else
// those of every cookie of the name made for this preview (a browser
// sends a sibling's cookie for the domain beside the host's own, in
// either order). byCookie says they came from cookies.
func (r *Router) tokens(req *http.Request, t target) (tokens []string, byCookie bool) {
	if tok := req.Header.Get(api.PreviewTokenHeader); tok != "" {
		return []string{tok}, false
	}
	prefix := t.label() + "."
	for _, c := range req.CookiesNamed(r.cookieName(req)) {
		if tok, ok := strings.CutPrefix(c.Value, prefix); ok && tok != "" {
			tokens = append(tokens, tok)
		}
	}
	return tokens, len(tokens) > 0
}

// informational passes an app's 1xx answers (103 Early Hints, 100) on
// with their Link headers alone: the proxy copies an interim answer's
// headers into the response's map, writes them and then clears the map,
// so nothing the router sets may live there before the final answer
// (ModifyResponse sets it), and nothing of an interim answer escapes the
// rules that the final one is held to.
type informational struct{ http.ResponseWriter }

func (w informational) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		h := w.Header()
		for k := range h {
			if k != "Link" {
				delete(h, k)
			}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach Flush and Hijack (upgrades).
func (w informational) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (r *Router) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = t.sandboxID + ":" + strconv.Itoa(t.port)
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
	// What cove uses to let the request in is not the app's business.
	pr.Out.Header.Del(api.PreviewTokenHeader)
	if _, key, _ := strings.Cut(pr.Out.Header.Get("Authorization"), " "); strings.HasPrefix(strings.TrimSpace(key), "cove_") || strings.HasPrefix(strings.TrimSpace(key), "e2b_") {
		pr.Out.Header.Del("Authorization")
	}
	// E2B's SDKs send their key (a cove key) and the sandbox's access
	// token in these; neither is the app's.
	pr.Out.Header.Del("X-API-Key")
	pr.Out.Header.Del("X-Access-Token")
	stripCookie(pr.Out.Header, CookieName, SecureCookieName)
}

// stripCookie removes the named cookies from a request's Cookie headers.
func stripCookie(h http.Header, names ...string) {
	var keep []string
	for _, line := range h.Values("Cookie") {
		var parts []string
		for _, c := range strings.Split(line, ";") {
			n, _, _ := strings.Cut(strings.TrimSpace(c), "=")
			if !slices.Contains(names, n) && strings.TrimSpace(c) != "" {
				parts = append(parts, strings.TrimSpace(c))
			}
		}
		if len(parts) > 0 {
			keep = append(keep, strings.Join(parts, "; "))
		}
	}
	h.Del("Cookie")
	for _, k := range keep {
		h.Add("Cookie", k)
	}
}

// modifyResponse holds the app's final answer to the preview's rules. Its
// cookies stay on its own host (a Domain attribute would reach every
// preview beside it) and never take the router's names; its Service
// Worker scope stays under the script's path (Service-Worker-Allowed
// could widen it to the whole origin); an answer the visitor's cookie let
// in may be framed by its own origin alone. It runs on the final answer,
// after any 1xx, so what it sets is what the browser gets.
func (r *Router) modifyResponse(resp *http.Response) error {
	resp.Header.Del("Service-Worker-Allowed")
	if t, _ := resp.Request.Context().Value(targetKey{}).(target); t.byCookie {
		// For browsers without Fetch Metadata, which would load a frame
		// of another origin's page with the visitor's cookie. A policy
		// of its own beside the app's: browsers enforce every policy, so
		// it only narrows the app's, and an app let in by a cookie is
		// framed by nobody else already where Fetch Metadata is sent.
		resp.Header.Add("Content-Security-Policy", "frame-ancestors 'self'")
	}
	cookies := resp.Header.Values("Set-Cookie")
	if len(cookies) == 0 {
		return nil
	}
	resp.Header.Del("Set-Cookie")
	for _, line := range cookies {
		c, err := http.ParseSetCookie(line)
		if err != nil || c.Name == CookieName || c.Name == SecureCookieName {
			continue
		}
		c.Domain = ""
		if v := c.String(); v != "" {
			resp.Header.Add("Set-Cookie", v)
		}
	}
	return nil
}
