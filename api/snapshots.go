package api

import "time"

// SourceSnapshot starts a sandbox on a snapshot's files (Source.SnapshotID).
const SourceSnapshot = "snapshot"

// Snapshot is a sandbox's files frozen at one moment, kept by the team
// (POST /v1/sandboxes/{ref}/snapshots): new sandboxes start on it
// (source type snapshot, fork) and a sandbox returns to it (restore).
// Its files are stored once, in the save store, and every sandbox on it
// shares them read-only beneath its own disk.
type Snapshot struct {
	ID     string `json:"id"`
	TeamID string `json:"team_id"`
	Name   string `json:"name"`
	// The sandbox whose files it froze.
	SandboxID string `json:"sandbox_id"`
	// Bytes it takes in the save store (compressed), charged as storage.
	SizeBytes int64 `json:"size_bytes"`
	// Bytes of data its disk held (before compression).
	DataBytes int64 `json:"data_bytes"`
	// "sha256:<hex>" of its stored content.
	Digest string `json:"digest"`
	// Set on the snapshot a fork makes of its parent.
	Fork      bool      `json:"fork,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateSnapshotRequest is the body of POST /v1/sandboxes/{ref}/snapshots.
type CreateSnapshotRequest struct {
	// Unique in the team; 1 to 63 of [a-z0-9-], as a sandbox's name.
	Name string `json:"name"`
}

// RestoreSandboxRequest is the body of POST /v1/sandboxes/{ref}/restore.
type RestoreSandboxRequest struct {
	// A snapshot of the team, by ID or name.
	SnapshotID string `json:"snapshot_id"`
}

// ForkSandboxRequest is the body of POST /v1/sandboxes/{ref}/fork.
type ForkSandboxRequest struct {
	// How many sandboxes to make, 1 to the server's --max-fork (100 by
	// default).
	Count int `json:"count"`
	// Names of the new sandboxes, count of them; default none.
	Names []string `json:"names,omitempty"`
	// Labels of every new sandbox; default the parent's.
	Labels map[string]string `json:"labels,omitempty"`
}

// ForkResult answers POST /v1/sandboxes/{ref}/fork: the new sandboxes.
type ForkResult struct {
	Items []Sandbox `json:"items"`
}
