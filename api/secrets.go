package api

import "time"

// Secret describes a team's secret: its name and times. Its value is
// never returned by any call.
type Secret struct {
	// 1-128 letters, digits and '._-', starting with a letter or digit.
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// When the value was last put.
	UpdatedAt time.Time `json:"updated_at"`
}

// PutSecretRequest is the body of PUT /v1/secrets/{name}.
type PutSecretRequest struct {
	// The value: 1 byte to 32 KiB of UTF-8 without NUL. Sealed at rest
	// (AES-256-GCM); values of 8 bytes or more are redacted from recorded
	// output as [secret:NAME].
	Value string `json:"value"`
}
