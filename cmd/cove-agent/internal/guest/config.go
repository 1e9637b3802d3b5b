package guest

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// Defaults of ServerConfig.
const (
	// DefaultMaxBuffer bounds each command's unacknowledged output.
	DefaultMaxBuffer = 8 << 20
	// DefaultExitGrace is how long output is still read after the main
	// process of a command exited, when a background process keeps it open.
	DefaultExitGrace = 2 * time.Second
	// minMaxBuffer keeps the buffer above what the host's client reads before it
	// acknowledges (wire.AckBytes), or a reader and the agent would wait on
	// each other.
	minMaxBuffer = 2 * wire.AckBytes
)

// ServerConfig configures cove-agent's server.
type ServerConfig struct {
	// Workdir is created when serving starts, owned by UID:GID, and is the
	// working directory of commands that name none. cove-agent's default:
	// /workspace.
	Workdir string
	// UID and GID own Workdir (the sandbox's default user; cove-agent's
	// default: 1000).
	UID, GID int
	// MaxBuffer bounds the unacknowledged output kept for each command, in
	// FrameCost units; when full, the command's writes block. 0 means
	// DefaultMaxBuffer; otherwise at least 2 MiB.
	MaxBuffer int
	// ExitGrace: 0 means DefaultExitGrace.
	ExitGrace time.Duration
}

// Validate reports the first problem of c.
func (c ServerConfig) Validate() error {
	switch {
	case c.Workdir == "" || !filepath.IsAbs(c.Workdir):
		return fmt.Errorf("workdir %q must be an absolute path", c.Workdir)
	case c.UID < 0 || c.GID < 0:
		return errors.New("uid and gid must not be negative")
	case c.MaxBuffer != 0 && c.MaxBuffer < minMaxBuffer:
		return fmt.Errorf("max buffer %d must be at least %d", c.MaxBuffer, minMaxBuffer)
	case c.ExitGrace < 0:
		return errors.New("exit grace must not be negative")
	}
	return nil
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxBuffer == 0 {
		c.MaxBuffer = DefaultMaxBuffer
	}
	if c.ExitGrace == 0 {
		c.ExitGrace = DefaultExitGrace
	}
	return c
}
