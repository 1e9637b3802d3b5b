package api

import "time"

// Source types (API.md "Sandboxes": source).
const (
	SourceEmpty  = "empty"
	SourceUpload = "upload"
	SourceAsset  = "asset"
	SourceGit    = "git"
)

// Source is what a sandbox's workdir starts with. On a sandbox, Digest is
// the sha-256 (hex) of what landed: the uploaded archive, the asset, or
// the commit a git source resolved to.
type Source struct {
	Type       string `json:"type"`
	AssetID    string `json:"asset_id,omitempty"`
	URL        string `json:"url,omitempty"`
	Ref        string `json:"ref,omitempty"`
	Depth      int    `json:"depth,omitempty"`
	AuthSecret string `json:"auth_secret,omitempty"`
	Digest     string `json:"digest,omitempty"`
}

// Setup is a command run once, after the source landed and before the
// sandbox is running, under its own network policy.
type Setup struct {
	Command string            `json:"command"`
	Network *NetworkPolicy    `json:"network,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Secrets maps environment variable names to the team's secret names.
	Secrets  map[string]string `json:"secrets,omitempty"`
	TimeoutS int64             `json:"timeout_s,omitempty"`
	// Cache saves the disk once the setup succeeded, under a key of the
	// template, the source's digest and this setup, for the next create
	// with the same key to start from.
	Cache bool `json:"cache,omitempty"`
}

// Provision is how a sandbox's files were made: embedded in Sandbox.
type Provision struct {
	Source *Source `json:"source,omitempty"`
	Setup  *Setup  `json:"setup,omitempty"`
	// SetupCommandID is the recorded command that ran the setup.
	SetupCommandID string `json:"setup_command_id,omitempty"`
	// SetupCached says the sandbox started from a cached setup: the setup
	// command did not run.
	SetupCached bool `json:"setup_cached,omitempty"`
}

// Asset is a stored archive of a folder, content-addressed: the same bytes
// are stored once per team.
type Asset struct {
	ID        string    `json:"id"`
	TeamID    string    `json:"team_id"`
	Name      string    `json:"name"`
	Size      int64     `json:"size"`
	SHA256    string    `json:"sha256"`
	CreatedAt time.Time `json:"created_at"`
}

// SaveAssetRequest is the body of POST /v1/sandboxes/{ref}/assets.
type SaveAssetRequest struct {
	Path string `json:"path"`
	Name string `json:"name"`
}
