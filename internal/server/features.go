package server

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/teams"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/webhooks"
)

// The feature services the server builds from its configuration (teams
// with admission and idempotency, the secrets' vault, the webhooks), and
// the small calls through which the core uses them.

// Names the API and the CLI know the teams' types by.
type (
	// Principal is who a request acts as.
	Principal = teams.Principal
	// Answer is a response to replay for an Idempotency-Key.
	Answer = teams.Answer
)

// AdminTeam is the name of the team created at first start.
const AdminTeam = teams.AdminTeam

// AdmissionFlags are the names of the admission flags.
var AdmissionFlags = teams.AdmissionFlags

// ParseAdmission reads a comma-separated list of admission flags.
func ParseAdmission(s string) (api.Admission, error) { return teams.ParseAdmission(s) }

// admission flags, as the core checks them.
const (
	admitManaged = teams.AdmitManaged
	admitPreview = teams.AdmitPreview
	admitImages  = teams.AdmitImages
	admitGPU     = teams.AdmitGPU
)

// newServices builds the feature services from the configuration; their
// clock is the server's (SetClock reaches them).
func (s *Server) newServices() {
	clock := func() time.Time { return s.now() }
	s.teams = teams.New(teams.Config{
		DefaultAdmission: s.cfg.DefaultAdmission,
		Limits: api.TeamLimits{
			DefaultResources: s.cfg.DefaultResources, MaxResources: s.cfg.MaxResources,
			PidsLimit: s.cfg.PidsLimit,
		},
	}, s.store, s.log, clock)
	s.vault = vault.New(vault.Config{Keyring: s.cfg.Secrets, MaxEnv: maxEnv, MaxValue: maxEnvValue}, s.store, s.log, clock)
	s.hooks = webhooks.NewService(webhooks.ServiceConfig{AllowPrivate: s.cfg.WebhookAllowPrivate}, s.store, s.vault, s.log, clock)
}

// Teams is the teams' service: keys, authentication, admission,
// idempotency.
func (s *Server) Teams() *teams.Service { return s.teams }

// Vault is the teams' secrets.
func (s *Server) Vault() *vault.Service { return s.vault }

// Webhooks is the teams' webhooks.
func (s *Server) Webhooks() *webhooks.Service { return s.hooks }

// Bootstrap creates the admin team and its first key if there is none.
func (s *Server) Bootstrap(ctx context.Context) (string, error) { return s.teams.Bootstrap(ctx) }

// Authenticate finds the team of an API key.
func (s *Server) Authenticate(ctx context.Context, key string) (Principal, error) {
	return s.teams.Authenticate(ctx, key)
}

// CreateTeam makes a team with a first key; only the admin team may.
func (s *Server) CreateTeam(ctx context.Context, p Principal, req api.CreateTeamRequest) (api.CreateTeamResponse, error) {
	return s.teams.CreateTeam(ctx, p, req)
}

// TeamMe describes the principal's own team: its admission and limits.
func (s *Server) TeamMe(ctx context.Context, p Principal) (api.TeamMe, error) {
	return s.teams.TeamMe(ctx, p)
}

func hashKey(key string) string { return teams.HashKey(key) }

func effectiveAdmission(t api.Team) api.Admission { return teams.Effective(t) }

func hasAdmission(a api.Admission, flag string) bool { return teams.Has(a, flag) }

func checkAdmissionChange(t api.Team, a *api.Admission) error {
	return teams.CheckAdmissionChange(t, a)
}

func (s *Server) requireAdmission(ctx context.Context, teamID, flag string) error {
	return s.teams.RequireAdmission(ctx, teamID, flag)
}

// templateAdmission is the flag a template needs: every template the
// server ships (the managed image and the images in its images dir) is a
// managed environment; an imported image (as team teamID names it) needs
// custom_images.
func (s *Server) templateAdmission(teamID, tmpl string) string {
	if _, ok := s.image(teamID, tmpl); ok {
		return admitImages
	}
	return admitManaged
}

func (s *Server) expireIdempotent(ctx context.Context) { s.teams.ExpireIdempotent(ctx) }

func checkSecretRefs(what string, refs, env map[string]string) error {
	return vault.CheckRefs(what, refs, env, maxEnv)
}

func (s *Server) execSecrets(ctx context.Context, sb api.Sandbox, req api.CreateCommandRequest, cmd *api.Command, spec *node.ExecSpec) error {
	return s.vault.Exec(ctx, sb, req, cmd, spec)
}

func (s *Server) secretValues(ctx context.Context, teamID string, refs map[string]string) (map[string]string, error) {
	return s.vault.Values(ctx, teamID, refs)
}

func (s *Server) sandboxRedactions(ctx context.Context, sb api.Sandbox) []node.Secret {
	return s.vault.SandboxRedactions(ctx, sb)
}
