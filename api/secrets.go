package api

import (
	"encoding/json"
	"time"
)

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

// SecretRef is what a sandbox's secret variable holds: the value of the
// team secret Secret, or with Placeholder a placeholder the network
// gateway replaces with that value in requests to a destination whose
// injection rule names the secret. On the wire it is the secret's name
// alone ("openai") or {"secret": "openai", "placeholder": true}.
type SecretRef struct {
	// the name of a team secret
	Secret string `json:"secret"`
	// give the variable a placeholder (cove_ph_…) instead of the value
	Placeholder bool `json:"placeholder,omitempty"`
}

// ShortForm describes the string a SecretRef may be instead of an object
// (the OpenAPI document's anyOf).
func (SecretRef) ShortForm() string {
	return "the name of a team secret: the variable holds its value"
}

// UnmarshalJSON takes a name or an object.
func (r *SecretRef) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		*r = SecretRef{}
		return json.Unmarshal(b, &r.Secret)
	}
	type plain SecretRef
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = SecretRef(p)
	return nil
}

// MarshalJSON writes the name alone unless the variable holds a
// placeholder.
func (r SecretRef) MarshalJSON() ([]byte, error) {
	if !r.Placeholder {
		return json.Marshal(r.Secret)
	}
	type plain SecretRef
	return json.Marshal(plain(r))
}

// SecretNames are the secret names of refs, by variable.
func SecretNames(refs map[string]SecretRef) map[string]string {
	if refs == nil {
		return nil
	}
	out := make(map[string]string, len(refs))
	for k, r := range refs {
		out[k] = r.Secret
	}
	return out
}

// SecretRefs are plain references (no placeholders) to the secrets
// names, by variable.
func SecretRefs(names map[string]string) map[string]SecretRef {
	if names == nil {
		return nil
	}
	out := make(map[string]SecretRef, len(names))
	for k, n := range names {
		out[k] = SecretRef{Secret: n}
	}
	return out
}
