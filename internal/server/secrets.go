package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store"
)

// A team's secrets are sealed under the server's key (Config.Secrets) and
// referenced by name: sandboxes and commands keep names, and values are
// resolved each time a command starts, so an updated secret reaches the
// next command. A value is never returned, logged, put in an event or a
// state_reason; the node redacts it from recorded output.

var secretNameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,127})$`)

const (
	maxSecretsPerTeam = 1000
	maxSecretValue    = maxEnvValue
)

func validateSecretName(name string) error {
	if !secretNameRE.MatchString(name) {
		return invalid("secret name %q is invalid: use 1-128 letters, digits and '._-', starting with a letter or digit", name)
	}
	return nil
}

func (s *Server) keyring() (*secrets.Keyring, error) {
	if s.cfg.Secrets == nil {
		return nil, api.Errorf(api.CodeUnavailable, "this server has no secrets key; start it with one (--secrets-key-file)")
	}
	return s.cfg.Secrets, nil
}

func secretView(sec store.Secret) api.Secret {
	return api.Secret{Name: sec.Name, CreatedAt: sec.CreatedAt, UpdatedAt: sec.UpdatedAt}
}

// PutSecret creates or replaces a team's secret and reports whether it
// created it.
func (s *Server) PutSecret(ctx context.Context, teamID, name, value string) (api.Secret, bool, error) {
	if err := scoped(teamID); err != nil {
		return api.Secret{}, false, err
	}
	if err := validateSecretName(name); err != nil {
		return api.Secret{}, false, err
	}
	switch {
	case value == "":
		return api.Secret{}, false, invalid("secret %s: value is empty", name)
	case len(value) > maxSecretValue:
		return api.Secret{}, false, api.Errorf(api.CodePayloadTooLarge, "secret %s: value is longer than %d bytes", name, maxSecretValue)
	case strings.ContainsRune(value, 0):
		return api.Secret{}, false, invalid("secret %s: value contains a NUL byte, which an environment variable cannot hold", name)
	case !utf8.ValidString(value):
		return api.Secret{}, false, invalid("secret %s: value is not valid UTF-8", name)
	}
	kr, err := s.keyring()
	if err != nil {
		return api.Secret{}, false, err
	}
	if _, err := s.store.GetSecret(ctx, teamID, name); api.ErrorCode(err) == api.CodeNotFound {
		have, err := s.store.ListSecrets(ctx, store.SecretFilter{TeamID: teamID, Limit: maxSecretsPerTeam})
		if err != nil {
			return api.Secret{}, false, err
		}
		if len(have) >= maxSecretsPerTeam {
			return api.Secret{}, false, api.Errorf(api.CodeResourceExhausted, "the team has %d secrets, the most allowed; delete one first", maxSecretsPerTeam)
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
	created, err := s.store.PutSecret(ctx, sec)
	if err != nil {
		return api.Secret{}, false, err
	}
	s.log.Info("secret stored", "team", teamID, "secret", name, "created", created)
	got, err := s.store.GetSecret(ctx, teamID, name)
	if err != nil {
		return api.Secret{}, false, err
	}
	return secretView(got), created, nil
}

// GetSecret describes a team's secret; its value is never returned.
func (s *Server) GetSecret(ctx context.Context, teamID, name string) (api.Secret, error) {
	if err := scoped(teamID); err != nil {
		return api.Secret{}, err
	}
	if validateSecretName(name) != nil {
		return api.Secret{}, api.Errorf(api.CodeNotFound, "secret %q not found", name)
	}
	sec, err := s.store.GetSecret(ctx, teamID, name)
	if err != nil {
		return api.Secret{}, err
	}
	return secretView(sec), nil
}

// ListSecrets lists a page of a team's secrets by name; the cursor is a name.
func (s *Server) ListSecrets(ctx context.Context, teamID string, p Page) (api.List[api.Secret], error) {
	if err := scoped(teamID); err != nil {
		return api.List[api.Secret]{}, err
	}
	limit, err := p.limit()
	if err != nil {
		return api.List[api.Secret]{}, err
	}
	list, err := s.store.ListSecrets(ctx, store.SecretFilter{TeamID: teamID, After: p.Cursor, Limit: limit + 1})
	if err != nil {
		return api.List[api.Secret]{}, err
	}
	items := make([]api.Secret, len(list))
	for i, sec := range list {
		items[i] = secretView(sec)
	}
	return page(items, limit, func(sec api.Secret) string { return sec.Name }), nil
}

// DeleteSecret deletes a team's secret. Sandboxes that name it keep the
// name; their next command fails until a secret of that name exists again.
func (s *Server) DeleteSecret(ctx context.Context, teamID, name string) error {
	if err := scoped(teamID); err != nil {
		return err
	}
	if validateSecretName(name) != nil {
		return api.Errorf(api.CodeNotFound, "secret %q not found", name)
	}
	if err := s.store.DeleteSecret(ctx, teamID, name); err != nil {
		return err
	}
	s.log.Info("secret deleted", "team", teamID, "secret", name)
	return nil
}

// checkSecretRefs checks references from environment variables to
// secret names; env are the plain variables given beside them: a
// variable cannot be both. Whether the secrets exist is secretValues's.
func checkSecretRefs(what string, refs, env map[string]string) error {
	if len(refs) == 0 {
		return nil
	}
	if len(refs)+len(env) > maxEnv {
		return invalid("%s and env have %d variables together; at most %d are allowed", what, len(refs)+len(env), maxEnv)
	}
	for _, k := range slices.Sorted(maps.Keys(refs)) {
		if !envKeyRE.MatchString(k) {
			return invalid("%s: variable name %q is invalid: use letters, digits and '_', not starting with a digit", what, k)
		}
		if _, ok := env[k]; ok {
			return invalid("%s: %s is also in env; give each variable once", what, k)
		}
		if err := validateSecretName(refs[k]); err != nil {
			return invalid("%s.%s: %s", what, k, api.ErrorMessage(err))
		}
	}
	return nil
}

// execSecrets resolves the secrets of a command about to start: the
// sandbox's (less the variables the command sets in env) and the
// command's own, now. It puts their values in the command's environment
// and in the spec's redactions, and the command's names in cmd.
func (s *Server) execSecrets(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest, cmd *api.Command, spec *node.ExecSpec) error {
	if err := checkSecretRefs("secrets", req.Secrets, req.Env); err != nil {
		return err
	}
	refs := map[string]string{}
	for k, n := range sb.Secrets {
		if _, ok := req.Env[k]; !ok {
			refs[k] = n
		}
	}
	maps.Copy(refs, req.Secrets)
	values, err := s.secretValues(ctx, sb.TeamID, refs)
	if err != nil {
		return err
	}
	maps.Copy(spec.Env, values)
	spec.Secrets = secretRedactions(refs, values)
	cmd.Secrets = req.Secrets
	return nil
}

// secretValues resolves a team's secret references (environment variable
// → secret name) to their values now (variable → value). An unknown name
// is not_found, naming the secret and the variable. Callers put the values
// in a command's environment and hand them to the node for redaction
// (secretRedactions); they never store, log or return them.
func (s *Server) secretValues(ctx context.Context, teamID string, refs map[string]string) (map[string]string, error) {
	if len(refs) == 0 {
		return map[string]string{}, nil
	}
	if err := scoped(teamID); err != nil {
		return nil, err
	}
	kr, err := s.keyring()
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
		sec, err := s.store.GetSecret(ctx, teamID, name)
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

// secretRedactions lists the resolved values of refs as the node redacts
// them: [secret:NAME] in place of each.
func secretRedactions(refs, values map[string]string) []node.Secret {
	out := make([]node.Secret, 0, len(refs))
	for _, k := range slices.Sorted(maps.Keys(refs)) {
		if v, ok := values[k]; ok {
			out = append(out, node.Secret{Name: refs[k], Value: v})
		}
	}
	return out
}

// sandboxRedactions resolves, as they are now, the secrets a sandbox was
// given (its own and its commands'), for a node that starts recording its
// output again (wake, reattach). A secret deleted since is skipped: its
// value is gone.
func (s *Server) sandboxRedactions(ctx context.Context, sb api.Sandbox) []node.Secret {
	if s.cfg.Secrets == nil {
		return nil
	}
	names := map[string]bool{}
	for _, n := range sb.Secrets {
		names[n] = true
	}
	cmds, err := s.store.ListCommands(ctx, store.CommandFilter{SandboxID: sb.ID})
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
		v, err := s.secretValues(ctx, sb.TeamID, map[string]string{"_": n})
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

// RekeySecrets seals again, under the current key, every secret sealed
// under another key the server was given (an old key of a rotation), and
// reports how many. A secret sealed under a key it was not given fails
// the call: the server must not start without being able to open them.
func (s *Server) RekeySecrets(ctx context.Context) (int, error) {
	kr := s.cfg.Secrets
	if kr == nil {
		return 0, nil
	}
	list, err := s.store.ListSecrets(ctx, store.SecretFilter{NotKeyID: kr.CurrentID()})
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
		ok, err := s.store.RekeySecret(ctx, next, sec.Nonce)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}
