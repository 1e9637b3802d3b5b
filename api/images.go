package api

import "time"

// Image admission modes: who may use an imported image.
const (
	// ImageAdmitOwner: only the team that imported it (the default).
	ImageAdmitOwner = "owner"
	// ImageAdmitTeams: the owner and the teams listed.
	ImageAdmitTeams = "teams"
	// ImageAdmitAll: every team; only admins set it.
	ImageAdmitAll = "all"
)

// Image is an image imported from an OCI artifact (POST /v1/images),
// usable as a sandbox's template by its name.
type Image struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Template is how the calling team names the image as a sandbox's or
	// workload's template: Name for its own image, TEAM/NAME (the owner
	// team's name) for another team's. Names are unique per team.
	Template string `json:"template"`
	TeamID   string `json:"team_id"`
	// The manifest's digest (sha256:…): the same image is stored once.
	Digest    string `json:"digest"`
	SizeBytes int64  `json:"size_bytes"`
	// Config is what the image's OCI config says; entrypoint and cmd are
	// recorded, never run (the sandbox's PID 1 is cove-agent).
	Config    ImageConfig    `json:"config"`
	Defaults  ImageDefaults  `json:"defaults"`
	Limits    ImageLimits    `json:"limits"`
	Admission ImageAdmission `json:"admission"`
	// Examples are commands the console offers for this image.
	Examples  []string  `json:"examples"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ImageConfig is an image's own configuration, what its OCI config says;
// entrypoint and cmd are recorded, never run (the sandbox's PID 1 is
// cove-agent).
type ImageConfig struct {
	Env        []string          `json:"env"`
	WorkingDir string            `json:"working_dir"`
	User       string            `json:"user"`
	Entrypoint []string          `json:"entrypoint"`
	Cmd        []string          `json:"cmd"`
	Labels     map[string]string `json:"labels"`
	// The uid User names (resolved in the image's /etc/passwd); commands
	// run as it unless they ask for root.
	UID int `json:"uid"`
	// The gid User names.
	GID  int    `json:"gid"`
	Home string `json:"home"`
	// Runs a command string: /bin/bash -c, else /bin/sh -c; [] when the
	// image has no shell (then only argv runs).
	Shell []string `json:"shell"`
}

// ImageDefaults apply to a sandbox of the image when its create names
// none.
type ImageDefaults struct {
	Resources    *ResourcesRequest `json:"resources,omitempty"`
	Network      *NetworkPolicy    `json:"network,omitempty"`
	IdleTimeoutS *int64            `json:"idle_timeout_s,omitempty"`
	MaxLifetimeS *int64            `json:"max_lifetime_s,omitempty"`
}

// ImageLimits bound what a sandbox of the image may ask for.
type ImageLimits struct {
	MaxResources *ResourcesRequest `json:"max_resources,omitempty"`
}

// ImageAdmission says which teams may see and use an image.
type ImageAdmission struct {
	// owner: its team only; teams: its team and those listed; all: every team
	// (admins only)
	Mode string `json:"mode" schema:"enum=owner,teams,all"`
	// team IDs, for mode teams
	Teams []string `json:"teams" schema:"optional"`
}

// ImageSettings are the settings cove keeps of an image: given at import (the
// `settings` query parameter, as JSON) or by PATCH /v1/images/{id}. A
// field left out keeps its value.
type ImageSettings struct {
	Defaults  *ImageDefaults  `json:"defaults,omitempty"`
	Limits    *ImageLimits    `json:"limits,omitempty"`
	Admission *ImageAdmission `json:"admission,omitempty"`
	// commands the console offers for this image
	Examples []string `json:"examples,omitempty"`
}
