package local

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/output"
)

// The node keeps a command's output log open only while it is in use: by
// its recorder while the command runs, and by each reader until the
// reader closes it. The last one out closes the files, so descriptors
// follow what runs and what is being read, not every command there was.

// logEntry is an open log and how many holders it has.
type logEntry struct {
	log  *output.Log
	refs int
}

// logRef is one hold on an open log; Close releases it once.
type logRef struct {
	*output.Log
	n    *Node
	key  string
	once sync.Once
}

var _ node.Output = (*logRef)(nil)

// Close releases the hold.
func (r *logRef) Close() error {
	r.once.Do(func() { r.n.release(r.key) })
	return nil
}

func logKey(sandboxID, commandID string) string { return sandboxID + "/" + commandID }

// acquire holds the log of a command, opening it if no one holds it. With
// create, a log that does not exist yet is made (a command starting, or
// one being marked lost); without, a log that is gone is not_found and
// nothing is recreated.
func (n *Node) acquire(sandboxID, commandID string, create bool) (*logRef, error) {
	key := logKey(sandboxID, commandID)
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.logs[key]
	if !ok {
		dir := filepath.Join(n.outputDir(sandboxID), commandID)
		var l *output.Log
		var err error
		budget := n.budgetLocked(sandboxID)
		if create {
			l, err = n.spares.Open(dir, n.cfg.OutputMaxBytes, budget)
		} else {
			l, err = output.OpenExisting(dir, n.cfg.OutputMaxBytes, budget)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, api.Errorf(api.CodeNotFound, "the output of command %s is no longer kept (its sandbox was terminated)", commandID)
		}
		if err != nil {
			return nil, err
		}
		e = &logEntry{log: l}
		n.logs[key] = e
	}
	e.refs++
	return &logRef{Log: e.log, n: n, key: key}, nil
}

// budgetLocked is the output budget of a sandbox, shared by all its
// commands' logs; what its logs already hold on disk (from before a
// restart or a sleep) is spent. n.mu is held.
func (n *Node) budgetLocked(sandboxID string) *output.Budget {
	if n.cfg.SandboxOutputMaxBytes <= 0 {
		return nil
	}
	if b, ok := n.budgets[sandboxID]; ok {
		return b
	}
	var used int64
	filepath.WalkDir(n.outputDir(sandboxID), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				used += fi.Size()
			}
		}
		return nil
	})
	b := output.NewBudget(n.cfg.SandboxOutputMaxBytes, used)
	n.budgets[sandboxID] = b
	return b
}

// release drops one hold; the last closes the log's files.
func (n *Node) release(key string) {
	n.mu.Lock()
	e, ok := n.logs[key]
	if !ok {
		n.mu.Unlock()
		return // closed with its sandbox
	}
	e.refs--
	if e.refs > 0 {
		n.mu.Unlock()
		return
	}
	delete(n.logs, key)
	n.mu.Unlock()
	if err := e.log.Close(); err != nil {
		n.log.Warn("close output log", "log", key, "err", err)
	}
}

// closeLogs closes every open log of a sandbox, whoever holds it: its
// readers see the log end.
func (n *Node) closeLogs(sandboxID string) {
	prefix := sandboxID + "/"
	n.mu.Lock()
	delete(n.budgets, sandboxID)
	var closing []*output.Log
	for key, e := range n.logs {
		if strings.HasPrefix(key, prefix) {
			closing = append(closing, e.log)
			delete(n.logs, key)
		}
	}
	n.mu.Unlock()
	for _, l := range closing {
		l.Close()
	}
}
