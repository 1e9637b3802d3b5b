package service

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Listeners are the addresses the service bound, by name: "api",
// "gateway", "dns" (the last two unless the network is disabled). A
// listener added later (preview, metrics, MCP) binds before the API
// serves and adds its own name, so the ready file and GET /healthz report
// it too. Complete before serving, then only read.
type Listeners map[string]string

// Ready is what the ready file holds.
type Ready struct {
	PID       int       `json:"pid"`
	Listeners Listeners `json:"listeners"`
}

// writeReady writes the ready file atomically: a reader sees no file or
// the whole of it.
func writeReady(path string, r Ready) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ready-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// removeReady removes the ready file; one left by a process that did not
// stop gracefully must not say that a new one serves.
func removeReady(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
