package node

import "github.com/cove-dev/cove/api"

// Observation is what the node saw a sandbox do on the network since it
// last handed its reports over: counts and bytes to add to what the control
// plane keeps, first and last seen in that time, and the command found for
// the latest connection, if any (a claim of the sandbox's agent, which the
// control plane checks against the sandbox's commands).
type Observation struct {
	SandboxID string
	api.NetworkObservation
}
