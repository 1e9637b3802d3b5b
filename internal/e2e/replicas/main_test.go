// Package replicas tests, on real processes, a control plane of several
// `cove control` replicas on one PostgreSQL database: a client that
// fails over between them when one is killed, a database restart under
// load, concurrent updates of one sandbox through two replicas, event
// streams that see what another replica wrote, a node whose join answer
// was lost joining through another replica, and `cove serve` on
// PostgreSQL. The database is a throwaway cluster the tests start
// (pgserver), the save store a real S3 server (versitygw). The tests need
// root; they skip otherwise.
package replicas

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m, pgserver.Shutdown) }

// cpuPrice is what one CPU costs a second in the fleets of these tests:
// high, so that a small spend limit is reached within seconds.
const cpuPrice = 0.001

// startFleet starts two control replicas on a fresh database and two
// nodes, metering every half second at cpuPrice, webhooks allowed to
// loopback and retried soon.
func startFleet(t *testing.T) (*e2etest.Fleet, *pgserver.Server) {
	t.Helper()
	e2etest.RequireRoot(t)
	pg := pgserver.Start(t)
	prices := filepath.Join(t.TempDir(), "prices.json")
	b := fmt.Appendf(nil, `{"vcpu_second_usd": %v, "memory_gib_second_usd": 0, "storage_gib_hour_usd": 0, "egress_gb_usd": 0}`, cpuPrice)
	if err := os.WriteFile(prices, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// No test here loses a node: a late heartbeat on a loaded machine
	// must not look like one (a node declared lost takes no wake).
	f := e2etest.StartFleet(t, e2etest.FleetStore(pg.NewDatabase(t)), e2etest.FleetReplicas(2), e2etest.FleetLostAfter(20*time.Second),
		e2etest.FleetControlArgs("--warm-pool", "0", "--prices", prices, "--metrics-interval", "500ms",
			"--webhook-allow-private", "--webhook-backoff", "200ms", "--webhook-poll", "200ms"))
	return f, pg
}

// answer is a replica's final answer to one request.
type answer struct {
	Method, Path, Body, Key string
	Status                  int
	Resp                    []byte
	// Replayed is the answer's Idempotent-Replayed header.
	Replayed bool
	// RetryAfter is the answer's Retry-After header.
	RetryAfter string
	// By is the URL of the replica that answered.
	By string
	// Retries counts the attempts before the answer: transport errors,
	// and answers that said to retry.
	Retries int
}

func (a answer) ok() bool { return a.Status >= 200 && a.Status < 300 }

func (a answer) String() string {
	return fmt.Sprintf("%s %s (key %s): %d after %d retries from %s: %s", a.Method, a.Path, a.Key, a.Status, a.Retries, a.By, bytes.TrimSpace(a.Resp))
}

// client sends one key's requests to the fleet's replicas in turn, each
// request with an Idempotency-Key, and tries a request again on the
// next replica after a transport error or an answer that says to retry
// (409 conflict, 5xx), as a client behind a load balancer would.
type client struct {
	t      *testing.T
	f      *e2etest.Fleet
	apiKey string
	http   *http.Client

	mu      sync.Mutex
	next    int
	answers []answer
}

func newClient(t *testing.T, f *e2etest.Fleet, apiKey string) *client {
	return &client{t: t, f: f, apiKey: apiKey, http: &http.Client{Timeout: 2 * time.Minute}}
}

// pick is the URL of the next replica in turn.
func (c *client) pick() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	url := c.f.Controls[c.next%len(c.f.Controls)].URL
	c.next++
	return url
}

