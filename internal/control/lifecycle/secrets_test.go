package lifecycle_test

import (
	"github.com/cove-dev/cove/internal/service"
	"log/slog"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store"
)

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

// lastExec is the spec of the sandbox's last command as the node got it.
func (h *harness) lastExec(t *testing.T, id string) node.ExecSpec {
	t.Helper()
	sb, ok := h.node.Sandbox(id)
	if !ok || len(sb.Commands) == 0 {
		t.Fatalf("the node ran no command in %s", id)
	}
	return sb.Commands[len(sb.Commands)-1]
}

func TestSecretsLifecycle(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	const v1, v2 = "ghp_first-value-0123456789", "ghp_second-value-9876543210"
	sec, created, err := h.plane.Vault.Put(ctx, h.a, "github-token", v1)
	if err != nil || !created || sec.Name != "github-token" {
		t.Fatalf("PutSecret = %+v, %v, %v", sec, created, err)
	}
	if _, created, err = h.plane.Vault.Put(ctx, h.a, "github-token", v1); err != nil || created {
		t.Fatalf("second PutSecret created %v, %v", created, err)
	}
	l, err := h.plane.Vault.List(ctx, h.a, page.Page{})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "github-token" {
		t.Fatalf("ListSecrets = %+v, %v", l, err)
	}
	stored, err := h.st.GetSecret(ctx, h.a, "github-token")
	if err != nil || strings.Contains(string(stored.Ciphertext), v1) {
		t.Fatalf("stored %+v, %v: want it sealed", stored, err)
	}

	// The sandbox keeps the name; each command gets the value as it is then.
	sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{
		Name: "web", Env: map[string]string{"PLAIN": "p"}, Secrets: map[string]api.SecretRef{"GITHUB_TOKEN": {Secret: "github-token"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
	row, _ := h.st.GetSandbox(ctx, h.a, sb.ID)
	if row.Secrets["GITHUB_TOKEN"] != "github-token" {
		t.Fatalf("stored sandbox secrets %v", row.Secrets)
	}
	cmd, err := h.plane.Commands.Exec(ctx, h.a, "web", true, api.CreateCommandRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	spec := h.lastExec(t, sb.ID)
	if spec.Env["GITHUB_TOKEN"] != v1 || spec.Env["PLAIN"] != "p" {
		t.Fatalf("command env %v", spec.Env)
	}
	if len(spec.Secrets) != 1 || spec.Secrets[0] != (node.Secret{Name: "github-token", Value: v1}) {
		t.Fatalf("redactions %v", spec.Secrets)
	}
	if len(cmd.Secrets) != 0 {
		t.Errorf("command secrets %v; want none of its own", cmd.Secrets)
	}

	if _, _, err := h.plane.Vault.Put(ctx, h.a, "github-token", v2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.plane.Vault.Put(ctx, h.a, "npm", "npm_value-0123456789"); err != nil {
		t.Fatal(err)
	}
	cmd, err = h.plane.Commands.Exec(ctx, h.a, "web", true, api.CreateCommandRequest{
		Command: "true", Secrets: map[string]string{"NPM_TOKEN": "npm"},
	})
	if err != nil {
		t.Fatal(err)
	}
	spec = h.lastExec(t, sb.ID)
	if spec.Env["GITHUB_TOKEN"] != v2 || spec.Env["NPM_TOKEN"] != "npm_value-0123456789" {
		t.Fatalf("after the update: env %v", spec.Env)
	}
	stc, _ := h.st.GetCommand(ctx, sb.ID, cmd.ID)
	if stc.Secrets["NPM_TOKEN"] != "npm" || stc.Env["NPM_TOKEN"] != "" {
		t.Fatalf("stored command: secrets %v, env %v; want the name only", stc.Secrets, stc.Env)
	}
	// A command's plain env wins over the sandbox's secret.
	if _, err := h.plane.Commands.Exec(ctx, h.a, "web", true, api.CreateCommandRequest{Command: "true", Env: map[string]string{"GITHUB_TOKEN": "x"}}); err != nil {
		t.Fatal(err)
	}
	if spec = h.lastExec(t, sb.ID); spec.Env["GITHUB_TOKEN"] != "x" || len(spec.Secrets) != 0 {
		t.Fatalf("env override: %v, redactions %v", spec.Env["GITHUB_TOKEN"], spec.Secrets)
	}

	// Wake gives the node every value the sandbox was given, as it is now.
	if _, err := h.srv.SleepSandbox(ctx, h.a, "web", "test"); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateAsleep)
	if _, err := h.srv.WakeSandbox(ctx, h.a, "web"); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
	woken, _ := h.node.Sandbox(sb.ID)
	names := map[string]string{}
	for _, s := range woken.Spec.Secrets {
		names[s.Name] = s.Value
	}
	if names["github-token"] != v2 || names["npm"] != "npm_value-0123456789" {
		t.Errorf("wake redactions %v", woken.Spec.Secrets)
	}

	// Deleted: the sandbox's next command cannot start, and says why.
	if err := h.plane.Vault.Delete(ctx, h.a, "github-token"); err != nil {
		t.Fatal(err)
	}
	before, _ := h.st.ListCommands(ctx, store.CommandFilter{SandboxID: sb.ID})
	_, err = h.plane.Commands.Exec(ctx, h.a, "web", true, api.CreateCommandRequest{Command: "true"})
	wantCode(t, err, api.CodeNotFound)
	if !strings.Contains(err.Error(), `secret "github-token" (for GITHUB_TOKEN) not found`) {
		t.Errorf("error %q does not name the secret and the variable", err)
	}
	after, _ := h.st.ListCommands(ctx, store.CommandFilter{SandboxID: sb.ID})
	if len(after) != len(before) {
		t.Errorf("a command row was left: %d before, %d after", len(before), len(after))
	}
}

func TestSecretsRefused(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	const value = "team-a-only-value-0123"
	if _, _, err := h.plane.Vault.Put(ctx, h.a, "tok", value); err != nil {
		t.Fatal(err)
	}
	// Another team sees nothing and uses nothing; nothing is half-created.
	_, err := h.plane.Vault.Get(ctx, h.b, "tok")
	wantCode(t, err, api.CodeNotFound)
	wantCode(t, h.plane.Vault.Delete(ctx, h.b, "tok"), api.CodeNotFound)
	_, err = h.srv.CreateSandbox(ctx, h.b, api.CreateSandboxRequest{Name: "b", Secrets: map[string]api.SecretRef{"T": {Secret: "tok"}}})
	wantCode(t, err, api.CodeNotFound)
	if l, _ := h.srv.ListSandboxes(ctx, h.b, lifecycle.SandboxQuery{}); len(l.Items) != 0 {
		t.Fatalf("team b has sandboxes %v after a refused create", l.Items)
	}
	if l, _ := h.plane.Vault.List(ctx, h.b, page.Page{}); len(l.Items) != 0 {
		t.Fatalf("team b lists %v", l.Items)
	}
	h.running(t, h.b, "bb")
	_, err = h.plane.Commands.Exec(ctx, h.b, "bb", true, api.CreateCommandRequest{Command: "true", Secrets: map[string]string{"T": "tok"}})
	wantCode(t, err, api.CodeNotFound)

	h.running(t, h.a, "aa")
	for name, c := range map[string]struct {
		put   func() error
		code  api.Code
		never string
	}{
		"empty value":     {func() error { _, _, err := h.plane.Vault.Put(ctx, h.a, "x", ""); return err }, api.CodeInvalidArgument, ""},
		"NUL in value":    {func() error { _, _, err := h.plane.Vault.Put(ctx, h.a, "x", "abc\x00def-secret"); return err }, api.CodeInvalidArgument, "def-secret"},
		"long value":      {func() error { _, _, err := h.plane.Vault.Put(ctx, h.a, "x", strings.Repeat("v", 33<<10)); return err }, api.CodePayloadTooLarge, "vvvv"},
		"bad UTF-8":       {func() error { _, _, err := h.plane.Vault.Put(ctx, h.a, "x", "abc\xffsecret-tail"); return err }, api.CodeInvalidArgument, "secret-tail"},
		"name with slash": {func() error { _, _, err := h.plane.Vault.Put(ctx, h.a, "a/b", "value-value"); return err }, api.CodeInvalidArgument, "value-value"},
		"name too long": {func() error {
			_, _, err := h.plane.Vault.Put(ctx, h.a, strings.Repeat("n", 129), "value-value")
			return err
		}, api.CodeInvalidArgument, "value-value"},
		"unknown at create": {func() error {
			_, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Secrets: map[string]api.SecretRef{"T": {Secret: "nope"}}})
			return err
		}, api.CodeNotFound, ""},
		"env and secret at create": {func() error {
			_, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Env: map[string]string{"T": "1"}, Secrets: map[string]api.SecretRef{"T": {Secret: "tok"}}})
			return err
		}, api.CodeInvalidArgument, value},
		"bad variable": {func() error {
			_, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Secrets: map[string]api.SecretRef{"1T": {Secret: "tok"}}})
			return err
		}, api.CodeInvalidArgument, value},
		"env and secret at exec": {func() error {
			_, err := h.plane.Commands.Exec(ctx, h.a, "aa", true, api.CreateCommandRequest{Command: "true", Env: map[string]string{"T": "1"}, Secrets: map[string]string{"T": "tok"}})
			return err
		}, api.CodeInvalidArgument, value},
		"unknown at exec": {func() error {
			_, err := h.plane.Commands.Exec(ctx, h.a, "aa", true, api.CreateCommandRequest{Command: "true", Secrets: map[string]string{"T": "nope"}})
			return err
		}, api.CodeNotFound, ""},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.put()
			wantCode(t, err, c.code)
			if c.never != "" && strings.Contains(err.Error(), c.never) {
				t.Errorf("error %q repeats the value", err)
			}
		})
	}
	if l, _ := h.srv.ListSandboxes(ctx, h.a, lifecycle.SandboxQuery{}); len(l.Items) != 1 {
		t.Errorf("team a has %d sandboxes; the refused creates left some", len(l.Items))
	}
	for _, e := range h.events(t, h.a, "") {
		if strings.Contains(e, value) {
			t.Errorf("event %q holds the value", e)
		}
	}
}

