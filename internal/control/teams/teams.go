// Package teams is the control plane's room for who acts: teams and their
// API keys (stored hashed), authentication of a key into a Principal, the
// admission flags a team holds and the check that refuses a call lacking
// one, and the idempotency of mutating requests (a claim per team and
// Idempotency-Key, shared by every replica through the store). It works
// over the narrow Store it declares.
package teams

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
)

// AdminTeam is the name of the team created at first start; its keys may
// manage teams.
const AdminTeam = "admin"

// keyPrefixes are the shapes of keys by format: the prefix only helps a
// reader (and E2B's SDKs) tell a key when they see one; a key is found by
// its hash alone.
var keyPrefixes = map[string]string{api.KeyFormatCove: "cove_", api.KeyFormatE2B: "e2b_"}

var teamNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Principal is who a request acts as.
type Principal struct {
	Team  api.Team
	KeyID string
}

// Admin reports whether the principal may manage teams.
func (p Principal) Admin() bool { return p.Team.Name == AdminTeam }

// Store is what the service needs of the store: teams, keys and the
// idempotent answers.
type Store interface {
	CreateTeam(ctx context.Context, t api.Team) error
	GetTeam(ctx context.Context, id string) (api.Team, error)
	UpdateTeam(ctx context.Context, t api.Team) error
	GetTeamByName(ctx context.Context, name string) (api.Team, error)
	ListTeams(ctx context.Context) ([]api.Team, error)
	CreateKey(ctx context.Context, k store.Key) error
	KeyByHash(ctx context.Context, hash string) (store.Key, api.Team, error)
	GetKey(ctx context.Context, id string) (store.Key, error)
	RevokeKey(ctx context.Context, id string) error

	ClaimIdempotent(ctx context.Context, c store.IdempotencyClaim) (store.Idempotent, bool, error)
	CompleteIdempotent(ctx context.Context, teamID, key, owner string, status int, body []byte) error
	ReleaseIdempotent(ctx context.Context, teamID, key, owner string) error
	TakeOverIdempotent(ctx context.Context, teamID, key, deadOwner, newOwner string) (store.Idempotent, error)
	DeleteIdempotentBefore(ctx context.Context, t time.Time) error
}

// Config is what the service is told by the server's configuration.
type Config struct {
	// DefaultAdmission is what a new team (other than admin) may use.
	DefaultAdmission api.Admission
	// Limits are the resource limits every team has (TeamMe reports them).
	Limits api.TeamLimits
	// CheckAlerts checks and orders a team's budget alert thresholds
	// (the meter's rule, meter.ValidateBudgetAlerts); nil takes them as
	// given.
	CheckAlerts func([]float64) ([]float64, error)
	// Replica names this process among the control plane's replicas: the
	// owner of the idempotency claims it makes. Empty takes a fresh ID
	// per process. A claim of this ID that no request of this process
	// runs was left by an earlier run under the same ID, and is taken
	// over.
	Replica string
	// Keeper owns the writes that keep a successful idempotent answer
	// after it was given: the request is answered at once, and a retry
	// meanwhile on this replica is answered from memory. Nil keeps each
	// answer before it is given.
	Keeper *sync.WaitGroup
	// ReplicaAlive reports whether the replica named owner still runs, for
	// a request whose Idempotency-Key it claimed and has not answered:
	// while it runs the request is in flight, and once it died the claim
	// is taken over. Nil knows only this process (Replica) as alive: the
	// right answer for a single process.
	ReplicaAlive func(ctx context.Context, owner string) (bool, error)
}

// Service keeps teams, keys, admission and idempotent answers.
type Service struct {
	cfg Config
	st  Store
	log *slog.Logger
	now func() time.Time

	mu sync.Mutex
	// running holds the idempotency keys (team and key) whose requests
	// run in this process: a claim of this replica's ID missing here was
	// left by an earlier run of the replica under the same ID.
	running map[string]bool
	// keeping holds the answers given whose keeping in the store is
	// under way (Config.Keeper), by team and key, with their request's
	// hash: a retry meanwhile is answered from here.
	keeping map[string]keeping
}

// keeping is an answer given and being kept, and the request it answers.
type keeping struct {
	requestHash string
	answer      Answer
}

// New returns the service over st; now is its clock.
func New(cfg Config, st Store, log *slog.Logger, now func() time.Time) *Service {
	if cfg.Replica == "" {
		cfg.Replica = id.New("rep")
	}
	if cfg.ReplicaAlive == nil {
		self := cfg.Replica
		cfg.ReplicaAlive = func(_ context.Context, owner string) (bool, error) { return owner == self, nil }
	}
	return &Service{cfg: cfg, st: st, log: log, now: now, running: map[string]bool{}, keeping: map[string]keeping{}}
}

// SetReplica names this process among replicas sharing the store and
// tells how to know whether another is alive (Config's Replica and
// ReplicaAlive); call it before serving.
func (s *Service) SetReplica(id string, alive func(ctx context.Context, owner string) (bool, error)) {
	s.cfg.Replica, s.cfg.ReplicaAlive = id, alive
}

