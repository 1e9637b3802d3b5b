package lifecycle_test

import (
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// TestPlaceholderSecrets: a placeholder variable gets a cove_ph_ string of
// its sandbox and secret, never the value; the node is given the values
// the injection rules name, with the placeholders, when the sandbox
// starts; the sandbox keeps its rules and placeholders in the store.
func TestPlaceholderSecrets(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	const value = "sk-placeholder-test-0123456789"
	if _, _, err := h.plane.Vault.Put(ctx, h.a, "openai", value); err != nil {
		t.Fatal(err)
	}
	rules := []api.InjectRule{{Host: "API.openai.com", Header: "authorization", Value: "Bearer {secret:openai}"}}
	create := func(name string) api.Sandbox {
		sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{
			Name:    name,
			Secrets: map[string]api.SecretRef{"OPENAI_API_KEY": {Secret: "openai", Placeholder: true}, "PLAIN_KEY": {Secret: "openai"}},
			Network: &api.NetworkPolicy{Allow: []string{"api.openai.com"}, Inject: rules},
		})
		if err != nil {
			t.Fatal(err)
		}
		h.wait(t, h.a, sb.ID, api.StateRunning)
		return sb
	}
	sb := create("a")
	row, _ := h.st.GetSandbox(ctx, h.a, sb.ID)
	if len(row.Placeholders) != 1 || row.Placeholders[0] != "OPENAI_API_KEY" || row.Secrets["OPENAI_API_KEY"] != "openai" {
		t.Fatalf("stored secrets %v placeholders %v", row.Secrets, row.Placeholders)
	}
	if len(row.Network.Inject) != 1 || row.Network.Inject[0].Host != "api.openai.com" || row.Network.Inject[0].Header != "Authorization" {
		t.Fatalf("stored rules %+v", row.Network.Inject)
	}
	if _, err := h.plane.Commands.Exec(ctx, h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	spec := h.lastExec(t, sb.ID)
	ph := spec.Env["OPENAI_API_KEY"]
	if !strings.HasPrefix(ph, "cove_ph_") || strings.Contains(ph, value) || spec.Env["PLAIN_KEY"] != value {
		t.Fatalf("command env %v", spec.Env)
	}
	got, _ := h.node.Sandbox(sb.ID)
	if want := []node.InjectSecret{{Name: "openai", Value: value, Placeholder: ph}}; len(got.Spec.Inject) != 1 || got.Spec.Inject[0] != want[0] {
		t.Fatalf("node given %+v, want %+v", got.Spec.Inject, want)
	}
	// Another sandbox, another placeholder.
	other := create("b")
	if _, err := h.plane.Commands.Exec(ctx, h.a, other.ID, true, api.CreateCommandRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	if ph2 := h.lastExec(t, other.ID).Env["OPENAI_API_KEY"]; ph2 == ph || !strings.HasPrefix(ph2, "cove_ph_") {
		t.Fatalf("second sandbox's placeholder %q (first %q)", ph2, ph)
	}
	// A PATCH without inject keeps the rules; [] removes them.
	upd, err := h.srv.UpdateSandbox(ctx, h.a, sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"api.openai.com", "example.com"}}})
	if err != nil || len(upd.Network.Inject) != 1 {
		t.Fatalf("PATCH allow: %+v %v", upd.Network, err)
	}
	upd, err = h.srv.UpdateSandbox(ctx, h.a, sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"api.openai.com"}, Inject: []api.InjectRule{}}})
	if err != nil || len(upd.Network.Inject) != 0 {
		t.Fatalf("PATCH inject []: %+v %v", upd.Network, err)
	}
}

func TestInjectValidation(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	for name, req := range map[string]api.CreateSandboxRequest{
		"wildcard host":  {Network: &api.NetworkPolicy{Inject: []api.InjectRule{{Host: "*.openai.com", Header: "A", Value: "{secret:x}"}}}},
		"no secret":      {Network: &api.NetworkPolicy{Inject: []api.InjectRule{{Host: "api.openai.com", Header: "A", Value: "plain"}}}},
		"host header":    {Network: &api.NetworkPolicy{Inject: []api.InjectRule{{Host: "api.openai.com", Header: "Host", Value: "{secret:x}"}}}},
		"setup injected": {Setup: &api.Setup{Command: "true", Network: &api.NetworkPolicy{Inject: []api.InjectRule{{Host: "api.openai.com", Header: "A", Value: "{secret:x}"}}}}},
	} {
		_, err := h.srv.CreateSandbox(ctx, h.a, req)
		if api.ErrorCode(err) != api.CodeInvalidArgument || !strings.Contains(api.ErrorMessage(err), "inject") {
			t.Errorf("%s: %v, want invalid_argument naming inject", name, err)
		}
	}
}

// TestInjectSecretsFollowChanges: a PATCH giving a running sandbox rules
// gives its node the secrets they name, a team secret set while it runs
// reaches the node, and a rule naming a secret the team lacks is a 400.
func TestInjectSecretsFollowChanges(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	if _, _, err := h.plane.Vault.Put(ctx, h.a, "openai", "sk-one"); err != nil {
		t.Fatal(err)
	}
	sb, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{
		Secrets: map[string]api.SecretRef{"OPENAI_API_KEY": {Secret: "openai", Placeholder: true}},
		Network: &api.NetworkPolicy{Allow: []string{"api.openai.com"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, sb.ID, api.StateRunning)
	given := func() []node.InjectSecret {
		got, _ := h.node.Sandbox(sb.ID)
		return got.Inject
	}
	rule := api.InjectRule{Host: "api.openai.com", Header: "Authorization", Value: "Bearer {secret:openai}"}
	missing := api.InjectRule{Host: "api.openai.com", Header: "X-Other", Value: "{secret:nope}"}
	_, err = h.srv.UpdateSandbox(ctx, h.a, sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"api.openai.com"}, Inject: []api.InjectRule{rule, missing}}})
	if api.ErrorCode(err) != api.CodeInvalidArgument || !strings.Contains(api.ErrorMessage(err), `"nope"`) || !strings.Contains(api.ErrorMessage(err), "network.inject[1]") {
		t.Fatalf("PATCH naming a missing secret: %v", err)
	}
	if g := given(); len(g) != 0 {
		t.Fatalf("node given %d secrets before any rule", len(g))
	}
	if _, err := h.srv.UpdateSandbox(ctx, h.a, sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"api.openai.com"}, Inject: []api.InjectRule{rule}}}); err != nil {
		t.Fatal(err)
	}
	if g := given(); len(g) != 1 || g[0].Name != "openai" || g[0].Value != "sk-one" || !strings.HasPrefix(g[0].Placeholder, "cove_ph_") {
		t.Fatalf("node given %+v after the PATCH", g)
	}
	if _, _, err := h.plane.Vault.Put(ctx, h.a, "openai", "sk-two"); err != nil {
		t.Fatal(err)
	}
	if g := given(); len(g) != 1 || g[0].Value != "sk-two" {
		t.Fatalf("node given %+v after the secret changed", g)
	}
	// Another team's secret of the same name changes nothing here.
	if _, _, err := h.plane.Vault.Put(ctx, h.b, "openai", "sk-other-team"); err != nil {
		t.Fatal(err)
	}
	if g := given(); len(g) != 1 || g[0].Value != "sk-two" {
		t.Fatalf("node given %+v after another team's secret changed", g)
	}
}
