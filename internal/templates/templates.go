// Package templates keeps the state of the templates a node serves: which
// are building (and how far), ready or failed, and what their self-tests
// found. The service writes it as builds and self-tests go; the control
// plane reads it to refuse creates on templates that are not ready.
package templates

import (
	"slices"
	"sort"
	"sync"

	"github.com/cove-dev/cove/api"
)

// Registry holds every template's state; safe for concurrent use.
type Registry struct {
	mu sync.Mutex
	t  map[string]api.Template
	// changed is closed and replaced at every change.
	changed chan struct{}
}

// New returns an empty registry.
func New() *Registry { return &Registry{t: map[string]api.Template{}, changed: make(chan struct{})} }

// Set replaces a template's state.
func (r *Registry) Set(t api.Template) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t[t.Name] = t
	close(r.changed)
	r.changed = make(chan struct{})
}

// Update changes a template's state in place, if it is known.
func (r *Registry) Update(name string, fn func(*api.Template)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.t[name]
	if !ok {
		return
	}
	fn(&t)
	r.t[name] = t
	close(r.changed)
	r.changed = make(chan struct{})
}

// Get returns a template's state.
func (r *Registry) Get(name string) (api.Template, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.t[name]
	return clone(t), ok
}

// List returns every template, by name.
func (r *Registry) List() []api.Template {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]api.Template, 0, len(r.t))
	for _, t := range r.t {
		out = append(out, clone(t))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Changed is closed at the next change.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

func clone(t api.Template) api.Template {
	if t.SelfTest != nil {
		st := *t.SelfTest
		st.Results = slices.Clone(st.Results)
		st.Failures = slices.Clone(st.Failures)
		t.SelfTest = &st
	}
	return t
}

// Progress is an io.Writer that records the last line written as a
// building template's progress.
type Progress struct {
	R    *Registry
	Name string
	buf  []byte
}

func (p *Progress) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := slices.Index(p.buf, '\n')
		if i < 0 {
			break
		}
		line := string(p.buf[:i])
		p.buf = p.buf[i+1:]
		if line != "" {
			p.R.Update(p.Name, func(t *api.Template) { t.Progress = line })
		}
	}
	if len(p.buf) > 4096 {
		p.buf = p.buf[len(p.buf)-4096:]
	}
	return len(b), nil
}
