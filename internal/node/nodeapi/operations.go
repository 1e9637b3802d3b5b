package nodeapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// OpTTL is how long the node remembers a state-changing call's answer by
// its operation ID.
const OpTTL = 10 * time.Minute

// maxOpID bounds an operation ID's length.
const maxOpID = 128

// operations remembers the answers of state-changing calls by operation
// ID, so that a retry never runs a call twice.
type operations struct {
	mu    sync.Mutex
	ops   map[string]*operation
	swept time.Time
}

// operation is a call under way (done open) or its recorded answer.
type operation struct {
	done   chan struct{}
	status int
	header http.Header
	body   []byte
	at     time.Time // when it ended
}

func newOperations() *operations { return &operations{ops: map[string]*operation{}} }

// begin returns the operation of key and whether the caller runs it (it
// is new); else the caller waits for its answer.
func (o *operations) begin(key string, now time.Time) (*operation, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if now.Sub(o.swept) > OpTTL/60 {
		o.swept = now
		for k, op := range o.ops {
			if !op.at.IsZero() && now.Sub(op.at) > OpTTL {
				delete(o.ops, k)
			}
		}
	}
	if op, ok := o.ops[key]; ok {
		return op, false
	}
	op := &operation{done: make(chan struct{})}
	o.ops[key] = op
	return op, true
}

// end records the answer, or forgets the operation when keep is false (a
// call whose request body failed did not happen as asked: a retry runs
// it again).
func (o *operations) end(key string, op *operation, keep bool, now time.Time) {
	o.mu.Lock()
	op.at = now
	if !keep {
		delete(o.ops, key)
	}
	o.mu.Unlock()
	close(op.done)
}

// recorder is the ResponseWriter of a de-duplicated call: its answer is
// kept to replay.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// bodyWatch notes a request body that failed before its end.
type bodyWatch struct {
	io.ReadCloser
	mu     sync.Mutex
	failed bool
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		b.failed = true
		b.mu.Unlock()
	}
	return n, err
}

func (b *bodyWatch) broken() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failed
}

// once runs a state-changing call at most once per operation ID: a retry
// while it runs waits for its answer, a later one gets it replayed. The
// call runs to its end even if its caller goes away (until the server
// closes), so that its answer is there for the retry.
func (s *Server) once(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(OperationHeader)
		if id == "" || len(id) > maxOpID {
			h(w, r)
			return
		}
		key := r.URL.Path + " " + id
		op, run := s.ops.begin(key, time.Now())
		if !run {
			select {
			case <-op.done:
			case <-r.Context().Done():
				return
			}
			replay(w, op)
			return
		}
		ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
		stop := context.AfterFunc(s.ctx, cancel)
		body := &bodyWatch{ReadCloser: r.Body}
		r2 := r.WithContext(ctx)
		r2.Body = body
		rec := &recorder{header: http.Header{}}
		h(rec, r2)
		stop()
		cancel()
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		op.status, op.header, op.body = rec.status, rec.header, rec.body.Bytes()
		s.ops.end(key, op, !body.broken(), time.Now())
		replay(w, op)
	}
}

func replay(w http.ResponseWriter, op *operation) {
	for k, v := range op.header {
		w.Header()[k] = v
	}
	w.WriteHeader(op.status)
	w.Write(op.body)
}
