package store

import (
	"context"
	"time"
)

// Secrets keeps teams' secrets, sealed: the store never sees a value.
type Secrets interface {
	// PutSecret stores a secret, replacing the sealed value of the team's
	// secret of that name (whose CreatedAt stays); it reports whether it
	// created one. An unknown team is CodeNotFound.
	PutSecret(ctx context.Context, s Secret) (created bool, err error)
	GetSecret(ctx context.Context, teamID, name string) (Secret, error)
	// ListSecrets lists secrets by team and name; TeamID "" lists every
	// team's (for rotating the key at start, never for a request).
	ListSecrets(ctx context.Context, f SecretFilter) ([]Secret, error)
	DeleteSecret(ctx context.Context, teamID, name string) error
	// RekeySecret replaces a secret's sealed value by s's if it is still
	// sealed with the nonce prev (a PUT since wins); it keeps UpdatedAt.
	// It reports whether it replaced it.
	RekeySecret(ctx context.Context, s Secret, prev []byte) (bool, error)
}

// Secret is a stored secret: its value sealed under the key KeyID.
type Secret struct {
	TeamID     string
	Name       string
	KeyID      string
	Nonce      []byte
	Ciphertext []byte
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// SecretFilter selects secrets ordered by team and name, after the name
// After (within TeamID), Limit 0 meaning no limit. NotKeyID, when set,
// skips secrets sealed under that key.
type SecretFilter struct {
	TeamID   string
	NotKeyID string
	After    string
	Limit    int
}
