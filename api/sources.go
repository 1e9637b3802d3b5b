package api

import "time"

// Source types (API.md "Sandboxes": source).
const (
	SourceEmpty  = "empty"
	SourceUpload = "upload"
	SourceAsset  = "asset"
	SourceGit    = "git"
)

// Source is what a sandbox's workdir starts with. upload: the sandbox
// waits in creating for its archive (PUT /v1/sandboxes/{ref}/files/archive,
// path left out or the workdir). asset: the asset's archive is extracted
// (digest-checked). git: the node clones the repository (only its
// host:port reachable, through the gateway) and the tree with .git lands
// in the workdir. On a sandbox, digest is the sha-256 (hex) of what
// landed: the uploaded archive, the asset, or the commit a git source
// resolved to.
type Source struct {
	// empty (default), upload, asset or git.
	Type string `json:"type" schema:"enum=,empty,upload,asset,git,snapshot"`
	// For type asset: an asset of the team (404 otherwise).
	AssetID string `json:"asset_id,omitempty"`
	// For type snapshot: a snapshot of the team, by ID or name (404
	// otherwise); the sandbox starts on its files.
	SnapshotID string `json:"snapshot_id,omitempty"`
	// For type git: http(s), without credentials, naming a host (not an
	// address).
	URL string `json:"url,omitempty"`
	// For type git: a branch, tag or commit.
	Ref string `json:"ref,omitempty"`
	// For type git: a shallow clone of this many commits.
	Depth int `json:"depth,omitempty"`
	// For type git: the name of a team secret holding the token; 422 while
	// secrets are not configured.
	AuthSecret string `json:"auth_secret,omitempty"`
	// Set by the server: the sha-256 (hex) of the archive or asset that
	// landed, or the commit of a git source.
	Digest string `json:"digest,omitempty" schema:"readOnly"`
}

// Setup is a command run once after the source landed, before the sandbox
// is running: state setting_up, a recorded command (setup_command_id) as
// user in the workdir, under network (the sandbox's own policy again once
// it ends). Exit 0 → running; another exit or the timeout → failed, its
// output kept until the sandbox is deleted.
type Setup struct {
	// A shell string.
	Command string            `json:"command"`
	Network *NetworkPolicy    `json:"network,omitempty" schema:"ref=NetworkPolicyRequest"`
	Env     map[string]string `json:"env,omitempty"`
	// Environment variable → team secret name; 422 while secrets are not
	// configured.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Default 1800.
	TimeoutS int64 `json:"timeout_s,omitempty"`
	// Save the finished disk (once the setup succeeded) under a key of
	// template, disk size, workdir, source digest and setup, and start the
	// next create of the team with the same key from it (setup_cached, no
	// setup command). Per team bounded, least recently used evicted first.
	Cache bool `json:"cache,omitempty"`
}

// Provision is how a sandbox's files were made: embedded in Sandbox.
type Provision struct {
	Source *Source `json:"source,omitempty"`
	Setup  *Setup  `json:"setup,omitempty"`
	// The recorded command that ran the setup.
	SetupCommandID string `json:"setup_command_id,omitempty"`
	// The sandbox started from a cached setup; its setup command did not
	// run.
	SetupCached bool `json:"setup_cached,omitempty"`
}

// Asset is an archive of a folder (tar or tar.gz) kept by the team,
// content-addressed: the same bytes are stored once per team.
type Asset struct {
	ID     string `json:"id"`
	TeamID string `json:"team_id"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	// hex
	SHA256    string    `json:"sha256"`
	CreatedAt time.Time `json:"created_at"`
}

// SaveAssetRequest is the body of POST /v1/sandboxes/{ref}/assets.
type SaveAssetRequest struct {
	// An absolute folder in the sandbox.
	Path string `json:"path"`
	Name string `json:"name" schema:"optional"`
}
