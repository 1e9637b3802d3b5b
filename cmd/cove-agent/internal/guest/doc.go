// Package guest is cove-agent's side of the agent protocol (package wire):
// the server that runs inside every sandbox as its init, starts and reaps
// its commands, keeps their output until the host acknowledges it, and
// answers the file calls in the sandbox's own root.
//
// It lives under cmd/cove-agent so that only the agent's binary links it;
// the host talks to it through package client and shares only package wire
// with it.
package guest
