package cove

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
)

// recorder is a test server that answers from a script and records each
// request.
type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
	at   []time.Time
}

func (r *recorder) add(req *http.Request) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req.Clone(context.Background()))
	r.at = append(r.at, time.Now())
	return len(r.reqs)
}

func (r *recorder) requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.reqs...)
}

func writeAPIError(w http.ResponseWriter, status int, code api.Code) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":"scripted"}}`, code)
}

func TestRetryAfterIsHonoured(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec.add(r) == 1 {
			w.Header().Set("Retry-After", "1")
			writeAPIError(w, http.StatusTooManyRequests, api.CodeResourceExhausted)
			return
		}
		w.Write([]byte(`{"id":"sb_1","state":"running"}`))
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	sb, err := c.GetSandbox(t.Context(), "sb_1")
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb_1" || len(rec.requests()) != 2 {
		t.Fatalf("got %+v after %d requests, want sb_1 after 2", sb, len(rec.requests()))
	}
	if gap := rec.at[1].Sub(rec.at[0]); gap < time.Second {
		t.Errorf("retried %v after a 429 with Retry-After: 1", gap)
	}
}

func TestTransportErrorIsTheSDKsError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := NewClient(WithBaseURL("http://"+addr), WithRetry(RetryPolicy{Attempts: 2, Base: time.Millisecond, Max: time.Millisecond}))
	_, err = c.GetSandbox(t.Context(), "x")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %T %v is not *cove.Error", err, err)
	}
	if ce.Code != api.CodeUnavailable || ce.Status != 0 || ce.Err == nil || ce.RequestID == "" {
		t.Errorf("transport error = %+v, want code unavailable, no status, a cause and a request ID", ce)
	}
	if api.ErrorCode(err) != api.CodeUnavailable {
		t.Errorf("api.ErrorCode = %s", api.ErrorCode(err))
	}
}

func TestIdempotencyKeysAndRetries(t *testing.T) {
	tests := []struct {
		name     string
		call     func(c *Client, ctx context.Context) error
		script   []int // statuses answered in turn, then 200
		conflict bool  // the 409s carry Retry-After
		wantKey  bool
		wantReqs int
	}{
		{"create retried on 503 under one key", func(c *Client, ctx context.Context) error {
			_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{}, false)
			return err
		}, []int{503, 503}, false, true, 3},
		{"conflict with Retry-After retried", func(c *Client, ctx context.Context) error {
			_, err := c.Exec(ctx, "sb", api.CreateCommandRequest{Command: "true"})
			return err
		}, []int{409}, true, true, 2},
		{"conflict without Retry-After is final", func(c *Client, ctx context.Context) error {
			_, err := c.SleepSandbox(ctx, "sb")
			return err
		}, []int{409}, false, true, 1},
		{"team create takes no key and is not retried", func(c *Client, ctx context.Context) error {
			_, err := c.CreateTeam(ctx, "t")
			return err
		}, []int{503}, false, false, 1},
		{"ticket takes no key", func(c *Client, ctx context.Context) error {
			_, err := c.CreateTicket(ctx, "/x")
			return err
		}, nil, false, false, 1},
		{"private preview takes no key", func(c *Client, ctx context.Context) error {
			_, err := c.CreatePreview(ctx, "sb", api.CreatePreviewRequest{Port: 80})
			return err
		}, nil, false, false, 1},
		{"public preview takes one", func(c *Client, ctx context.Context) error {
			_, err := c.CreatePreview(ctx, "sb", api.CreatePreviewRequest{Port: 80, Visibility: api.VisibilityPublic})
			return err
		}, nil, false, true, 1},
		{"stdin is not retried", func(c *Client, ctx context.Context) error {
			return c.Stdin(ctx, "sb", "c", strings.NewReader("x"), false)
		}, []int{503}, false, false, 1},
		{"a read is retried", func(c *Client, ctx context.Context) error {
			_, err := c.GetSandbox(ctx, "sb")
			return err
		}, []int{503, 429}, false, false, 3},
		{"retries are bounded", func(c *Client, ctx context.Context) error {
			_, err := c.GetSandbox(ctx, "sb")
			return err
		}, []int{503, 503, 503, 503, 503}, false, false, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec recorder
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := rec.add(r)
				if n <= len(tt.script) {
					st := tt.script[n-1]
					if tt.conflict {
						w.Header().Set("Retry-After", "1")
					}
					writeAPIError(w, st, codeForStatus(st))
					return
				}
				w.Write([]byte(`{}`))
			}))
			defer srv.Close()
			c := New(srv.URL, "k")
			var waits []time.Duration
			c.sleep = func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }
			err := tt.call(c, t.Context())
			reqs := rec.requests()
			if len(reqs) != tt.wantReqs {
				t.Fatalf("%d requests (err %v), want %d", len(reqs), err, tt.wantReqs)
			}
			if wantErr := tt.wantReqs <= len(tt.script); (err != nil) != wantErr {
				t.Errorf("err = %v, want an error: %v", err, wantErr)
			}
			if err != nil {
				if _, ok := errorAs(err); !ok {
					t.Errorf("error %T is not *cove.Error", err)
				}
			}
			key := reqs[0].Header.Get(IdempotencyKey)
			if (key != "") != tt.wantKey {
				t.Errorf("Idempotency-Key %q, want one: %v", key, tt.wantKey)
			}
			for i, r := range reqs {
				if got := r.Header.Get(IdempotencyKey); got != key {
					t.Errorf("attempt %d key %q, want the first's %q", i+1, got, key)
				}
			}
			if tt.conflict && len(waits) > 0 && waits[0] < time.Second {
				t.Errorf("waited %v after Retry-After: 1", waits[0])
			}
		})
	}
}

