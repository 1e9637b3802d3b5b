package webhooks

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestSecretSealedAtRest: a host reader of the database (the cove.db
// file and its WAL, read as bytes and through SQLite) finds a tenant's
// webhook signing secret nowhere in clear: neither in the webhooks table
// nor in the answer kept for an idempotent replay. Deliveries still
// verify with the secret shown at create, and a replay of the create's
// Idempotency-Key still answers it. A database from before secrets were
// sealed (the secret put back in clear while the server is down) is
// sealed when the server starts, and the secret still signs and replays.
func TestSecretSealedAtRest(t *testing.T) {
	s := e2etest.StartServer(t, fastRetries)
	tr, err := s.Admin.CreateTeam(t.Context(), "sealed-hooks")
	if err != nil {
		t.Fatal(err)
	}
	team := cove.New(s.URL, tr.APIKey)
	rcv := newReceiver(t, nil)
	create := func() (string, api.CreateWebhookResponse) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "POST", s.URL+"/v1/webhooks",
			strings.NewReader(`{"url":"`+rcv.URL+`","events":["sandbox.*"]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tr.APIKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "sealed-hook")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var out api.CreateWebhookResponse
		if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &out) != nil || !strings.HasPrefix(out.Secret, "whsec_") {
			t.Fatalf("create: %d %s", resp.StatusCode, body)
		}
		return resp.Header.Get("Idempotent-Replayed"), out
	}
	_, hook := create()
	secretB64 := strings.TrimPrefix(hook.Secret, "whsec_")
	key, err := base64.StdEncoding.DecodeString(secretB64)
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(s.DataDir, "cove.db")

	// noClear reads the database as a host user with read access would.
	noClear := func(when string) {
		t.Helper()
		files, _ := filepath.Glob(dbPath + "*")
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(secretB64)) || bytes.Contains(b, key) {
				t.Errorf("%s: %s holds the webhook's secret in clear", when, filepath.Base(f))
			}
		}
		db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var stored string
		if err := db.QueryRowContext(t.Context(), "SELECT secret FROM webhooks WHERE id = ?", hook.Webhook.ID).Scan(&stored); err != nil {
			t.Fatalf("%s: the webhook's row: %v", when, err)
		}
		if !strings.HasPrefix(stored, "sealed1:") || strings.Contains(stored, secretB64) || strings.Contains(stored, "whsec_") {
			t.Errorf("%s: webhooks.secret holds %q, not a sealed value", when, stored)
		}
		var kept []byte
		if err := db.QueryRowContext(t.Context(), "SELECT body FROM idempotency WHERE team_id = ? AND key = ?", tr.Team.ID, "sealed-hook").Scan(&kept); err != nil {
			t.Fatalf("%s: the kept answer: %v", when, err)
		}
		if bytes.Contains(kept, []byte(secretB64)) || bytes.Contains(kept, []byte("whsec_")) {
			t.Errorf("%s: the answer kept for replays holds the secret: %s", when, kept)
		}
	}
	// delivered waits for a delivery of an event of the sandbox and checks
	// it as the tenant's receiver does, with the secret shown at create.
	delivered := func(when, typ, sandboxID string) {
		t.Helper()
		got := rcv.waitFor(t, typ, func(got []received) bool {
			for _, r := range got {
				var p payload
				if jsonOK(r.Body, &p) && p.Type == typ && p.Data.SandboxID == sandboxID {
					return true
				}
			}
			return false
		})
		for _, r := range got {
			if err := verify(hook.Secret, r); err != nil {
				t.Errorf("%s: delivery %s: %v", when, r.ID, err)
			}
		}
	}
	replay := func(when string) {
		t.Helper()
		replayed, again := create()
		if replayed != "true" || again.Webhook.ID != hook.Webhook.ID || again.Secret != hook.Secret {
			t.Errorf("%s: replay answered replayed=%q %s %q; want the webhook %s and the secret shown at create",
				when, replayed, again.Webhook.ID, again.Secret, hook.Webhook.ID)
		}
	}

	sb := e2etest.Create(t, team, api.CreateSandboxRequest{})
	delivered("after create", "sandbox.running", sb.ID)
	replay("after create")
	waitKept(t, dbPath, tr.Team.ID, "sealed-hook")
	noClear("after create")

	// A database from before: the secret back in clear while the server
	// is down. The next start seals it before it serves.
	s.Stop(syscall.SIGTERM)
	rw, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	res, err := rw.ExecContext(t.Context(), "UPDATE webhooks SET secret = ? WHERE id = ?", hook.Secret, hook.Webhook.ID)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("put the secret back in clear: %v", err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	s.Start()
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stored string
	if err := db.QueryRowContext(t.Context(), "SELECT secret FROM webhooks WHERE id = ?", hook.Webhook.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stored, "sealed1:") || strings.Contains(stored, secretB64) {
		t.Errorf("after a start over a clear secret: webhooks.secret holds %q", stored)
	}
	replay("after the start")
	terminate(t, team, sb.ID)
	delivered("after the start", "sandbox.terminated", sb.ID)
}

// waitKept waits until the server has stored the answer it gave under a
// team's Idempotency-Key (it stores it while sending it), reading the
// database at dbPath as a host reader would.
func waitKept(t *testing.T, dbPath, teamID, key string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var status int
		err := db.QueryRowContext(t.Context(), "SELECT status FROM idempotency WHERE team_id = ? AND key = ?", teamID, key).Scan(&status)
		if err == nil && status != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the answer under Idempotency-Key %q is not kept: status %d, %v", key, status, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
