package store

import "github.com/cove-dev/cove/api"

// UpdateAttempts bounds the rounds of one read-modify-write of a
// versioned row (see Store) that other writers keep changing: each round
// reads the row, decides and writes it at the version read. A change that
// loses every round answers the last conflict to its caller, who may
// retry it whole (409 conflict is retryable).
const UpdateAttempts = 5

// Stale reports whether err is a versioned update's refusal: the row
// changed since it was read (or, for a sandbox, its name is taken; a
// round that reads it again finds that out and answers it).
func Stale(err error) bool { return api.ErrorCode(err) == api.CodeConflict }
