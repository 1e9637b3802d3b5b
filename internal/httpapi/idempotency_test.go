package httpapi

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/teams"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
	"github.com/cove-dev/cove/internal/webhooks"
)

// replicas is two API handlers ("a" and "b") over one store, as two
// control-plane replicas are: their idempotency claims are the store's,
// and each knows the other alive until the test says it died. Their
// sandbox creates share one table of rows (rows, as the store's), each
// create keyed by id.For as the core's is.
type replicas struct {
	// records reads the store's idempotency table as stored: each row's
	// columns as the database gives them.
	records func(t *testing.T) [][]any
	key     string
	url     map[string]string
	fakes   map[string]*fakeControlPlane

	mu      sync.Mutex
	dead    map[string]bool
	rows    map[string]api.Sandbox
	creates int // sandboxes created, not found
}

// backends are the stores the replicas' tests run over.
var backends = []string{"sqlite", "postgres"}

// eachBackend runs fn over each store.
func eachBackend(t *testing.T, fn func(t *testing.T, rs *replicas)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) { fn(t, newReplicas(t, b)) })
	}
}

// openBackend opens a new, empty store of the backend and returns it with
// the reader of its idempotency table.
func openBackend(t *testing.T, backend string) (store.Store, func(t *testing.T) [][]any) {
	t.Helper()
	query := "SELECT * FROM idempotency"
	if backend == "postgres" {
		db, err := postgres.Open(t.Context(), pgserver.Start(t).NewDatabase(t), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db, func(t *testing.T) [][]any {
			rows, err := db.Pool().Query(t.Context(), query)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out [][]any
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, vals)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	path := filepath.Join(t.TempDir(), "cove.db")
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, func(t *testing.T) [][]any {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.QueryContext(t.Context(), query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var out [][]any
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out = append(out, vals)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

func newReplicas(t *testing.T, backend string) *replicas {
	t.Helper()
	st, records := openBackend(t, backend)
	rs := &replicas{records: records, url: map[string]string{}, fakes: map[string]*fakeControlPlane{},
		dead: map[string]bool{}, rows: map[string]api.Sandbox{}}
	var err error
	raw, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := secrets.ParseKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	keys := keyring{secrets.NewKeyring(k)}
	log := slog.New(slog.DiscardHandler)
	for _, name := range []string{"a", "b"} {
		ts := teams.New(teams.Config{
			Replica: "rep_" + name,
			ReplicaAlive: func(_ context.Context, owner string) (bool, error) {
				rs.mu.Lock()
				defer rs.mu.Unlock()
				return !rs.dead[owner], nil
			},
		}, st, log, time.Now)
		if name == "a" {
			if rs.key, err = ts.Bootstrap(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		f := newFake()
		h := newHandler(f, log)
		h.Teams, h.Idempotency = ts, ts
		h.Webhooks = webhooks.NewService(webhooks.ServiceConfig{AllowPrivate: true}, st, keys, log, time.Now)
		f.CreateSandboxFn = func(ctx context.Context, teamID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
			sid := id.For(ctx, "sbx")
			rs.mu.Lock()
			defer rs.mu.Unlock()
			if sb, ok := rs.rows[sid]; ok {
				return sb, nil
			}
			rs.creates++
			sb := api.Sandbox{ID: sid, TeamID: teamID, Name: req.Name, State: api.StateCreating}
			rs.rows[sid] = sb
			return sb, nil
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		rs.url[name], rs.fakes[name] = srv.URL, f
	}
	return rs
}

type keyring struct{ kr *secrets.Keyring }

func (k keyring) Keyring() (*secrets.Keyring, error) { return k.kr, nil }

// send sends a request with the team's key to replica name.
func (rs *replicas) send(t *testing.T, name, method, path, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, rs.url[name]+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+rs.key)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, name, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp, b.Bytes()
}

// holdCreates makes replica name's sandbox creates wait for release after
// doing their work (the row made), and reports each start on started.
func (rs *replicas) holdCreates(name string) (started chan struct{}, release chan api.Code) {
	started, release = make(chan struct{}, 10), make(chan api.Code)
	f := rs.fakes[name]
	create := f.CreateSandboxFn
	f.CreateSandboxFn = func(ctx context.Context, teamID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
		sb, err := create(ctx, teamID, req)
		started <- struct{}{}
		if code := <-release; code != "" {
			return api.Sandbox{}, api.Errorf(code, "held create told to fail")
		}
		return sb, err
	}
	return started, release
}

func sandboxID(t *testing.T, body []byte) string {
	t.Helper()
	var sb api.Sandbox
	if err := json.Unmarshal(body, &sb); err != nil || sb.ID == "" {
		t.Fatalf("answer %s is no sandbox (%v)", body, err)
	}
	return sb.ID
}

// TestIdempotencyAcrossReplicas: a retry on either replica while the first
// attempt runs is 409 with Retry-After; once answered, both replay it;
// another request under the key is refused; the create ran once.
func TestIdempotencyAcrossReplicas(t *testing.T) {
	eachBackend(t, func(t *testing.T, rs *replicas) {
		started, release := rs.holdCreates("a")
		type answer struct {
			resp *http.Response
			body []byte
		}
		first := make(chan answer, 1)
		go func() {
			resp, body := rs.send(t, "a", "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
			first <- answer{resp, body}
		}()
		<-started
		for _, name := range []string{"b", "a"} {
			resp, body := rs.send(t, name, "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
			wantError(t, resp, body, http.StatusConflict, api.CodeConflict)
			if got := resp.Header.Get("Retry-After"); got != "1" {
				t.Errorf("in flight on %s: Retry-After %q; want 1", name, got)
			}
		}
		resp, body := rs.send(t, "b", "POST", "/v1/sandboxes", "k1", `{"name":"two"}`)
		wantError(t, resp, body, http.StatusUnprocessableEntity, api.CodeUnprocessable)
		release <- ""
		a := <-first
		if a.resp.StatusCode != http.StatusCreated {
			t.Fatalf("first attempt: %d %s", a.resp.StatusCode, a.body)
		}
		for _, name := range []string{"b", "a"} {
			resp, body := rs.send(t, name, "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
			if resp.StatusCode != http.StatusCreated || !bytes.Equal(body, a.body) || resp.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("replay on %s: %d %s (replayed %q); want 201 %s replayed", name, resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"), a.body)
			}
		}
		if rs.creates != 1 {
			t.Errorf("%d sandboxes created; want 1", rs.creates)
		}
	})
}

// TestIdempotencyDeadOwner: replica a dies while its create runs (the
// sandbox's row made, no answer given). A retry on b takes the claim over
// and answers the sandbox a made, without making another; a's late
// answer does not replace b's.
func TestIdempotencyDeadOwner(t *testing.T) {
	eachBackend(t, func(t *testing.T, rs *replicas) {
		started, release := rs.holdCreates("a")
		first := make(chan int, 1)
		go func() {
			resp, _ := rs.send(t, "a", "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
			first <- resp.StatusCode
		}()
		<-started
		resp, body := rs.send(t, "b", "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
		wantError(t, resp, body, http.StatusConflict, api.CodeConflict)

		rs.mu.Lock()
		rs.dead["rep_a"] = true
		var made string
		for id := range rs.rows {
			made = id
		}
		rs.mu.Unlock()
		resp, body = rs.send(t, "b", "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("take-over: %d %s; want 201 made now", resp.StatusCode, body)
		}
		if got := sandboxID(t, body); got != made {
			t.Errorf("take-over answered %s; want %s, the sandbox the dead replica made", got, made)
		}
		if rs.creates != 1 {
			t.Errorf("%d sandboxes created; want 1", rs.creates)
		}
		// The dead replica's late answer is refused by the store (the claim
		// is b's): the key keeps b's answer.
		release <- ""
		<-first
		resp, replay := rs.send(t, "a", "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
		if resp.StatusCode != http.StatusCreated || !bytes.Equal(replay, body) {
			t.Errorf("replay after take-over: %d %s; want %s", resp.StatusCode, replay, body)
		}
	})
}

// TestIdempotencyFailureNotKept: a failed answer releases the key, so the
// request runs again with it, on any replica.
func TestIdempotencyFailureNotKept(t *testing.T) {
	eachBackend(t, func(t *testing.T, rs *replicas) {
		started, release := rs.holdCreates("a")
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, body := rs.send(t, "a", "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("failed attempt: %d %s; want 503", resp.StatusCode, body)
			}
		}()
		<-started
		release <- api.CodeUnavailable
		<-done
		resp, body := rs.send(t, "b", "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry after a failure: %d %s; want 201 made now", resp.StatusCode, body)
		}
	})
}

// TestIdempotencyKeepsNoSecret: a webhook created with a key, replayed on
// the other replica with its secret, leaves no secret in the store's
// idempotency records, read as they are stored.
func TestIdempotencyKeepsNoSecret(t *testing.T) {
	eachBackend(t, func(t *testing.T, rs *replicas) {
		resp, body := rs.send(t, "a", "POST", "/v1/webhooks", "k1", `{"url":"http://127.0.0.1:1/hook","events":["sandbox.running"]}`)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("create webhook: %d %s", resp.StatusCode, body)
		}
		var created api.CreateWebhookResponse
		if err := json.Unmarshal(body, &created); err != nil || created.Secret == "" {
			t.Fatalf("create webhook answered %s (%v); want a secret", body, err)
		}
		resp, replay := rs.send(t, "b", "POST", "/v1/webhooks", "k1", `{"url":"http://127.0.0.1:1/hook","events":["sandbox.running"]}`)
		if resp.StatusCode != http.StatusCreated || !bytes.Equal(bytes.TrimSpace(replay), bytes.TrimSpace(body)) {
			t.Fatalf("replay on b: %d %s; want %s", resp.StatusCode, replay, body)
		}
		records := rs.records(t)
		for _, rec := range records {
			for i, v := range rec {
				if bytes.Contains(fmt.Append(nil, v), []byte(created.Secret)) {
					t.Errorf("idempotency column %d holds the webhook's secret", i)
				}
				if b, ok := v.([]byte); ok && bytes.Contains(b, []byte(created.Secret)) {
					t.Errorf("idempotency column %d holds the webhook's secret", i)
				}
			}
		}
		n := len(records)
		if n != 1 {
			t.Errorf("%d idempotency records; want 1", n)
		}
	})
}

// TestIdempotencyKeyRefused: calls whose answer holds a credential kept
// only as a hash refuse a key with 422; a public preview takes one.
func TestIdempotencyKeyRefused(t *testing.T) {
	rs := newReplicas(t, "sqlite")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/teams", `{"name":"x"}`},
		{"POST", "/v1/teams/team_x/keys", ``},
		{"POST", "/v1/tickets", `{}`},
		{"POST", "/v1/sandboxes/sbx_1/previews", `{"port":8080}`},
		{"POST", "/v1/sandboxes/sbx_1/previews", `{"port":8080,"visibility":"private"}`},
	} {
		resp, body := rs.send(t, "a", c.method, c.path, "k1", c.body)
		wantError(t, resp, body, http.StatusUnprocessableEntity, api.CodeUnprocessable)
	}
	resp, body := rs.send(t, "a", "POST", "/v1/sandboxes/sbx_1/previews", "k2", `{"port":8080,"visibility":"public"}`)
	if resp.StatusCode == http.StatusUnprocessableEntity {
		t.Errorf("public preview with a key: %d %s", resp.StatusCode, body)
	}
}

// TestIdempotentFileWrite: a file write under a key runs once, streams its
// body to the call, and its replay carries the entry's ETag as the first
// answer did.
func TestIdempotentFileWrite(t *testing.T) {
	s := newTestServer(t)
	writes := 0
	s.fake.WriteFileFn = func(_ context.Context, _ files.Target, req files.WriteRequest, body io.Reader) (api.FileEntry, bool, error) {
		writes++
		b, _ := io.ReadAll(body)
		return api.FileEntry{Path: req.Path, Type: "file", Size: int64(len(b)), Version: "v1"}, true, nil
	}
	h := map[string]string{"Idempotency-Key": "w1"}
	for i, want := range []string{"", "true"} {
		resp, body := s.do(t, "PUT", "/v1/sandboxes/sbx_1/files/content?path=/workspace/a", h, strings.NewReader("hello"))
		if resp.StatusCode/100 != 2 || resp.Header.Get("ETag") != `"v1"` || resp.Header.Get("Idempotent-Replayed") != want {
			t.Errorf("write %d: %d ETag %q replayed %q %s", i, resp.StatusCode, resp.Header.Get("ETag"), resp.Header.Get("Idempotent-Replayed"), body)
		}
	}
	if writes != 1 {
		t.Errorf("the write ran %d times; want 1", writes)
	}
}

// TestIdempotencyClientGone: a request whose client went away before any
// answer keeps nothing under its key: the retry runs.
func TestIdempotencyClientGone(t *testing.T) {
	rs := newReplicas(t, "sqlite")
	f := rs.fakes["a"]
	create := f.CreateSandboxFn
	started, gone := make(chan struct{}), make(chan struct{})
	calls := 0
	f.CreateSandboxFn = func(ctx context.Context, teamID string, req api.CreateSandboxRequest) (api.Sandbox, error) {
		calls++
		if calls > 1 {
			return create(ctx, teamID, req)
		}
		close(started)
		<-ctx.Done()
		defer close(gone)
		return api.Sandbox{}, ctx.Err()
	}
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", rs.url["a"]+"/v1/sandboxes", strings.NewReader(`{"name":"one"}`))
	req.Header.Set("Authorization", "Bearer "+rs.key)
	req.Header.Set("Idempotency-Key", "k1")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	cancel()
	<-done
	<-gone
	// The first attempt's claim is released once its handler returns.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, body := rs.send(t, "a", "POST", "/v1/sandboxes", "k1", `{"name":"one"}`)
		if resp.StatusCode == http.StatusConflict && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry after the client went away: %d %s; want 201 made now", resp.StatusCode, body)
		}
		break
	}
}
