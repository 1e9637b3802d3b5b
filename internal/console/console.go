// Package console serves the web console: a single page built from
// console/ into dist/ (not committed) and embedded in the binary. Every
// page answer carries a strict Content-Security-Policy; the page runs no
// inline script and loads nothing from another origin.
package console

import (
	"bytes"
	"compress/gzip"
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed all:dist
var dist embed.FS

// CSP is the console's Content-Security-Policy: its own scripts and
// styles only, fetches and WebSockets to its own origin, no frames.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type asset struct {
	body, gz []byte
	ctype    string
}

// Handler serves the console's pages and assets and hands every other
// request (the API under /v1, /healthz) to next.
type Handler struct {
	// Pass, when set, hands the requests it picks to next whatever their
	// path (a preview's host, say).
	Pass   func(*http.Request) bool
	next   http.Handler
	index  []byte
	assets map[string]asset
}

// New returns the console in front of next.
func New(next http.Handler) *Handler {
	h := &Handler{next: next, assets: map[string]asset{}}
	sub, _ := fs.Sub(dist, "dist")
	fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return nil
		}
		if p == "index.html" {
			h.index = b
			return nil
		}
		a := asset{body: b, ctype: mime.TypeByExtension(path.Ext(p))}
		if a.ctype == "" {
			a.ctype = "application/octet-stream"
		}
		if len(b) > 512 && (strings.HasSuffix(p, ".js") || strings.HasSuffix(p, ".css") || strings.HasSuffix(p, ".svg")) {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			zw.Write(b)
			zw.Close()
			a.gz = buf.Bytes()
		}
		h.assets["/"+p] = a
		return nil
	})
	return h
}

// Built reports whether dist held a built console.
func (h *Handler) Built() bool { return h.index != nil }

// notBuilt is served at / when the binary was built without the console.
const notBuilt = `<!doctype html><meta charset="utf-8"><title>cove</title>
<h1>The console is not built</h1>
<p>This cove binary was built without the web console. Build it with <code>make build</code>,
which runs <code>npm ci &amp;&amp; npm run build</code> in <code>console/</code> before <code>go build</code>.
The API is served under <code>/v1</code>.</p>
`

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if (h.Pass != nil && h.Pass(r)) || p == "/healthz" || p == "/v1" || strings.HasPrefix(p, "/v1/") || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		h.next.ServeHTTP(w, r)
		return
	}
	if p == "/" || p == "/index.html" || strings.HasPrefix(p, "/sandboxes/") || p == "/sandboxes" || p == "/usage" || p == "/team" {
		h.page(w)
		return
	}
	if a, ok := h.assets[p]; ok {
		hd := w.Header()
		hd.Set("Content-Type", a.ctype)
		hd.Set("X-Content-Type-Options", "nosniff")
		// Assets are named by their content's hash.
		hd.Set("Cache-Control", "public, max-age=31536000, immutable")
		body := a.body
		if a.gz != nil {
			hd.Add("Vary", "Accept-Encoding")
			if acceptsGzip(r) {
				hd.Set("Content-Encoding", "gzip")
				body = a.gz
			}
		}
		w.Write(body)
		return
	}
	h.next.ServeHTTP(w, r)
}

func (h *Handler) page(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	// The page names the current assets: always revalidate it.
	hd.Set("Cache-Control", "no-cache")
	if h.index == nil {
		w.Write([]byte(notBuilt))
		return
	}
	w.Write(h.index)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