// HashKey is how keys (and other bearer tokens) are stored: the hex of
// their SHA-256.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

// Authenticate finds the team of an API key.
func (s *Service) Authenticate(ctx context.Context, key string) (Principal, error) {
	unauth := api.Errorf(api.CodeUnauthenticated, "the API key is not valid; pass a valid key as 'Authorization: Bearer <key>'")
	if key == "" || len(key) > 128 {
		return Principal{}, unauth
	}
	k, t, err := s.st.KeyByHash(ctx, HashKey(key))
	if api.ErrorCode(err) == api.CodeNotFound {
		return Principal{}, unauth
	} else if err != nil {
		return Principal{}, err
	}
	return Principal{Team: t, KeyID: k.ID}, nil
}

// newKey makes and stores a key for a team; the plain key is returned once.
func (s *Service) newKey(ctx context.Context, teamID, format string) (store.Key, string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return store.Key{}, "", err
	}
	plain := keyPrefixes[format] + hex.EncodeToString(b[:])
	k := store.Key{ID: id.New("key"), TeamID: teamID, Hash: HashKey(plain), CreatedAt: s.now()}
	if err := s.st.CreateKey(ctx, k); err != nil {
		return store.Key{}, "", err
	}
	return k, plain, nil
}

// Bootstrap creates the admin team and its first key if there is no admin
// team yet. It returns the key when it made one, else "".
func (s *Service) Bootstrap(ctx context.Context) (string, error) {
	if _, err := s.st.GetTeamByName(ctx, AdminTeam); err == nil {
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
func (s *Service) CreateTeam(ctx context.Context, p Principal, req api.CreateTeamRequest) (api.CreateTeamResponse, error) {
	if !p.Admin() {
		return api.CreateTeamResponse{}, api.Errorf(api.CodePermissionDenied, "only the admin team may create teams")
	}
	if !teamNameRE.MatchString(req.Name) {
		return api.CreateTeamResponse{}, invalid("team name %q is invalid: use 1-63 lowercase letters, digits and '-'", req.Name)
	}
	return s.createTeam(ctx, req.Name)
}

func (s *Service) createTeam(ctx context.Context, name string) (api.CreateTeamResponse, error) {
	t := api.Team{
		ID: id.New("team"), Name: name, CreatedAt: s.now(),
		Admission:    s.cfg.DefaultAdmission,
		BudgetAlerts: slices.Clone(api.DefaultBudgetAlerts),
	}
	if name == AdminTeam {
		t.Admission = All
	}
	if err := s.st.CreateTeam(ctx, t); err != nil {
		if api.ErrorCode(err) == api.CodeConflict {
			return api.CreateTeamResponse{}, api.Errorf(api.CodeConflict, "a team named %s already exists", name)
		}
		return api.CreateTeamResponse{}, err
	}
	k, plain, err := s.newKey(ctx, t.ID, api.KeyFormatCove)
	if err != nil {
		return api.CreateTeamResponse{}, err
	}
	s.log.Info("team created", "team", t.ID, "name", name)
	return api.CreateTeamResponse{Team: t, APIKey: plain, KeyID: k.ID}, nil
}

// ListTeams lists every team; only the admin team may.
func (s *Service) ListTeams(ctx context.Context, p Principal) ([]api.Team, error) {
	if !p.Admin() {
		return nil, api.Errorf(api.CodePermissionDenied, "only the admin team may list teams")
	}
	return s.st.ListTeams(ctx)
}

// CreateKey adds a key of the format asked for to a team; the admin team
// may do it for any team, other teams for themselves.
func (s *Service) CreateKey(ctx context.Context, p Principal, teamID string, req api.CreateKeyRequest) (api.KeyResponse, error) {
	if !p.Admin() && p.Team.ID != teamID {
		return api.KeyResponse{}, api.Errorf(api.CodeNotFound, "team %s not found", teamID)
	}
	format := req.Format
	if format == "" {
		format = api.KeyFormatCove
	}
	if _, ok := keyPrefixes[format]; !ok {
		return api.KeyResponse{}, invalid("key format %q is unknown: use %q or %q", req.Format, api.KeyFormatCove, api.KeyFormatE2B)
	}
	if _, err := s.st.GetTeam(ctx, teamID); err != nil {
		return api.KeyResponse{}, err
	}
	k, plain, err := s.newKey(ctx, teamID, format)
	if err != nil {
		return api.KeyResponse{}, err
	}
	return api.KeyResponse{KeyID: k.ID, TeamID: teamID, APIKey: plain}, nil
}

// RevokeKey revokes a key of the principal's team (any team's for admin).
func (s *Service) RevokeKey(ctx context.Context, p Principal, keyID string) error {
	if !p.Admin() {
		// A team may revoke only its own keys; others' are not found.
		k, err := s.st.GetKey(ctx, keyID)
		if err != nil || k.TeamID != p.Team.ID {
			return api.Errorf(api.CodeNotFound, "key %s not found", keyID)
		}
	}
	return s.st.RevokeKey(ctx, keyID)
}
