package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// post sends a POST with an Idempotency-Key and returns the status, the
// replay header and the body.
func post(t *testing.T, s *e2etest.Server, path, key, body string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.AdminKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), []byte(b.String())
}

func TestIdempotencyKey(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	key := "create-" + e2etest.RunID()
	st1, rep1, b1 := post(t, s, "/v1/sandboxes?wait=running", key, `{"name":"once"}`)
	st2, rep2, b2 := post(t, s, "/v1/sandboxes?wait=running", key, `{"name":"once"}`)
	var sb1, sb2 api.Sandbox
	json.Unmarshal(b1, &sb1)
	json.Unmarshal(b2, &sb2)
	if st1 != 201 || st2 != 201 || sb1.ID == "" || sb1.ID != sb2.ID || rep1 != "" || rep2 != "true" {
		t.Fatalf("create twice with one key: %d %q %s / %d %q %s", st1, rep1, sb1.ID, st2, rep2, sb2.ID)
	}
	page, _ := s.Admin.ListSandboxes(ctx, cove.SandboxQuery{})
	if len(page.Items) != 1 {
		t.Errorf("%d sandboxes exist, want 1", len(page.Items))
	}
	if st, _, body := post(t, s, "/v1/sandboxes", key, `{"name":"other"}`); st != 422 {
		t.Errorf("the key reused for another request: %d %s", st, body)
	}

	ckey := "cmd-" + e2etest.RunID()
	path := "/v1/sandboxes/" + sb1.ID + "/commands?wait=true"
	_, _, c1 := post(t, s, path, ckey, `{"command":"echo ran >> /tmp/count; wc -l < /tmp/count"}`)
	_, rep, c2 := post(t, s, path, ckey, `{"command":"echo ran >> /tmp/count; wc -l < /tmp/count"}`)
	var r1, r2 api.CommandResult
	json.Unmarshal(c1, &r1)
	json.Unmarshal(c2, &r2)
	if r1.Command.ID == "" || r1.Command.ID != r2.Command.ID || rep != "true" || strings.TrimSpace(r2.Stdout) != "1" {
		t.Errorf("command twice with one key: %+v / %+v (%q)", r1.Command.ID, r2, rep)
	}
	if got := e2etest.MustOK(t, s.Admin, sb1.ID, "wc -l < /tmp/count"); strings.TrimSpace(got) != "1" {
		t.Errorf("the command ran %s times", got)
	}
	// A failed request is not kept: the key may be used again.
	fkey := "fail-" + e2etest.RunID()
	if st, _, _ := post(t, s, "/v1/sandboxes", fkey, `{"name":"Bad Name"}`); st != 400 {
		t.Errorf("bad request: %d", st)
	}
	if st, rep, _ := post(t, s, "/v1/sandboxes", fkey, `{"name":"good-name"}`); st != 201 || rep != "" {
		t.Errorf("retry after a failure: %d %q", st, rep)
	}
	if st, _, body := post(t, s, "/v1/teams", "team-"+e2etest.RunID(), `{"name":"keyed"}`); st != 422 {
		t.Errorf("teams with a key: %d %s", st, body)
	}
}