// send makes one attempt at url and returns the answer or a transport
// error.
func (c *client) send(url, method, path, key, body string) (answer, error) {
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{Method: method, Path: path, Body: body, Key: key, Status: resp.StatusCode, Resp: b,
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true", RetryAfter: resp.Header.Get("Retry-After"), By: url}, nil
}

// retryable says whether an answer asks the client to try again: a
// request whose first attempt is in flight, a lost race, or a replica that
// cannot reach its store for a moment.
func retryable(a answer) bool { return a.Status == http.StatusConflict || a.Status >= 500 }

// do sends a request to the next replica in turn, retrying on the next
// ones, and records its final answer when it has a key. first, when not
// "", is where the first attempt goes.
func (c *client) do(first, method, path, key, body string) answer {
	c.t.Helper()
	a, err := c.attempt(first, method, path, key, body)
	if err != nil {
		c.t.Fatal(err)
	}
	return a
}

// attempt is do without failing the test: a request that has no final
// answer within minutes is an error. Goroutines of a test call it.
func (c *client) attempt(first, method, path, key, body string) (answer, error) {
	deadline := time.Now().Add(3 * time.Minute)
	retries := 0
	for {
		url := first
		if url == "" {
			url = c.pick()
		}
		first = ""
		a, err := c.send(url, method, path, key, body)
		a.Retries = retries
		if err == nil && !retryable(a) {
			if key != "" {
				c.mu.Lock()
				c.answers = append(c.answers, a)
				c.mu.Unlock()
			}
			return a, nil
		}
		if time.Now().After(deadline) {
			return a, fmt.Errorf("%s %s (key %s): no final answer: %v %s", method, path, key, err, a)
		}
		if err != nil {
			c.t.Logf("%s %s (key %s) at %s: %v; retrying on the next replica", method, path, key, url, err)
		} else {
			c.t.Logf("%s %s (key %s) at %s: %d %s; retrying", method, path, key, url, a.Status, bytes.TrimSpace(a.Resp))
		}
		retries++
		wait := 100 * time.Millisecond
		if s, _ := strconv.Atoi(a.RetryAfter); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		time.Sleep(wait)
	}
}

// must is do that fails the test unless the answer is a 2xx.
func (c *client) must(first, method, path, key, body string) answer {
	c.t.Helper()
	a := c.do(first, method, path, key, body)
	if !a.ok() {
		c.t.Fatalf("%s", a)
	}
	return a
}

// sdk is an SDK client of the replica the client would use next.
func (c *client) sdk() *cove.Client { return cove.New(c.pick(), c.apiKey) }

// get reads a sandbox through any replica that answers.
func (c *client) get(id string) api.Sandbox {
	c.t.Helper()
	var sb api.Sandbox
	c.retry("get "+id, func(cl *cove.Client) error {
		var err error
		sb, err = cl.GetSandbox(context.Background(), id)
		return err
	})
	return sb
}

// retry runs fn with the SDK client of each replica in turn until it
// succeeds or returns an API error that is not a retry, and fails the
// test after a deadline.
func (c *client) retry(what string, fn func(*cove.Client) error) {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := fn(c.sdk())
		if err == nil {
			return
		}
		var e *api.Error
		if errors.As(err, &e) && e.Code != api.CodeUnavailable && e.Code != api.CodeInternal && e.Code != api.CodeConflict {
			c.t.Fatalf("%s: %v", what, err)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitState waits, through any replica, until the sandbox is in state.
func (c *client) waitState(id string, state api.SandboxState) api.Sandbox {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var sb api.Sandbox
	for time.Now().Before(deadline) {
		sb = c.get(id)
		if sb.State == state {
			return sb
		}
		if sb.State.Terminal() && sb.State != state {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("sandbox %s is %s (%s); want %s", id, sb.State, sb.StateReason, state)
	return sb
}

// events lists a sandbox's events, oldest first, through any replica.
func (c *client) events(id string, types ...string) []api.Event {
	c.t.Helper()
	var all []api.Event
	c.retry("events of "+id, func(cl *cove.Client) error {
		all = nil
		after := ""
		for {
			page, err := cl.Events(context.Background(), cove.EventQuery{Sandbox: id, Types: types, After: after, Limit: 500})
			if err != nil {
				return err
			}
			all = append(all, page.Items...)
			if len(page.Items) == 0 || page.NextCursor == "" {
				return nil
			}
			after = page.Items[len(page.Items)-1].ID
		}
	})
	return all
}

// decode unmarshals an answer's body or fails the test.
func decode[T any](t *testing.T, a answer) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(a.Resp, &v); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	return v
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %s", what, within, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
