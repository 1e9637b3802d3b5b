package vault_test

import (
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

const maxEnv, maxValue = 8, 64

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

// newVault returns a vault under kr over a new SQLite store with teams a
// and b.
func newVault(t *testing.T, kr *secrets.Keyring) (*vault.Service, *sqlite.DB) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, id := range []string{"team_a", "team_b"} {
		if err := st.CreateTeam(t.Context(), api.Team{ID: id, Name: strings.TrimPrefix(id, "team_"), CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	return vaultOver(st, kr), st
}

func vaultOver(st *sqlite.DB, kr *secrets.Keyring) *vault.Service {
	return vault.New(vault.Config{Keyring: kr, MaxEnv: maxEnv, MaxValue: maxValue}, st, slog.New(slog.DiscardHandler), func() time.Time { return time.Now().UTC() })
}

// TestPutRefused: a value the environment could not carry (empty, NUL,
// too long, not UTF-8) or a bad name is refused, and the refusal never
// repeats the value; nothing is stored.
func TestPutRefused(t *testing.T) {
	v, _ := newVault(t, secrets.NewKeyring(newKey(t)))
	for _, tt := range []struct {
		name, secret, value string
		want                api.Code
	}{
		{"empty", "x", "", api.CodeInvalidArgument},
		{"NUL", "x", "abc\x00def-secret", api.CodeInvalidArgument},
		{"too long", "x", strings.Repeat("v", maxValue+1), api.CodePayloadTooLarge},
		{"bad UTF-8", "x", "abc\xffsecret-tail", api.CodeInvalidArgument},
		{"slash in name", "a/b", "value-value", api.CodeInvalidArgument},
		{"long name", strings.Repeat("n", 129), "value-value", api.CodeInvalidArgument},
		{"name starts with a dot", ".x", "value-value", api.CodeInvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := v.Put(t.Context(), "team_a", tt.secret, tt.value)
			if api.ErrorCode(err) != tt.want {
				t.Fatalf("Put = %v; want %s", err, tt.want)
			}
			if tt.value != "" && strings.Contains(err.Error(), tt.value[3:]) {
				t.Errorf("the refusal repeats the value: %v", err)
			}
		})
	}
	if l, err := v.List(t.Context(), "team_a", page.Page{}); err != nil || len(l.Items) != 0 {
		t.Errorf("stored after refusals: %+v %v", l, err)
	}
	if _, _, err := vaultOver(nil, nil).Put(t.Context(), "team_a", "x", "value"); api.ErrorCode(err) != api.CodeUnavailable {
		t.Errorf("without a key: %v; want unavailable", err)
	}
}

// TestValues: references resolve to the team's own values now (a put
// replaces the value the next resolution sees); another team's secret or a
// missing one is not_found naming the secret and the variable.
func TestValues(t *testing.T) {
	v, _ := newVault(t, secrets.NewKeyring(newKey(t)))
	ctx := t.Context()
	if _, created, err := v.Put(ctx, "team_a", "tok", "value-one"); err != nil || !created {
		t.Fatalf("Put = %v, %v", created, err)
	}
	if _, err := v.Values(ctx, "team_a", map[string]string{"A": "tok", "B": "tok"}); err != nil {
		t.Fatal(err)
	}
	if _, created, err := v.Put(ctx, "team_a", "tok", "value-two"); err != nil || created {
		t.Fatalf("replacing Put = %v, %v", created, err)
	}
	got, err := v.Values(ctx, "team_a", map[string]string{"A": "tok", "B": "tok"})
	if err != nil || got["A"] != "value-two" || got["B"] != "value-two" || len(got) != 2 {
		t.Errorf("Values = %v, %v; want both variables the new value", got, err)
	}
	for _, tt := range []struct{ team, secret string }{{"team_b", "tok"}, {"team_a", "nope"}} {
		_, err := v.Values(ctx, tt.team, map[string]string{"VAR": tt.secret})
		e, ok := err.(*api.Error)
		if !ok || e.Code != api.CodeNotFound || e.Details["secret"] != tt.secret || e.Details["variable"] != "VAR" {
			t.Errorf("%s's %s: %v; want not_found naming the secret and the variable", tt.team, tt.secret, err)
		}
	}
}

// TestExec: a command gets the sandbox's secrets, less those its env sets,
// and its own, as environment and as the node's redactions; the command
// records only its own names.
func TestExec(t *testing.T) {
	v, _ := newVault(t, secrets.NewKeyring(newKey(t)))
	ctx := t.Context()
	for name, value := range map[string]string{"gh": "gh-value", "npm": "npm-value", "db": "db-value"} {
		if _, _, err := v.Put(ctx, "team_a", name, value); err != nil {
			t.Fatal(err)
		}
	}
	sb := api.Sandbox{ID: "sbx_1", TeamID: "team_a", Secrets: map[string]string{"GH": "gh", "NPM": "npm"}}
	req := api.CreateCommandRequest{Env: map[string]string{"NPM": "plain"}, Secrets: map[string]string{"DB": "db"}}
	var cmd api.Command
	spec := node.ExecSpec{Env: map[string]string{"NPM": "plain"}}
	if err := v.Exec(ctx, sb, req, &cmd, &spec); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"GH": "gh-value", "DB": "db-value", "NPM": "plain"}; !mapsEqual(spec.Env, want) {
		t.Errorf("env %v; want %v", spec.Env, want)
	}
	if want := []node.Secret{{Name: "db", Value: "db-value"}, {Name: "gh", Value: "gh-value"}}; !slices.Equal(spec.Secrets, want) {
		t.Errorf("redactions %v; want %v", spec.Secrets, want)
	}
	if !mapsEqual(cmd.Secrets, req.Secrets) {
		t.Errorf("the command records %v; want its own %v", cmd.Secrets, req.Secrets)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestCheckRefs: a reference names a valid variable and secret, is not
// also a plain variable, and references and plain variables together
// stay within the bound.
func TestCheckRefs(t *testing.T) {
	for _, tt := range []struct {
		name      string
		refs, env map[string]string
		ok        bool
	}{
		{"none", nil, map[string]string{"A": "1"}, true},
		{"fine", map[string]string{"TOKEN": "gh-token"}, map[string]string{"A": "1"}, true},
		{"both", map[string]string{"A": "gh"}, map[string]string{"A": "1"}, false},
		{"bad variable", map[string]string{"1A": "gh"}, nil, false},
		{"bad secret", map[string]string{"A": "a/b"}, nil, false},
		{"at the bound", map[string]string{"A": "x", "B": "x", "C": "x", "D": "x"}, map[string]string{"E": "", "F": "", "G": "", "H": ""}, true},
		{"past the bound", map[string]string{"A": "x", "B": "x", "C": "x", "D": "x", "I": "x"}, map[string]string{"E": "", "F": "", "G": "", "H": ""}, false},
	} {
		err := vault.CheckRefs("secrets", tt.refs, tt.env, maxEnv)
		if (err == nil) != tt.ok || (err != nil && api.ErrorCode(err) != api.CodeInvalidArgument) {
			t.Errorf("%s: %v; want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestSandboxRedactions: a sandbox woken or reattached is redacted for the
// secrets it and its commands were given, as they are now; a secret
// deleted since is skipped.
func TestSandboxRedactions(t *testing.T) {
	v, st := newVault(t, secrets.NewKeyring(newKey(t)))
	ctx := t.Context()
	for name, value := range map[string]string{"gh": "gh-value", "npm": "npm-value", "gone": "gone-value"} {
		if _, _, err := v.Put(ctx, "team_a", name, value); err != nil {
			t.Fatal(err)
		}
	}
	sb := api.Sandbox{ID: "sbx_1", TeamID: "team_a", Name: "s", Template: "managed", State: api.StateRunning,
		Secrets: map[string]string{"GH": "gh", "OLD": "gone"}, CreatedAt: time.Now().UTC(), Labels: map[string]string{}}
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateCommand(ctx, api.Command{ID: "cmd_1", SandboxID: sb.ID, State: api.CommandExited, Command: "true",
		Secrets: map[string]string{"NPM": "npm"}, StartedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(ctx, "team_a", "gone"); err != nil {
		t.Fatal(err)
	}
	want := []node.Secret{{Name: "gh", Value: "gh-value"}, {Name: "npm", Value: "npm-value"}}
	if got := v.SandboxRedactions(ctx, sb); !slices.Equal(got, want) {
		t.Errorf("redactions %v; want %v", got, want)
	}
}

// TestRekey: after a rotation every secret is sealed again under the new
// key, once, and opens as before; a secret under a key the vault was not
// given stops it.
func TestRekey(t *testing.T) {
	oldK, newK := newKey(t), newKey(t)
	v, st := newVault(t, secrets.NewKeyring(oldK))
	ctx := t.Context()
	for _, name := range []string{"a", "b"} {
		if _, _, err := v.Put(ctx, "team_a", name, "value-"+name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := vaultOver(st, secrets.NewKeyring(newK)).Rekey(ctx); err == nil || !strings.Contains(err.Error(), "--secrets-old-key-file") {
		t.Errorf("a vault without the old key: %v; want it refused, naming the flag", err)
	}
	rotated := vaultOver(st, secrets.NewKeyring(newK, oldK))
	if n, err := rotated.Rekey(ctx); err != nil || n != 2 {
		t.Fatalf("Rekey = %d, %v; want 2", n, err)
	}
	if n, err := rotated.Rekey(ctx); err != nil || n != 0 {
		t.Errorf("a second Rekey = %d, %v; want nothing to do", n, err)
	}
	got, err := vaultOver(st, secrets.NewKeyring(newK)).Values(ctx, "team_a", map[string]string{"A": "a", "B": "b"})
	if err != nil || got["A"] != "value-a" || got["B"] != "value-b" {
		t.Errorf("under the new key alone: %v, %v", got, err)
	}
}
