// Package vault is the control plane's room for a team's secrets: it
// keeps them sealed in the store (internal/secrets seals and opens),
// lists and deletes them, checks the references sandboxes, setups and
// commands make to them, and resolves those references to values when a
// command starts, with the redactions the node applies to its output.
// Values are never returned, logged or put in an event.
package vault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store"
)

// A team's secrets are sealed under the server's key (Config.Keyring) and
// referenced by name: sandboxes and commands keep names, and values are
// resolved each time a command starts, so an updated secret reaches the
// next command. A value is never returned, logged, put in an event or a
// state_reason; the node redacts it from recorded output.

var nameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,127})$`)

// MaxPerTeam bounds a team's secrets.
const MaxPerTeam = 1000

// Store is what the service needs of the store: the sealed secrets, and
// the commands of a sandbox (whose secrets its redactions name).
type Store interface {
	store.Secrets
	ListCommands(ctx context.Context, f store.CommandFilter) ([]api.Command, error)
}

// Config is what the service is told by the server's configuration.
type Config struct {
	// Keyring seals and opens the values; nil: this server keeps no
	// secrets, and every call that needs a value answers unavailable.
	Keyring *secrets.Keyring
	// MaxEnv bounds the variables of a command (plain and secret
	// together); MaxValue a value's bytes, as an environment variable's.
	MaxEnv, MaxValue int
	// Changed, when set, is told of a secret stored or deleted, before
	// the call answers: the running sandboxes whose injection rules name
	// it get its new value.
	Changed func(ctx context.Context, teamID, name string)
}

// Service keeps the teams' secrets and resolves references to them.
type Service struct {
	cfg Config
	st  Store
	log *slog.Logger
	now func() time.Time
}

// New returns the service over st; now is its clock.
func New(cfg Config, st Store, log *slog.Logger, now func() time.Time) *Service {
	return &Service{cfg: cfg, st: st, log: log, now: now}
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

// ValidateName checks a secret's name.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return invalid("secret name %q is invalid: use 1-128 letters, digits and '._-', starting with a letter or digit", name)
	}
	return nil
}

// Configured reports whether the server keeps secrets (has a key).
func (s *Service) Configured() bool { return s.cfg.Keyring != nil }

// Keyring is the server's keyring, or unavailable when it has none.
func (s *Service) Keyring() (*secrets.Keyring, error) {
	if s.cfg.Keyring == nil {
		return nil, api.Errorf(api.CodeUnavailable, "this server has no secrets key; start it with one (--secrets-key-file)")
	}
	return s.cfg.Keyring, nil
}

func view(sec store.Secret) api.Secret {
	return api.Secret{Name: sec.Name, CreatedAt: sec.CreatedAt, UpdatedAt: sec.UpdatedAt}
}

// Put creates or replaces a team's secret and reports whether it created
// it.
func (s *Service) Put(ctx context.Context, teamID, name, value string) (api.Secret, bool, error) {
	if err := page.Scoped(teamID); err != nil {
		return api.Secret{}, false, err
	}
	if err := ValidateName(name); err != nil {
		return api.Secret{}, false, err
	}
	switch {
	case value == "":
		return api.Secret{}, false, invalid("secret %s: value is empty", name)
	case len(value) > s.cfg.MaxValue:
		return api.Secret{}, false, api.Errorf(api.CodePayloadTooLarge, "secret %s: value is longer than %d bytes", name, s.cfg.MaxValue)
	case strings.ContainsRune(value, 0):
		return api.Secret{}, false, invalid("secret %s: value contains a NUL byte, which an environment variable cannot hold", name)
	case !utf8.ValidString(value):
		return api.Secret{}, false, invalid("secret %s: value is not valid UTF-8", name)
	}
	kr, err := s.Keyring()
	if err != nil {
		return api.Secret{}, false, err
	}
	if _, err := s.st.GetSecret(ctx, teamID, name); api.ErrorCode(err) == api.CodeNotFound {
		have, err := s.st.ListSecrets(ctx, store.SecretFilter{TeamID: teamID, Limit: MaxPerTeam})
		if err != nil {
			return api.Secret{}, false, err
		}
		if len(have) >= MaxPerTeam {
			return api.Secret{}, false, api.Errorf(api.CodeResourceExhausted, "the team has %d secrets, the most allowed; delete one first", MaxPerTeam)
		}
	} else if err != nil {
		return api.Secret{}, false, err
	}
	sealed, err := kr.Seal(teamID, name, []byte(value))
	if err != nil {
		return api.Secret{}, false, fmt.Errorf("seal secret %s: %w", name, err)
	}
	now := s.now()
	sec := store.Secret{
		TeamID: teamID, Name: name, KeyID: sealed.KeyID, Nonce: sealed.Nonce, Ciphertext: sealed.Ciphertext,
		CreatedAt: now, UpdatedAt: now,
	}
	created, err := s.st.PutSecret(ctx, sec)
	if err != nil {
		return api.Secret{}, false, err
	}
	s.log.Info("secret stored", "team", teamID, "secret", name, "created", created)
	s.changed(ctx, teamID, name)
	got, err := s.st.GetSecret(ctx, teamID, name)
	if err != nil {
		return api.Secret{}, false, err
	}
	return view(got), created, nil
}

// Get describes a team's secret; its value is never returned.
func (s *Service) Get(ctx context.Context, teamID, name string) (api.Secret, error) {
	if err := page.Scoped(teamID); err != nil {
		return api.Secret{}, err
	}
	if ValidateName(name) != nil {
		return api.Secret{}, api.Errorf(api.CodeNotFound, "secret %q not found", name)
	}
	sec, err := s.st.GetSecret(ctx, teamID, name)
	if err != nil {
		return api.Secret{}, err
	}
	return view(sec), nil
}

// List lists a page of a team's secrets by name; the cursor is a name.
func (s *Service) List(ctx context.Context, teamID string, p page.Page) (api.List[api.Secret], error) {
	if err := page.Scoped(teamID); err != nil {
		return api.List[api.Secret]{}, err
	}
	limit, err := p.Size()
	if err != nil {
		return api.List[api.Secret]{}, err
	}
	list, err := s.st.ListSecrets(ctx, store.SecretFilter{TeamID: teamID, After: p.Cursor, Limit: limit + 1})
	if err != nil {
		return api.List[api.Secret]{}, err
	}
	items := make([]api.Secret, len(list))
	for i, sec := range list {
		items[i] = view(sec)
	}
	return page.Cut(items, limit, func(sec api.Secret) string { return sec.Name }), nil
}

// Delete deletes a team's secret. Sandboxes that name it keep the name;
// their next command fails until a secret of that name exists again.
func (s *Service) Delete(ctx context.Context, teamID, name string) error {
	if err := page.Scoped(teamID); err != nil {
		return err
	}
	if ValidateName(name) != nil {
		return api.Errorf(api.CodeNotFound, "secret %q not found", name)
	}
	if err := s.st.DeleteSecret(ctx, teamID, name); err != nil {
		return err
	}
	s.log.Info("secret deleted", "team", teamID, "secret", name)
	s.changed(ctx, teamID, name)
	return nil
}

func (s *Service) changed(ctx context.Context, teamID, name string) {
	if s.cfg.Changed != nil {
		s.cfg.Changed(context.WithoutCancel(ctx), teamID, name)
	}
}

// CheckRefs checks references from environment variables to secret
// names; env are the plain variables given beside them: a variable cannot
// be both, and together they are at most maxEnv. Whether the secrets
// exist is Values's.
func CheckRefs(what string, refs, env map[string]string, maxEnv int) error {
	if len(refs) == 0 {
		return nil
	}
	if len(refs)+len(env) > maxEnv {
		return invalid("%s and env have %d variables together; at most %d are allowed", what, len(refs)+len(env), maxEnv)
	}
	for _, k := range slices.Sorted(maps.Keys(refs)) {
		if !runs.ValidEnvKey(k) {
			return invalid("%s: variable name %q is invalid: use letters, digits and '_', not starting with a digit", what, k)
		}
		if _, ok := env[k]; ok {
			return invalid("%s: %s is also in env; give each variable once", what, k)
		}
		if err := ValidateName(refs[k]); err != nil {
			return invalid("%s.%s: %s", what, k, api.ErrorMessage(err))
		}
	}
	return nil
}

// Exec resolves the secrets of a command about to start: the sandbox's
// (less the variables the command sets in env) and the command's own,
// now. It puts their values in the command's environment and in the
// spec's redactions, and the command's names in cmd.
func (s *Service) Exec(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest, cmd *api.Command, spec *node.ExecSpec) error {
	if err := CheckRefs("secrets", req.Secrets, req.Env, s.cfg.MaxEnv); err != nil {
		return err
	}
	refs := map[string]string{}
	for k, n := range sb.Secrets {
		if _, ok := req.Env[k]; !ok {
			refs[k] = n
		}
	}
	maps.Copy(refs, req.Secrets)
	values, err := s.Values(ctx, sb.TeamID, refs)
	if err != nil {
		return err
	}
	maps.Copy(spec.Env, values)
	// A sandbox's placeholder variable holds its placeholder, unless the
	// command gives that variable itself.
	for _, k := range sb.Placeholders {
		if n, ok := refs[k]; ok && sb.Secrets[k] == n {
			if _, own := req.Secrets[k]; !own {
				spec.Env[k] = s.cfg.Keyring.Placeholder(sb.TeamID, sb.ID, n)
			}
		}
	}
	spec.Secrets = Redactions(refs, values)
	cmd.Secrets = req.Secrets
	return nil
}

// Values resolves a team's secret references (environment variable →
// secret name) to their values now (variable → value). An unknown name is
// not_found, naming the secret and the variable. Callers put the values in
// a command's environment and hand them to the node for redaction
// (Redactions); they never store, log or return them.
func (s *Service) Values(ctx context.Context, teamID string, refs map[string]string) (map[string]string, error) {
	if len(refs) == 0 {
		return map[string]string{}, nil
	}
	if err := page.Scoped(teamID); err != nil {
		return nil, err
	}
	kr, err := s.Keyring()
	if err != nil {
		return nil, err
	}
	values := make(map[string]string, len(refs))
	opened := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(refs)) {
		name := refs[k]
		if v, ok := opened[name]; ok {
			values[k] = v
			continue
		}
		sec, err := s.st.GetSecret(ctx, teamID, name)
		if api.ErrorCode(err) == api.CodeNotFound {
			return nil, &api.Error{
				Code:    api.CodeNotFound,
				Message: fmt.Sprintf("secret %q (for %s) not found; create it with PUT /v1/secrets/%s or `cove secrets set %s`", name, k, name, name),
				Details: map[string]any{"secret": name, "variable": k},
			}
		}
		if err != nil {
			return nil, err
		}
		v, err := kr.Open(teamID, name, secrets.Sealed{KeyID: sec.KeyID, Nonce: sec.Nonce, Ciphertext: sec.Ciphertext})
		if err != nil {
			// Internal: the log gets the reason (no value), the user not.
			return nil, fmt.Errorf("open secret %s of team %s: %w", name, teamID, err)
		}
		opened[name] = string(v)
		values[k] = string(v)
	}
	return values, nil
}

// ResolveSecrets is Values: the service resolves the control plane's
// references (lifecycle.SecretResolver).
func (s *Service) ResolveSecrets(ctx context.Context, teamID string, refs map[string]string) (map[string]string, error) {
	return s.Values(ctx, teamID, refs)
}

// Redactions lists the resolved values of refs as the node redacts them:
// [secret:NAME] in place of each.
func Redactions(refs, values map[string]string) []node.Secret {
	out := make([]node.Secret, 0, len(refs))
	for _, k := range slices.Sorted(maps.Keys(refs)) {
		if v, ok := values[k]; ok {
			out = append(out, node.Secret{Name: refs[k], Value: v})
		}
	}
	return out
}

// SandboxRedactions resolves, as they are now, the secrets a sandbox was
// given (its own and its commands'), for a node that starts recording its
// output again (wake, reattach). A secret deleted since is skipped: its
// value is gone.
func (s *Service) SandboxRedactions(ctx context.Context, sb api.Sandbox) []node.Secret {
	if s.cfg.Keyring == nil {
		return nil
	}
	names := map[string]bool{}
	for _, n := range sb.Secrets {
		names[n] = true
	}
	cmds, err := s.st.ListCommands(ctx, store.CommandFilter{SandboxID: sb.ID})
	if err != nil {
		s.log.Error("list commands for redaction", "sandbox", sb.ID, "err", err)
	}
	for _, c := range cmds {
		for _, n := range c.Secrets {
			names[n] = true
		}
	}
	var out []node.Secret
	for _, n := range slices.Sorted(maps.Keys(names)) {
		v, err := s.Values(ctx, sb.TeamID, map[string]string{"_": n})
		if err != nil {
			if api.ErrorCode(err) != api.CodeNotFound {
				s.log.Warn("resolve secret for redaction", "sandbox", sb.ID, "secret", n, "err", err)
			}
			continue
		}
		out = append(out, node.Secret{Name: n, Value: v["_"]})
	}
	return out
}

// Injection resolves, as they are now, the secrets a sandbox's injection
// rules name, with their placeholders in that sandbox, for the node's
// network gateway (start, wake, reattach). A secret that cannot be
// resolved is left out: the gateway answers requests that need it 502.
func (s *Service) Injection(ctx context.Context, sb api.Sandbox) []node.InjectSecret {
	if s.cfg.Keyring == nil || len(sb.Network.Inject) == 0 {
		return nil
	}
	names := map[string]bool{}
	for _, r := range sb.Network.Inject {
		for _, m := range injectRef.FindAllStringSubmatch(r.Value, -1) {
			names[m[1]] = true
		}
	}
	var out []node.InjectSecret
	for _, n := range slices.Sorted(maps.Keys(names)) {
		v, err := s.Values(ctx, sb.TeamID, map[string]string{"_": n})
		if err != nil {
			s.log.Warn("resolve secret for injection", "sandbox", sb.ID, "secret", n, "err", api.ErrorMessage(err))
			continue
		}
		out = append(out, node.InjectSecret{Name: n, Value: v["_"], Placeholder: s.cfg.Keyring.Placeholder(sb.TeamID, sb.ID, n)})
	}
	return out
}

// injectRef is {secret:NAME} in an injection rule's value.
var injectRef = regexp.MustCompile(`\{secret:([^{}]*)\}`)

// Rekey seals again, under the current key, every secret sealed under
// another key the server was given (an old key of a rotation), and reports
// how many. A secret sealed under a key it was not given fails the call:
// the server must not start without being able to open them.
func (s *Service) Rekey(ctx context.Context) (int, error) {
	kr := s.cfg.Keyring
	if kr == nil {
		return 0, nil
	}
	list, err := s.st.ListSecrets(ctx, store.SecretFilter{NotKeyID: kr.CurrentID()})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sec := range list {
		v, err := kr.Open(sec.TeamID, sec.Name, secrets.Sealed{KeyID: sec.KeyID, Nonce: sec.Nonce, Ciphertext: sec.Ciphertext})
		if errors.Is(err, secrets.ErrUnknownKey) {
			return n, fmt.Errorf("secret %q of team %s is sealed under key %s, not the secrets key (%s): give that key as --secrets-key-file, or as --secrets-old-key-file to re-encrypt under the new one", sec.Name, sec.TeamID, sec.KeyID, kr.CurrentID())
		}
		if err != nil {
			return n, fmt.Errorf("secret %q of team %s: %w", sec.Name, sec.TeamID, err)
		}
		sealed, err := kr.Seal(sec.TeamID, sec.Name, v)
		clear(v)
		if err != nil {
			return n, err
		}
		next := sec
		next.KeyID, next.Nonce, next.Ciphertext = sealed.KeyID, sealed.Nonce, sealed.Ciphertext
		ok, err := s.st.RekeySecret(ctx, next, sec.Nonce)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}