func TestCallerKeyAndHeaders(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	t.Setenv("COVE_URL", srv.URL)
	t.Setenv("COVE_API_KEY", "from-env")
	c := NewClient(WithUserAgent("agent/1.0"))
	ctx := WithIdempotencyKey(t.Context(), "my-key")
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{}, false); err != nil {
		t.Fatal(err)
	}
	r := rec.requests()[0]
	for h, want := range map[string]string{"Authorization": "Bearer from-env", "User-Agent": "agent/1.0", IdempotencyKey: "my-key"} {
		if got := r.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
}

func TestTimeoutBoundsACall(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := NewClient(WithBaseURL(srv.URL), WithTimeout(50*time.Millisecond), WithRetry(RetryPolicy{Attempts: 1}))
	_, err := c.GetSandbox(t.Context(), "x")
	if !errors.Is(err, context.DeadlineExceeded) || api.ErrorCode(err) != api.CodeUnavailable {
		t.Fatalf("err = %v, want a deadline as code unavailable", err)
	}
}

// TestRetriesStayWithinTheirTime: a Retry-After longer than what is left
// of the retry policy's time is not waited out; the failure comes back at
// once.
func TestRetriesStayWithinTheirTime(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		w.Header().Set("Retry-After", "60")
		writeAPIError(w, http.StatusServiceUnavailable, api.CodeUnavailable)
	}))
	defer srv.Close()
	c := NewClient(WithBaseURL(srv.URL), WithRetry(RetryPolicy{Attempts: 5, Base: time.Millisecond, Max: time.Second, MaxElapsed: 5 * time.Second}))
	c.sleep = func(ctx context.Context, d time.Duration) error {
		t.Errorf("waited %v beyond the policy's 5s", d)
		return nil
	}
	_, err := c.GetSandbox(t.Context(), "x")
	ce, ok := errorAs(err)
	if !ok || ce.Status != http.StatusServiceUnavailable || ce.RetryAfter != time.Minute {
		t.Fatalf("err = %#v", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

// TestFileBodiesAreSentAgain: a write from a file (or any reader that
// can be read again from where it stands) is retried after a 503 with the
// same bytes from the same offset and a Repr-Digest of them; a reader that
// cannot be read again is sent once.
func TestFileBodiesAreSentAgain(t *testing.T) {
	data := strings.Repeat("0123456789abcdef", 70000) // ~1 MiB: several chunks
	type seen struct{ body, digest string }
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		mu.Lock()
		got = append(got, seen{string(b), r.Trailer.Get("Repr-Digest")})
		n := len(got)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			writeAPIError(w, http.StatusServiceUnavailable, api.CodeUnavailable)
			return
		}
		w.Write([]byte(`{"path":"/f","type":"file"}`))
	}))
	defer srv.Close()
	c := NewClient(WithBaseURL(srv.URL), WithRetry(RetryPolicy{Attempts: 3, Base: time.Millisecond, Max: time.Millisecond}))

	f, err := os.CreateTemp(t.TempDir(), "body")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("skipped:" + data); err != nil {
		t.Fatal(err)
	}
	f.Seek(int64(len("skipped:")), io.SeekStart) // sent from where it stands
	if _, err := c.WriteFile(t.Context(), "sb_1", "/f", f); err != nil {
		t.Fatalf("write from a file: %v", err)
	}
	sum := sha256.Sum256([]byte(data))
	want := api.FormatReprDigest(sum[:])
	if len(got) != 2 {
		t.Fatalf("%d tries, want 2", len(got))
	}
	for i, s := range got {
		if s.body != data || s.digest != want {
			t.Errorf("try %d: %d bytes with digest %q, want %d bytes with %q", i+1, len(s.body), s.digest, len(data), want)
		}
	}

	got = nil
	_, err = c.WriteFile(t.Context(), "sb_1", "/f", io.MultiReader(strings.NewReader(data)))
	var cerr *Error
	if !errors.As(err, &cerr) || cerr.Status != http.StatusServiceUnavailable || len(got) != 1 {
		t.Fatalf("a reader that cannot be read again: %v after %d tries, want the 503 after 1", err, len(got))
	}
}
