package store

import (
	"slices"

	"github.com/cove-dev/cove/api"
)

// SecretRefs is how a sandbox's secrets are kept in its secrets column:
// variable → the secret's name, as a string, or {"secret", "placeholder"}
// for a variable that holds a placeholder (api.SecretRef's JSON). Rows
// written before placeholders read the same.
func SecretRefs(sb api.Sandbox) map[string]api.SecretRef {
	out := make(map[string]api.SecretRef, len(sb.Secrets))
	for k, n := range sb.Secrets {
		out[k] = api.SecretRef{Secret: n, Placeholder: slices.Contains(sb.Placeholders, k)}
	}
	return out
}

// SetSecretRefs sets a sandbox's secrets and placeholders from its
// secrets column.
func SetSecretRefs(sb *api.Sandbox, refs map[string]api.SecretRef) {
	sb.Secrets = api.SecretNames(refs)
	sb.Placeholders = nil
	for k, r := range refs {
		if r.Placeholder {
			sb.Placeholders = append(sb.Placeholders, k)
		}
	}
	slices.Sort(sb.Placeholders)
}
