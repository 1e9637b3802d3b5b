package server_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/server"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/webhooks"
)

// TestWebhookSecretSealed: a webhook's signing secret is sealed before
// the store sees it, bound to its webhook (a sealed value copied to
// another row does not open), and opened for the dispatcher and for an
// idempotent replay; a secret stored in clear by a server from before is
// sealed at start, once; a rotation seals again under the new key, and a
// secret under a key the server was not given stops the start.
func TestWebhookSecretSealed(t *testing.T) {
	k1 := newKey(t)
	h := newHarnessWith(t, func(c *server.Config) { c.Secrets = secrets.NewKeyring(k1) })
	ctx := t.Context()
	clearIn := func(what, stored, secret string) {
		t.Helper()
		if !secrets.IsText(stored) || strings.Contains(stored, secret) || strings.Contains(stored, strings.TrimPrefix(secret, webhooks.SecretPrefix)) {
			t.Errorf("%s: the webhooks.secret column holds %q: not sealed, or the secret %q in clear", what, stored, secret)
		}
	}

	resp, err := h.srv.Webhooks().Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/hook"})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := h.st.GetWebhook(ctx, h.a, resp.Webhook.ID)
	if err != nil {
		t.Fatal(err)
	}
	clearIn("after create", stored.Secret, resp.Secret)
	if v, err := h.srv.Webhooks().OpenSecret(h.a, resp.Webhook.ID, stored.Secret); err != nil || v != resp.Secret {
		t.Errorf("opened for the dispatcher: %q %v; want the secret shown at create", v, err)
	}
	if again, err := h.srv.Webhooks().Created(ctx, h.a, resp.Webhook.ID); err != nil || again.Secret != resp.Secret {
		t.Errorf("answered again for a replay: %+v %v", again, err)
	}

	// Moved to another webhook's row (of the same team, or another's), the
	// sealed value does not open.
	other, err := h.srv.Webhooks().Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.Webhooks().OpenSecret(h.a, other.Webhook.ID, stored.Secret); err == nil {
		t.Error("a sealed secret opened as another webhook's")
	}
	if _, err := h.srv.Webhooks().OpenSecret(h.b, resp.Webhook.ID, stored.Secret); err == nil {
		t.Error("a sealed secret opened as another team's")
	}
	if _, err := h.srv.Webhooks().OpenSecret(h.a, resp.Webhook.ID, resp.Secret); err == nil {
		t.Error("a clear secret was used as it is")
	}

	// A row from before secrets were sealed: sealed at start, once.
	old := store.Webhook{Webhook: api.Webhook{ID: "whk_old", TeamID: h.b, URL: "https://93.184.215.14/old", Events: []string{"*"}, CreatedAt: time.Now().UTC()},
		Secret: webhooks.NewSecret()}
	if err := h.st.CreateWebhook(ctx, old); err != nil {
		t.Fatal(err)
	}
	if n, err := h.srv.Webhooks().SealSecrets(ctx); err != nil || n != 1 {
		t.Fatalf("sealed at start: %d %v; want the old row's", n, err)
	}
	got, err := h.st.GetWebhook(ctx, h.b, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	clearIn("after sealing an old row", got.Secret, old.Secret)
	if v, err := h.srv.Webhooks().OpenSecret(h.b, old.ID, got.Secret); err != nil || v != old.Secret {
		t.Errorf("the old row's secret opens as %q %v; want %q", v, err, old.Secret)
	}
	if n, err := h.srv.Webhooks().SealSecrets(ctx); err != nil || n != 0 {
		t.Errorf("sealed again at the next start: %d %v", n, err)
	}

	// A rotation: a server given a new key and the old one seals again
	// under the new key; one given only the new key refuses to start.
	k2 := newKey(t)
	serverWith := func(kr *secrets.Keyring) *server.Server {
		t.Helper()
		cfg := server.DefaultConfig()
		cfg.Templates, cfg.WarmPool, cfg.Secrets = []string{"managed"}, 0, kr
		srv, err := server.New(cfg, h.st, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		return srv
	}
	if _, err := serverWith(secrets.NewKeyring(k2)).Webhooks().SealSecrets(ctx); err == nil || !strings.Contains(err.Error(), k1.ID) {
		t.Errorf("started without the key the secrets are under: %v", err)
	}
	rotated := serverWith(secrets.NewKeyring(k2, k1))
	if n, err := rotated.Webhooks().SealSecrets(ctx); err != nil || n != 3 {
		t.Fatalf("sealed again under the new key: %d %v; want 3", n, err)
	}
	got, err = h.st.GetWebhook(ctx, h.b, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sealed, err := secrets.ParseText(got.Secret); err != nil || sealed.KeyID != k2.ID {
		t.Errorf("after the rotation: %+v %v; want sealed under %s", sealed, err, k2.ID)
	}
	if v, err := serverWith(secrets.NewKeyring(k2)).Webhooks().OpenSecret(h.b, old.ID, got.Secret); err != nil || v != old.Secret {
		t.Errorf("after the rotation, opens as %q %v", v, err)
	}
}

func TestWebhooks(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	resp, err := h.srv.Webhooks().Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/hook", Events: []string{"sandbox.*", "command.exited", "sandbox.*"}})
	if err != nil {
		t.Fatal(err)
	}
	w := resp.Webhook
	if !strings.HasPrefix(w.ID, "whk_") || !strings.HasPrefix(resp.Secret, "whsec_") || strings.Join(w.Events, ",") != "command.exited,sandbox.*" {
		t.Fatalf("created %+v", resp)
	}
	// Another team sees none of it.
	_, err = h.srv.Webhooks().Get(ctx, h.b, w.ID)
	wantCode(t, err, api.CodeNotFound)
	_, err = h.srv.Webhooks().Deliveries(ctx, h.b, w.ID, page.Page{})
	wantCode(t, err, api.CodeNotFound)
	wantCode(t, h.srv.Webhooks().Delete(ctx, h.b, w.ID), api.CodeNotFound)
	if l, err := h.srv.Webhooks().List(ctx, h.b, page.Page{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("team b's list: %+v %v", l, err)
	}
	if l, err := h.srv.Webhooks().List(ctx, h.a, page.Page{}); err != nil || len(l.Items) != 1 || l.Items[0].ID != w.ID {
		t.Fatalf("team a's list: %+v %v", l, err)
	}

	// The team's matching events are enqueued for it, others are not.
	sb := h.running(t, h.a, "hooked")
	h.running(t, h.b, "other")
	l, err := h.srv.Webhooks().Deliveries(ctx, h.a, w.ID, page.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, d := range l.Items {
		types = append([]string{d.EventType}, types...)
		if d.State != api.DeliveryPending {
			t.Errorf("delivery %+v: no dispatcher runs here", d)
		}
	}
	if strings.Join(types, ",") != "sandbox.creating,sandbox.running" {
		t.Fatalf("deliveries of %s: %v", sb.ID, types)
	}

	for _, tt := range []api.CreateWebhookRequest{
		{URL: "http://127.0.0.1:8080/"},
		{URL: "http://localhost/"},
		{URL: "file:///etc/passwd"},
		{URL: "https://93.184.215.14/", Events: []string{"Sandbox.Running"}},
		{URL: "https://93.184.215.14/", Events: []string{"sandbox.**"}},
		{URL: "https://93.184.215.14/", Events: []string{""}},
	} {
		_, err := h.srv.Webhooks().Create(ctx, h.a, tt)
		wantCode(t, err, api.CodeInvalidArgument)
	}
	for range server.MaxWebhooksPerTeam - 1 {
		if _, err := h.srv.Webhooks().Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = h.srv.Webhooks().Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/"})
	wantCode(t, err, api.CodeResourceExhausted)

	if err := h.srv.Webhooks().Delete(ctx, h.a, w.ID); err != nil {
		t.Fatal(err)
	}
	if d, _ := h.st.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: w.ID}); len(d) != 0 {
		t.Fatalf("deliveries left after delete: %+v", d)
	}
	_, err = h.srv.Webhooks().Get(ctx, h.a, w.ID)
	wantCode(t, err, api.CodeNotFound)
}
