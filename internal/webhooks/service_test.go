package webhooks_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/webhooks"
)

// keys is the vault as the service sees it: a keyring, or none.
type keys struct{ kr *secrets.Keyring }

func (k keys) Keyring() (*secrets.Keyring, error) {
	if k.kr == nil {
		return nil, api.Errorf(api.CodeUnavailable, "no secrets key")
	}
	return k.kr, nil
}

func newKey(t testing.TB) *secrets.Key {
	t.Helper()
	b, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := secrets.ParseKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// svcHarness is a SQLite store with teams a and b.
type svcHarness struct {
	st   *sqlite.DB
	a, b string
}

func newSvcHarness(t *testing.T) *svcHarness {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &svcHarness{st: st, a: "team_a", b: "team_b"}
	for _, id := range []string{h.a, h.b} {
		if err := st.CreateTeam(t.Context(), api.Team{ID: id, Name: strings.TrimPrefix(id, "team_"), CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h *svcHarness) service(kr *secrets.Keyring) *webhooks.Service {
	return webhooks.NewService(webhooks.ServiceConfig{}, h.st, keys{kr}, slog.New(slog.DiscardHandler), func() time.Time { return time.Now().UTC() })
}

// TestWebhookSecretSealed: a webhook's signing secret is sealed before
// the store sees it, bound to its webhook (a sealed value copied to
// another row does not open), and opened for the dispatcher and for an
// idempotent replay; a secret stored in clear by a server from before is
// sealed at start, once; a rotation seals again under the new key, and a
// secret under a key the server was not given stops the start.
func TestWebhookSecretSealed(t *testing.T) {
	k1 := newKey(t)
	h := newSvcHarness(t)
	s := h.service(secrets.NewKeyring(k1))
	ctx := t.Context()
	clearIn := func(what, stored, secret string) {
		t.Helper()
		if !secrets.IsText(stored) || strings.Contains(stored, secret) || strings.Contains(stored, strings.TrimPrefix(secret, webhooks.SecretPrefix)) {
			t.Errorf("%s: the webhooks.secret column holds %q: not sealed, or the secret %q in clear", what, stored, secret)
		}
	}

	resp, err := s.Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/hook"})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := h.st.GetWebhook(ctx, h.a, resp.Webhook.ID)
	if err != nil {
		t.Fatal(err)
	}
	clearIn("after create", stored.Secret, resp.Secret)
	if v, err := s.OpenSecret(h.a, resp.Webhook.ID, stored.Secret); err != nil || v != resp.Secret {
		t.Errorf("opened for the dispatcher: %q %v; want the secret shown at create", v, err)
	}
	if again, err := s.Created(ctx, h.a, resp.Webhook.ID); err != nil || again.Secret != resp.Secret {
		t.Errorf("answered again for a replay: %+v %v", again, err)
	}

	// Moved to another webhook's row (of the same team, or another's), the
	// sealed value does not open.
	other, err := s.Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenSecret(h.a, other.Webhook.ID, stored.Secret); err == nil {
		t.Error("a sealed secret opened as another webhook's")
	}
	if _, err := s.OpenSecret(h.b, resp.Webhook.ID, stored.Secret); err == nil {
		t.Error("a sealed secret opened as another team's")
	}
	if _, err := s.OpenSecret(h.a, resp.Webhook.ID, resp.Secret); err == nil {
		t.Error("a clear secret was used as it is")
	}

	// A row from before secrets were sealed: sealed at start, once.
	old := store.Webhook{Webhook: api.Webhook{ID: "whk_old", TeamID: h.b, URL: "https://93.184.215.14/old", Events: []string{"*"}, CreatedAt: time.Now().UTC()},
		Secret: webhooks.NewSecret()}
	if err := h.st.CreateWebhook(ctx, old); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SealSecrets(ctx); err != nil || n != 1 {
		t.Fatalf("sealed at start: %d %v; want the old row's", n, err)
	}
	got, err := h.st.GetWebhook(ctx, h.b, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	clearIn("after sealing an old row", got.Secret, old.Secret)
	if v, err := s.OpenSecret(h.b, old.ID, got.Secret); err != nil || v != old.Secret {
		t.Errorf("the old row's secret opens as %q %v; want %q", v, err, old.Secret)
	}
	if n, err := s.SealSecrets(ctx); err != nil || n != 0 {
		t.Errorf("sealed again at the next start: %d %v", n, err)
	}

	// A rotation: a service given a new key and the old one seals again
	// under the new key; one given only the new key refuses to start.
	k2 := newKey(t)
	if _, err := h.service(secrets.NewKeyring(k2)).SealSecrets(ctx); err == nil || !strings.Contains(err.Error(), k1.ID) {
		t.Errorf("started without the key the secrets are under: %v", err)
	}
	if n, err := h.service(secrets.NewKeyring(k2, k1)).SealSecrets(ctx); err != nil || n != 3 {
		t.Fatalf("sealed again under the new key: %d %v; want 3", n, err)
	}
	got, err = h.st.GetWebhook(ctx, h.b, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sealed, err := secrets.ParseText(got.Secret); err != nil || sealed.KeyID != k2.ID {
		t.Errorf("after the rotation: %+v %v; want sealed under %s", sealed, err, k2.ID)
	}
	if v, err := h.service(secrets.NewKeyring(k2)).OpenSecret(h.b, old.ID, got.Secret); err != nil || v != old.Secret {
		t.Errorf("after the rotation, opens as %q %v", v, err)
	}
}

// TestWebhookCreateRefused: a create is refused, before anything is
// stored, for a URL the dispatcher would not send to, events that are not
// a type, a family or *, a team at its cap, or a server without a key.
func TestWebhookCreateRefused(t *testing.T) {
	h := newSvcHarness(t)
	s := h.service(secrets.NewKeyring(newKey(t)))
	ctx := t.Context()
	for _, tt := range []struct {
		req  api.CreateWebhookRequest
		want api.Code
	}{
		{api.CreateWebhookRequest{URL: "http://127.0.0.1:8080/"}, api.CodeInvalidArgument},
		{api.CreateWebhookRequest{URL: "http://localhost/"}, api.CodeInvalidArgument},
		{api.CreateWebhookRequest{URL: "file:///etc/passwd"}, api.CodeInvalidArgument},
		{api.CreateWebhookRequest{URL: "https://93.184.215.14/", Events: []string{"Sandbox.Running"}}, api.CodeInvalidArgument},
		{api.CreateWebhookRequest{URL: "https://93.184.215.14/", Events: []string{"sandbox.**"}}, api.CodeInvalidArgument},
		{api.CreateWebhookRequest{URL: "https://93.184.215.14/", Events: []string{""}}, api.CodeInvalidArgument},
		{api.CreateWebhookRequest{URL: "https://93.184.215.14/", Events: make([]string, 65)}, api.CodeInvalidArgument},
	} {
		if _, err := s.Create(ctx, h.a, tt.req); api.ErrorCode(err) != tt.want {
			t.Errorf("%+v: %v; want %s", tt.req, err, tt.want)
		}
	}
	if _, err := h.service(nil).Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/"}); api.ErrorCode(err) != api.CodeUnavailable {
		t.Errorf("without a secrets key: %v; want unavailable", err)
	}
	if l, _ := s.List(ctx, h.a, page.Page{}); len(l.Items) != 0 {
		t.Fatalf("refused creates stored %+v", l.Items)
	}
	for range webhooks.MaxPerTeam {
		if _, err := s.Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/"}); api.ErrorCode(err) != api.CodeResourceExhausted {
		t.Errorf("past the cap: %v; want resource_exhausted", err)
	}
	if _, err := s.Create(ctx, h.b, api.CreateWebhookRequest{URL: "https://93.184.215.14/"}); err != nil {
		t.Errorf("another team's cap is its own: %v", err)
	}
}

// TestWebhooksOfOneTeam: another team's webhook answers as a missing one
// to every call.
func TestWebhooksOfOneTeam(t *testing.T) {
	h := newSvcHarness(t)
	s := h.service(secrets.NewKeyring(newKey(t)))
	ctx := t.Context()
	resp, err := s.Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/", Events: []string{"sandbox.*", "command.exited", "sandbox.*"}})
	if err != nil {
		t.Fatal(err)
	}
	if w := resp.Webhook; !strings.HasPrefix(w.ID, "whk_") || !strings.HasPrefix(resp.Secret, "whsec_") || strings.Join(w.Events, ",") != "command.exited,sandbox.*" {
		t.Fatalf("created %+v", resp)
	}
	id := resp.Webhook.ID
	for name, call := range map[string]func() error{
		"get":        func() error { _, err := s.Get(ctx, h.b, id); return err },
		"created":    func() error { _, err := s.Created(ctx, h.b, id); return err },
		"deliveries": func() error { _, err := s.Deliveries(ctx, h.b, id, page.Page{}); return err },
		"delete":     func() error { return s.Delete(ctx, h.b, id) },
	} {
		if err := call(); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("team b's %s: %v; want not_found", name, err)
		}
	}
	if l, err := s.List(ctx, h.b, page.Page{}); err != nil || len(l.Items) != 0 {
		t.Errorf("team b's list: %+v %v", l, err)
	}
	if _, err := s.List(ctx, "", page.Page{}); api.ErrorCode(err) != api.CodeInternal {
		t.Errorf("a list without a team: %v; want refused", err)
	}
	if err := s.Delete(ctx, h.a, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, h.a, id); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("after delete: %v", err)
	}
}
