package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// Small backoffs and a short poll, so that retries take a moment; the
// receivers are on loopback, which only --webhook-allow-private admits.
var fastRetries = e2etest.WithArgs("--webhook-allow-private", "--webhook-backoff", "100ms",
	"--webhook-max-backoff", "200ms", "--webhook-poll", "100ms", "--warm-pool", "0")

func addWebhook(t *testing.T, c *cove.Client, url string, events ...string) api.CreateWebhookResponse {
	t.Helper()
	resp, err := c.CreateWebhook(t.Context(), api.CreateWebhookRequest{URL: url, Events: events})
	if err != nil {
		t.Fatalf("create webhook: %v", err)
	}
	return resp
}

func terminate(t *testing.T, c *cove.Client, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := c.TerminateSandbox(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if sb, err := c.WaitSandbox(ctx, ref, api.StateTerminated, time.Minute); err != nil || sb.State != api.StateTerminated {
		t.Fatalf("terminate %s: %s %v", ref, sb.State, err)
	}
}

// TestLifecycleEventsSignedInOrder: a receiver on loopback gets every
// lifecycle and command event of a sandbox, in the order of the team's
// event log, each signed with the webhook's secret (checked by the
// test's own HMAC code), and nothing of another team's sandbox; the
// deliveries list shows each attempt with its status and latency; another
// team sees none of the webhook.
func TestLifecycleEventsSignedInOrder(t *testing.T) {
	s := e2etest.StartServer(t, fastRetries)
	ctx := t.Context()
	rcv := newReceiver(t, nil)
	hook := addWebhook(t, s.Admin, rcv.URL+"/hooks/cove", "sandbox.*", "command.*")
	if !strings.HasPrefix(hook.Webhook.ID, "whk_") || !strings.HasPrefix(hook.Secret, "whsec_") {
		t.Fatalf("created %+v", hook)
	}
	other := s.NewTeam("other")
	otherSb := e2etest.Create(t, other, api.CreateSandboxRequest{Name: "not-for-admin"})

	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "hooked"})
	e2etest.MustOK(t, s.Admin, sb.ID, "echo hi")
	terminate(t, s.Admin, sb.ID)

	got := rcv.waitFor(t, "sandbox.terminated", func(got []received) bool {
		return slices.ContainsFunc(got, func(r received) bool {
			p := payload{}
			return strings.Contains(string(r.Body), `"sandbox.terminated"`) && jsonOK(r.Body, &p) && p.Data.SandboxID == sb.ID
		})
	})
	var types, ids, lags []string
	seen := map[string]bool{}
	for _, r := range got {
		if err := verify(hook.Secret, r); err != nil {
			t.Errorf("delivery %s: %v", r.ID, err)
		}
		if seen[r.ID] {
			t.Errorf("webhook-id %s came twice without a failure", r.ID)
		}
		seen[r.ID] = true
		p := decodePayload(t, r)
		if p.Data.SandboxID == otherSb.ID {
			t.Errorf("another team's event reached the webhook: %s", r.Body)
		}
		if p.Type != p.Data.Type || p.Timestamp.IsZero() {
			t.Errorf("payload %s", r.Body)
		}
		if p.Data.SandboxID == sb.ID {
			types = append(types, p.Type)
			ids = append(ids, p.Data.ID)
			lags = append(lags, fmt.Sprintf("%s %v", p.Type, r.At.Sub(p.Data.Time).Round(time.Millisecond)))
		}
	}
	// A measurement, not an assertion: from the event's time to its receipt.
	t.Logf("event → receiver: %s", strings.Join(lags, ", "))
	// The same events, in the same order, as the team's log has them.
	log, err := s.Admin.Events(ctx, cove.EventQuery{Sandbox: sb.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var wantTypes, wantIDs []string
	for _, e := range log.Items {
		if strings.HasPrefix(e.Type, "sandbox.") || strings.HasPrefix(e.Type, "command.") {
			wantTypes = append(wantTypes, e.Type)
			wantIDs = append(wantIDs, e.ID)
		}
	}
	if !slices.Equal(ids, wantIDs) {
		t.Errorf("delivered events\n  %v\nwant the log's\n  %v", types, wantTypes)
	}
	for _, want := range []string{"sandbox.creating", "sandbox.running", "command.started", "command.exited", "sandbox.terminating", "sandbox.terminated"} {
		if !slices.Contains(types, want) {
			t.Errorf("no %s among the delivered %v", want, types)
		}
	}

	// The receiver has each request before the server records its
	// answer: wait for every delivery to be recorded as delivered.
	for _, d := range waitDelivered(t, s.Admin, hook.Webhook.ID, len(got)) {
		if d.State != api.DeliveryDelivered || d.AttemptCount != 1 || len(d.Attempts) != 1 ||
			d.Attempts[0].StatusCode != http.StatusNoContent || d.Attempts[0].LatencyMS < 0 || !seen[d.ID] {
			t.Errorf("delivery %+v", d)
		}
	}

	// Another team: 404 for the webhook, its deliveries and its deletion;
	// its own list is empty.
	for _, call := range []func() error{
		func() error { _, err := other.GetWebhook(ctx, hook.Webhook.ID); return err },
		func() error { _, err := other.ListDeliveries(ctx, hook.Webhook.ID, 10, ""); return err },
		func() error { return other.DeleteWebhook(ctx, hook.Webhook.ID) },
	} {
		if err := call(); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("another team's call: %v; want not_found", err)
		}
	}
	if l, err := other.ListWebhooks(ctx, 0, ""); err != nil || len(l.Items) != 0 {
		t.Errorf("another team's list: %+v %v", l, err)
	}
	// The owner's list holds it, without the secret; deleting it works once.
	status, _, body := e2etest.RawRequest(t, "GET", s.URL+"/v1/webhooks/"+hook.Webhook.ID, s.AdminKey, "")
	if status != 200 || strings.Contains(string(body), hook.Secret) || strings.Contains(string(body), "whsec_") {
		t.Errorf("GET webhook: %d %s", status, body)
	}
	if err := s.Admin.DeleteWebhook(ctx, hook.Webhook.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Admin.DeleteWebhook(ctx, hook.Webhook.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("second delete: %v", err)
	}
}

// TestThirdTryDelivers: a receiver that answers 500 twice gets the
// delivery on the third try, with the same webhook-id each time; the
// deliveries list shows the three attempts.
func TestThirdTryDelivers(t *testing.T) {
	s := e2etest.StartServer(t, fastRetries)
	rcv := newReceiver(t, func(n int) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	hook := addWebhook(t, s.Admin, rcv.URL, "sandbox.running")
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})

	got := rcv.waitFor(t, "a third try", func(got []received) bool { return len(got) >= 3 })
	l := waitDelivered(t, s.Admin, hook.Webhook.ID, 1)
	got = rcv.requests()
	if len(got) != 3 {
		t.Fatalf("the receiver got %d requests, want 3: %s", len(got), summary(got))
	}
	for i, r := range got {
		if err := verify(hook.Secret, r); err != nil {
			t.Errorf("try %d: %v", i+1, err)
		}
		if r.ID != got[0].ID {
			t.Errorf("try %d has webhook-id %s, the first had %s", i+1, r.ID, got[0].ID)
		}
		if p := decodePayload(t, r); p.Type != "sandbox.running" || p.Data.SandboxID != sb.ID {
			t.Errorf("try %d: %s", i+1, r.Body)
		}
	}
	d := l[0]
	var codes []int
	var gaps []string
	for i, a := range d.Attempts {
		codes = append(codes, a.StatusCode)
		if i > 0 {
			gaps = append(gaps, a.Time.Sub(d.Attempts[i-1].Time).Round(time.Millisecond).String())
		}
	}
	t.Logf("attempts %v, gaps between them %v (--webhook-backoff 100ms)", codes, gaps)
	if d.ID != got[0].ID || d.AttemptCount != 3 || !slices.Equal(codes, []int{500, 500, 200}) || d.Attempts[0].Error == "" || d.NextAttemptAt != nil {
		t.Fatalf("delivery %+v", d)
	}
}

