package api

import "time"

// Volume is a team's disk that outlives sandboxes: several sandboxes
// mount it at once (CreateSandboxRequest.Volumes) and see each other's
// writes. Its files are owned as in the sandbox that wrote them (user's
// are user's in the next sandbox too), and its size is a quota: a write
// past it fails with ENOSPC inside, and volume.full is raised.
type Volume struct {
	// vol_…
	ID     string `json:"id"`
	TeamID string `json:"team_id"`
	// Unique in the team; 1 to 63 of [a-z0-9-], as a sandbox's name.
	Name string `json:"name"`
	// The quota, charged as storage whether used or not.
	SizeMiB int64 `json:"size_mib"`
	// Bytes its files take, as last measured; 0 before the first
	// measurement.
	UsedBytes int64 `json:"used_bytes"`
	// The sandboxes, not terminated, that mount it.
	Sandboxes []string `json:"sandboxes"`
	// The node that holds its files, shown to the admin team only, in a
	// fleet; a sandbox that mounts it is placed there.
	Node      string    `json:"node,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	// Unique in the team; 1 to 63 of [a-z0-9-], as a sandbox's name.
	Name string `json:"name" schema:"pattern=^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"`
	// The quota in MiB, from 16 up to the server's --max-volume-mib.
	SizeMiB int64 `json:"size_mib" schema:"minimum=16"`
}

// VolumeMount mounts a volume of the team in a sandbox
// (CreateSandboxRequest.Volumes, Sandbox.Volumes).
type VolumeMount struct {
	// The volume, by name or ID.
	Name string `json:"name"`
	// Where it appears: an absolute, clean path (no "..", no trailing
	// "/"), not /, not on or under /proc, /sys, /dev or /.cove, and not
	// on, under or above one of cove's own mounts (/etc/resolv.conf,
	// /etc/hosts, /etc/hostname, /etc/ssl/certs/ca-certificates.crt); two
	// mounts of a sandbox never nest. Anything else answers 400
	// invalid_argument with details.field.
	Path string `json:"path"`
	// Mounted read-only: writes fail with EROFS inside.
	ReadOnly bool `json:"read_only,omitempty"`
	// vol_…, set by the server.
	VolumeID string `json:"volume_id,omitempty"`
}
