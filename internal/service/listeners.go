package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
)

// Listeners are the addresses the service bound, by name: "api",
// "gateway", "dns" (the last two unless the network is disabled). A
// listener added later (preview, metrics, MCP) binds before the API
// serves and adds its own name, so the ready file and GET /healthz report
// it too. Complete before serving, then only read.
type Listeners map[string]string

// Ready is what the ready file holds.
type Ready struct {
	PID       int       `json:"pid"`
	Listeners Listeners `json:"listeners"`
}

// writeReady writes the ready file atomically: a reader sees no file or
// the whole of it.
func writeReady(path string, r Ready) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ready-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// removeReady removes the ready file; one left by a process that did not
// stop gracefully must not say that a new one serves.
func removeReady(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// withListeners adds "listeners" to the JSON object GET /healthz answers:
// the API reports the control plane's health, the service what it bound.
func withListeners(next http.Handler, l Listeners) http.Handler {
	report, err := json.Marshal(l)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		body := rec.body.Bytes()
		var m map[string]json.RawMessage
		if rec.status == http.StatusOK && json.Unmarshal(body, &m) == nil && m != nil {
			m["listeners"] = report
			if b, err := json.Marshal(m); err == nil {
				body = append(b, '\n')
			}
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.status)
		w.Write(body)
	})
}

// recorder keeps a small answer (GET /healthz) to amend it.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(status int)      { r.status = status }