// waitDelivered waits until the webhook has n deliveries, none pending.
func waitDelivered(t *testing.T, c *cove.Client, webhookID string, n int) []api.Delivery {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		l, err := c.ListDeliveries(t.Context(), webhookID, 100, "")
		if err != nil {
			t.Fatal(err)
		}
		done := len(l.Items) == n
		for _, d := range l.Items {
			done = done && d.State == api.DeliveryDelivered
		}
		if done {
			return l.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries not delivered: %+v", l.Items)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPendingAcrossKill9: a delivery still pending when `cove serve` is
// killed with SIGKILL (its receiver answered 503 until then) is delivered
// by the next start, from the store's outbox.
func TestPendingAcrossKill9(t *testing.T) {
	s := e2etest.StartServer(t, fastRetries)
	rcv := newReceiver(t, func(int) int { return http.StatusServiceUnavailable })
	hook := addWebhook(t, s.Admin, rcv.URL, "sandbox.running")
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	// Pending in the store, with a failed attempt recorded. (An attempt
	// the kill cuts before it is recorded is sent again: at least once.)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l, err := s.Admin.ListDeliveries(t.Context(), hook.Webhook.ID, 10, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 1 && l.Items[0].State == api.DeliveryPending && l.Items[0].AttemptCount >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed attempt recorded: %+v", l.Items)
		}
	}

	s.Stop(syscall.SIGKILL)
	l, err := s.Admin.ListDeliveries(t.Context(), hook.Webhook.ID, 10, "")
	if err == nil {
		t.Fatalf("the server answered after SIGKILL: %+v", l)
	}
	rcv.setAnswer(func(int) int { return http.StatusOK })
	before := len(rcv.requests())
	s.Start()

	got := rcv.waitFor(t, "the delivery after the restart", func(got []received) bool {
		return len(got) > before && got[len(got)-1].Status == http.StatusOK
	})
	last := got[len(got)-1]
	if err := verify(hook.Secret, last); err != nil {
		t.Fatal(err)
	}
	if p := decodePayload(t, last); p.Type != "sandbox.running" || p.Data.SandboxID != sb.ID || last.ID != got[0].ID {
		t.Fatalf("delivered after the restart: %s %s (first try %s)", last.ID, last.Body, got[0].ID)
	}
	d := waitDelivered(t, s.Admin, hook.Webhook.ID, 1)[0]
	first, final := d.Attempts[0], d.Attempts[len(d.Attempts)-1]
	if first.StatusCode != http.StatusServiceUnavailable || final.StatusCode != http.StatusOK || d.AttemptCount < 2 {
		t.Fatalf("delivery across the restart: %+v", d)
	}
}