// TestSecretsRekey rotates the key: a server given the new key and the
// old one seals every secret again under the new key at start, after
// which the new key alone opens them; a server given neither refuses.
func TestSecretsRekey(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	newServer := func(kr *secrets.Keyring) *service.Plane {
		cfg := lifecycle.DefaultConfig()
		cfg.Templates = []string{"managed"}
		cfg.WarmPool = 0
		cfg.Secrets = kr
		p, err := service.NewPlane(cfg, h.st, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Core.Close)
		return p
	}
	oldK, newK := newKey(t), newKey(t)
	if _, _, err := newServer(secrets.NewKeyring(oldK)).Vault.Put(ctx, h.a, "tok", "rotate-me-0123456789"); err != nil {
		t.Fatal(err)
	}
	oldRow, _ := h.st.GetSecret(ctx, h.a, "tok")
	if _, err := newServer(secrets.NewKeyring(newK)).Vault.Rekey(ctx); err == nil || !strings.Contains(err.Error(), "--secrets-old-key-file") {
		t.Fatalf("a server without the old key: %v; want a refusal naming --secrets-old-key-file", err)
	}
	n, err := newServer(secrets.NewKeyring(newK, oldK)).Vault.Rekey(ctx)
	if err != nil || n != 1 {
		t.Fatalf("RekeySecrets = %d, %v; want 1", n, err)
	}
	row, _ := h.st.GetSecret(ctx, h.a, "tok")
	if row.KeyID != newK.ID || !row.UpdatedAt.Equal(oldRow.UpdatedAt) {
		t.Fatalf("after rekey: key %s (want %s), updated %v (want %v)", row.KeyID, newK.ID, row.UpdatedAt, oldRow.UpdatedAt)
	}
	srv := newServer(secrets.NewKeyring(newK))
	if n, err := srv.Vault.Rekey(ctx); err != nil || n != 0 {
		t.Fatalf("second RekeySecrets = %d, %v; want nothing to do", n, err)
	}
	srv.SetNode(h.node)
	sb, err := srv.Core.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Secrets: map[string]api.SecretRef{"T": {Secret: "tok"}}})
	if err != nil {
		t.Fatalf("create with the rotated secret: %v", err)
	}
	if _, err := srv.Core.WaitSandbox(ctx, h.a, sb.ID, api.StateRunning, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commands.Exec(ctx, h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	if spec := h.lastExec(t, sb.ID); spec.Env["T"] != "rotate-me-0123456789" {
		t.Fatalf("env after rotation %v", spec.Env)
	}
}
