package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// runc runs the OCI runtime binary with --root.
type runc struct {
	path string
	root string
}

// runcState is the part of `runc state` we use.
type runcState struct {
	ID     string `json:"id"`
	PID    int    `json:"pid"`
	Status string `json:"status"` // creating, created, running, paused, stopped
	Bundle string `json:"bundle"`
}

func (r runc) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.path, append([]string{"--root", r.root}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs runc with args and returns its stdout; on failure the error
// holds its stderr.
func (r runc) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := r.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2048 {
			msg = msg[len(msg)-2048:]
		}
		return stdout.Bytes(), fmt.Errorf("runc %s: %w: %s", args[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// known reports whether runc may know container id: runc keeps each
// container it knows in a directory of its root named for it, made at
// create and removed at delete. Looking there spares starting runc for a
// container that is gone (twice: a failed `state`, then `list`, which
// reads every container's state on a host of thousands).
func (r runc) known(id string) (bool, error) {
	_, err := os.Lstat(filepath.Join(r.root, id))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// forget removes what is left of container id in runc's root once runc
// does not know it: a runc killed while creating it leaves a directory
// runc itself no longer lists or deletes.
func (r runc) forget(id string) error {
	if err := os.RemoveAll(filepath.Join(r.root, id)); err != nil {
		return fmt.Errorf("remove runc's leftover of %s: %w", id, err)
	}
	return nil
}

// state returns the state of container id; ok is false when runc does not
// know it.
func (r runc) state(ctx context.Context, id string) (st runcState, ok bool, err error) {
	if known, err := r.known(id); err == nil && !known {
		return runcState{}, false, nil
	}
	out, err := r.run(ctx, "state", id)
	if err != nil {
		// runc says "does not exist" only in prose: look again, and ask
		// for the list only when its directory is there.
		if known, kerr := r.known(id); kerr == nil && !known {
			return runcState{}, false, nil
		}
		ids, lerr := r.list(ctx)
		if lerr != nil {
			return runcState{}, false, fmt.Errorf("%w (and %w)", err, lerr)
		}
		if !slices.Contains(ids, id) {
			return runcState{}, false, nil
		}
		return runcState{}, false, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return runcState{}, false, fmt.Errorf("runc state %s: %w", id, err)
	}
	return st, true, nil
}

// list returns the IDs of the containers runc knows.
func (r runc) list(ctx context.Context) ([]string, error) {
	if _, err := os.Stat(r.root); os.IsNotExist(err) {
		return nil, nil // runc has not run a container yet
	}
	out, err := r.run(ctx, "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var states []runcState
	if err := json.Unmarshal(out, &states); err != nil { // "null" when empty
		return nil, fmt.Errorf("runc list: %w", err)
	}
	ids := make([]string, 0, len(states))
	for _, st := range states {
		ids = append(ids, st.ID)
	}
	return ids, nil
}