// TestWebhookURLsRefused: without --webhook-allow-private, URLs that lead
// to loopback, private, link-local or metadata addresses are refused with
// 400 invalid_argument saying why, as are URLs that are not http(s).
func TestWebhookURLsRefused(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	for _, u := range []string{
		"http://127.0.0.1:9/hook", "http://localhost:9/", "http://[::1]/", "http://10.1.2.3/",
		"http://192.168.0.1/", "http://169.254.169.254/latest/meta-data/", "http://[::ffff:127.0.0.1]/",
		"http://0.0.0.0:7070/", "file:///etc/passwd", "gopher://example.com/",
	} {
		status, er, body := e2etest.RawRequest(t, "POST", s.URL+"/v1/webhooks", s.AdminKey, `{"url":"`+u+`"}`)
		if status != http.StatusBadRequest || er.Error == nil || er.Error.Code != api.CodeInvalidArgument || !strings.HasPrefix(er.Error.Message, "url: ") {
			t.Errorf("POST %s: %d %s", u, status, body)
		}
	}
	status, er, body := e2etest.RawRequest(t, "POST", s.URL+"/v1/webhooks", s.AdminKey, `{"url":"https://93.184.215.14/","events":["Sandbox.Running"]}`)
	if status != http.StatusBadRequest || er.Error == nil || !strings.Contains(er.Error.Message, "Sandbox.Running") {
		t.Errorf("a bad event type: %d %s", status, body)
	}
	if l, err := s.Admin.ListWebhooks(t.Context(), 0, ""); err != nil || len(l.Items) != 0 {
		t.Errorf("webhooks after refusals: %+v %v", l, err)
	}
}

func jsonOK(b []byte, p *payload) bool { return json.Unmarshal(b, p) == nil }
