package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
)

// AdminTeam is the name of the team created at first start; its keys may
// manage teams.
const AdminTeam = "admin"

const keyPrefix = "cove_"

var teamNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Principal is who a request acts as.
type Principal struct {
	Team  api.Team
	KeyID string
}

// Admin reports whether the principal may manage teams.
func (p Principal) Admin() bool { return p.Team.Name == AdminTeam }

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Authenticate finds the team of an API key.
func (s *Server) Authenticate(ctx context.Context, key string) (Principal, error) {
	unauth := api.Errorf(api.CodeUnauthenticated, "the API key is not valid; pass a valid key as 'Authorization: Bearer <key>'")
	if !strings.HasPrefix(key, keyPrefix) || len(key) > 128 {
		return Principal{}, unauth
	}
	k, err := s.store.KeyByHash(ctx, hashKey(key))
	if api.ErrorCode(err) == api.CodeNotFound {
		return Principal{}, unauth
	} else if err != nil {
		return Principal{}, err
	}
	t, err := s.store.GetTeam(ctx, k.TeamID)
	if err != nil {
		return Principal{}, err
	}
	return Principal{Team: t, KeyID: k.ID}, nil
}

// newKey makes and stores a key for a team; the plain key is returned once.
func (s *Server) newKey(ctx context.Context, teamID string) (store.Key, string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return store.Key{}, "", err
	}
	plain := keyPrefix + hex.EncodeToString(b[:])
	k := store.Key{ID: id.New("key"), TeamID: teamID, Hash: hashKey(plain), CreatedAt: s.now()}
	if err := s.store.CreateKey(ctx, k); err != nil {
		return store.Key{}, "", err
	}
	return k, plain, nil
}

// Bootstrap creates the admin team and its first key if there is no admin
// team yet. It returns the key when it made one, else "".
func (s *Server) Bootstrap(ctx context.Context) (string, error) {
	if _, err := s.store.GetTeamByName(ctx, AdminTeam); err == nil {
		return "", nil
	} else if api.ErrorCode(err) != api.CodeNotFound {
		return "", err
	}
	resp, err := s.createTeam(ctx, AdminTeam)
	if err != nil {
		return "", err
	}
	return resp.APIKey, nil
}

// CreateTeam makes a team with a first key; only the admin team may.
func (s *Server) CreateTeam(ctx context.Context, p Principal, req api.CreateTeamRequest) (api.CreateTeamResponse, error) {
	if !p.Admin() {
		return api.CreateTeamResponse{}, api.Errorf(api.CodePermissionDenied, "only the admin team may create teams")
	}
	if !teamNameRE.MatchString(req.Name) {
		return api.CreateTeamResponse{}, invalid("team name %q is invalid: use 1-63 lowercase letters, digits and '-'", req.Name)
	}
	return s.createTeam(ctx, req.Name)
}

func (s *Server) createTeam(ctx context.Context, name string) (api.CreateTeamResponse, error) {
	t := api.Team{
		ID: id.New("team"), Name: name, CreatedAt: s.now(),
		Admission:    s.cfg.DefaultAdmission,
		BudgetAlerts: slices.Clone(api.DefaultBudgetAlerts),
	}
	if name == AdminTeam {
		t.Admission = allAdmission
	}
	if err := s.store.CreateTeam(ctx, t); err != nil {
		if api.ErrorCode(err) == api.CodeConflict {
			return api.CreateTeamResponse{}, api.Errorf(api.CodeConflict, "a team named %s already exists", name)
		}
		return api.CreateTeamResponse{}, err
	}
	k, plain, err := s.newKey(ctx, t.ID)
	if err != nil {
		return api.CreateTeamResponse{}, err
	}
	s.log.Info("team created", "team", t.ID, "name", name)
	return api.CreateTeamResponse{Team: t, APIKey: plain, KeyID: k.ID}, nil
}

// ListTeams lists every team; only the admin team may.
func (s *Server) ListTeams(ctx context.Context, p Principal) ([]api.Team, error) {
	if !p.Admin() {
		return nil, api.Errorf(api.CodePermissionDenied, "only the admin team may list teams")
	}
	return s.store.ListTeams(ctx)
}

// CreateKey adds a key to a team; the admin team may do it for any team,
// other teams for themselves.
func (s *Server) CreateKey(ctx context.Context, p Principal, teamID string) (api.KeyResponse, error) {
	if !p.Admin() && p.Team.ID != teamID {
		return api.KeyResponse{}, api.Errorf(api.CodeNotFound, "team %s not found", teamID)
	}
	if _, err := s.store.GetTeam(ctx, teamID); err != nil {
		return api.KeyResponse{}, err
	}
	k, plain, err := s.newKey(ctx, teamID)
	if err != nil {
		return api.KeyResponse{}, err
	}
	return api.KeyResponse{KeyID: k.ID, TeamID: teamID, APIKey: plain}, nil
}

// RevokeKey revokes a key of the principal's team (any team's for admin).
func (s *Server) RevokeKey(ctx context.Context, p Principal, keyID string) error {
	if !p.Admin() {
		// A team may revoke only its own keys; others' are not found.
		k, err := s.store.GetKey(ctx, keyID)
		if err != nil || k.TeamID != p.Team.ID {
			return api.Errorf(api.CodeNotFound, "key %s not found", keyID)
		}
	}
	return s.store.RevokeKey(ctx, keyID)
}
