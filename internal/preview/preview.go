// Package preview routes HTTP requests into sandboxes' published ports:
// by Host (<port>-<sandbox id>.<preview domain>) or by path
// (/v1/sandboxes/<sandbox id>/ports/<port>/…). The control plane decides
// each request (the preview exists, its token, the sandbox awake); this
// package proxies it: HTTP/1.1, WebSocket and other upgrades, server-sent
// events and large bodies stream through (no buffering, flushed at once).
//
// Preview content is the sandbox's, never trusted: it is served on hosts
// of its own, and the path form, which shares the API's host, always
// carries Content-Security-Policy: sandbox so that it runs in an opaque
// origin. What the router adds (its token header and cookie, a cove API
// key) never reaches the sandbox.
package preview

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
)

// CookieName is the cookie a one-time link sets: the preview's token,
// scoped to the preview's host (or, in the path form, to its path).
const CookieName = "cove_preview"

// Backend decides and connects preview requests (the control plane).
type Backend interface {
	// OpenPreview lets a request to a sandbox's port in, or answers why
	// not (not_found, unauthenticated, permission_denied, unavailable).
	OpenPreview(ctx context.Context, sandboxID string, port int, token string) (api.Preview, error)
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
	domain  string
	onError func(http.ResponseWriter, *http.Request, error)
	proxy   *httputil.ReverseProxy
}

// target is what a request was routed to; it travels in the request's
// context from ServeHTTP to the proxy's Rewrite.
type target struct {
	sandboxID string
	port      int
	prefix    string // the path form's prefix, "" for the Host form
}

type targetKey struct{}

// New returns a router over b for the preview domain (host[:port], or ""
// for the path form only). onError answers an error in the API's format.
func New(b Backend, domain string, onError func(http.ResponseWriter, *http.Request, error)) *Router {
	if h, _, err := net.SplitHostPort(domain); err == nil {
		domain = h
	}
	r := &Router{backend: b, domain: strings.ToLower(strings.TrimSuffix(domain, ".")), onError: onError}
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

// ServePath serves the path form, /v1/sandboxes/{id}/ports/{port}/…,
// from a mux pattern with the wildcards id, port and rest.
func (r *Router) ServePath(w http.ResponseWriter, req *http.Request) {
	// Whatever the answer, it runs in an opaque origin, never the API's.
	w.Header().Add("Content-Security-Policy", "sandbox")
	sbx := req.PathValue("id")
	port, ok := parsePort(req.PathValue("port"))
	if !ok {
		r.onError(w, req, api.Errorf(api.CodeNotFound, "port %q is not a TCP port", req.PathValue("port")))
		return
	}
	prefix := "/v1/sandboxes/" + sbx + "/ports/" + strconv.Itoa(port)
	if req.URL.Path == prefix {
		u := *req.URL
		u.Path += "/"
		http.Redirect(w, req, u.RequestURI(), http.StatusPermanentRedirect)
		return
	}
	r.serve(w, req, target{sandboxID: sbx, port: port, prefix: prefix})
}

func (r *Router) serve(w http.ResponseWriter, req *http.Request, t target) {
	ctx := req.Context()
	if code := req.URL.Query().Get(LinkParam); code != "" {
		r.redeem(w, req, t, code)
		return
	}
	if _, err := r.backend.OpenPreview(ctx, t.sandboxID, t.port, token(req)); err != nil {
		r.onError(w, req, err)
		return
	}
	r.proxy.ServeHTTP(w, req.WithContext(context.WithValue(ctx, targetKey{}, t)))
}

// redeem exchanges a one-time link for a cookie of the preview's host (or
// path) and sends the browser to the same address without the code.
func (r *Router) redeem(w http.ResponseWriter, req *http.Request, t target, code string) {
	tok, err := r.backend.RedeemPreviewLink(req.Context(), t.sandboxID, t.port, code)
	if err != nil {
		r.onError(w, req, err)
		return
	}
	path := "/"
	if t.prefix != "" {
		path = t.prefix + "/"
	}
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: tok, Path: path, HttpOnly: true,
		Secure: req.TLS != nil, SameSite: http.SameSiteLaxMode,
	})
	u := *req.URL
	q := u.Query()
	q.Del(LinkParam)
	u.RawQuery = q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, req, u.RequestURI(), http.StatusSeeOther)
}

// token is the preview token a request carries: the header, else the
// cookie.
func token(req *http.Request) string {
	if t := req.Header.Get(api.PreviewTokenHeader); t != "" {
		return t
	}
	if c, err := req.Cookie(CookieName); err == nil {
		return c.Value
	}
	return ""
}

func (r *Router) rewrite(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(targetKey{}).(target)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = t.sandboxID + ":" + strconv.Itoa(t.port)
	if t.prefix != "" {
		pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, t.prefix)
		pr.Out.URL.RawPath = ""
		pr.Out.Header.Set("X-Forwarded-Prefix", t.prefix)
	}
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
	// What cove uses to let the request in is not the app's business.
	pr.Out.Header.Del(api.PreviewTokenHeader)
	if _, key, _ := strings.Cut(pr.Out.Header.Get("Authorization"), " "); strings.HasPrefix(strings.TrimSpace(key), "cove_") {
		pr.Out.Header.Del("Authorization")
	}
	stripCookie(pr.Out.Header, CookieName)
}

// stripCookie removes one cookie from a request's Cookie headers.
func stripCookie(h http.Header, name string) {
	var keep []string
	for _, line := range h.Values("Cookie") {
		var parts []string
		for _, c := range strings.Split(line, ";") {
			n, _, _ := strings.Cut(strings.TrimSpace(c), "=")
			if n != name && strings.TrimSpace(c) != "" {
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

// modifyResponse keeps the app's cookies on its own host (or path): a
// Domain attribute would reach every preview beside it, and the path
// form's cookies would otherwise land on the API's host at large.
func (r *Router) modifyResponse(resp *http.Response) error {
	t := resp.Request.Context().Value(targetKey{}).(target)
	cookies := resp.Header.Values("Set-Cookie")
	if len(cookies) == 0 {
		return nil
	}
	resp.Header.Del("Set-Cookie")
	for _, line := range cookies {
		c, err := http.ParseSetCookie(line)
		if err != nil || c.Name == CookieName {
			continue
		}
		c.Domain = ""
		if t.prefix != "" {
			c.Path = t.prefix + "/" + strings.TrimPrefix(c.Path, "/")
		}
		if v := c.String(); v != "" {
			resp.Header.Add("Set-Cookie", v)
		}
	}
	return nil
}
