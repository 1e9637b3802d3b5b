package api

import "time"

// Secret describes a team's secret: its name and times. Its value is
// never returned by any call.
type Secret struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PutSecretRequest is the body of PUT /v1/secrets/{name}.
type PutSecretRequest struct {
	Value string `json:"value"`
}
