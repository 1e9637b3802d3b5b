package api

// TeamLimits are the bounds a team's sandboxes live within.
type TeamLimits struct {
	DefaultResources Resources `json:"default_resources"`
	MaxResources     Resources `json:"max_resources"`
	PidsLimit        int64     `json:"pids_limit"`
}

// TeamMe answers GET /v1/teams/me: the key's own team, what it is
// admitted to, and its limits.
type TeamMe struct {
	Team     Team       `json:"team"`
	Admin    bool       `json:"admin"`
	Admitted []string   `json:"admitted"`
	Limits   TeamLimits `json:"limits"`
}
