// Package fleetwire is the protocol between a node and the control plane's
// node listener (`cove control --node-listen`): a node joins with a join
// token, registers again with the certificate it was given, renews that
// certificate and sends heartbeats. Every body is JSON over TLS; errors are
// api.Error bodies. It holds types only, for both sides.
package fleetwire

import "github.com/cove-dev/cove/internal/node"

// Paths on the node listener. Join is the only call made without a node
// certificate: its TLS server is trusted by the CA fingerprint the token
// carries. The others need the node's certificate (mutual TLS) and act
// only for the node that certificate names.
const (
	PathJoin      = "/fleet/v1/join"      // JoinRequest → Admission
	PathRegister  = "/fleet/v1/register"  // Registration → Admission
	PathRenew     = "/fleet/v1/renew"     // RenewRequest → RenewAnswer
	PathHeartbeat = "/fleet/v1/heartbeat" // Heartbeat → HeartbeatAnswer
)

// The identities certificates carry, as URI subject alternative names: the
// control plane's (its client certificate towards nodes, its server
// certificate on the node listener) and each node's (its server
// certificate on its node API, its client certificate towards the node
// listener).
const (
	ControlURI    = "cove://control"
	NodeURIPrefix = "cove://node/"
)

// NodeURI is the identity of the node with that ID.
func NodeURI(id string) string { return NodeURIPrefix + id }

// Capacity is what a node offers: the control plane places sandboxes
// against it times its overcommit factors.
type Capacity struct {
	CPUs      float64   `json:"cpus"`
	MemoryMiB int64     `json:"memory_mib"`
	DiskMiB   int64     `json:"disk_mib"`
	GPUs      node.GPUs `json:"gpus"`
}

// Registration is what a node says of itself when it joins or registers
// again.
type Registration struct {
	Name string `json:"name"`
	// Addr is the node API's address (host:port) the control plane dials.
	Addr     string   `json:"addr"`
	Capacity Capacity `json:"capacity"`
	// Templates are the templates the node can start now.
	Templates []string `json:"templates"`
	// Sandboxes are the sandboxes the node holds state for (node.Known).
	Sandboxes []string `json:"sandboxes"`
	// CSR is a PEM certificate request for the node's key: the answer's
	// certificate certifies it. Register may leave it empty to keep the
	// certificate it has.
	CSR     string `json:"csr,omitempty"`
	Version string `json:"version"`
}

// JoinRequest is a first registration, admitted by a join token.
type JoinRequest struct {
	Token string `json:"token"`
	// Nonce is the node's join nonce (pki.NewJoinNonce): made once, kept
	// in its data dir, the same in every attempt. A join of a name
	// registered with the same nonce is answered as that node (its
	// first answer was lost); of a name registered with another nonce,
	// or none, is refused with conflict. "" joins without one (no
	// retry of a lost answer is then possible).
	Nonce string `json:"nonce,omitempty"`
	Registration
}

// Admission answers a join or a registration.
type Admission struct {
	NodeID string `json:"node_id"`
	// Epoch is new at every (re)registration; every later heartbeat names
	// it, and a node told its epoch is stale registers again.
	Epoch int64 `json:"epoch"`
	// Certificate is the node's PEM certificate (when a CSR was sent) and
	// CA the fleet's CA certificate.
	Certificate string `json:"certificate,omitempty"`
	CA          string `json:"ca"`
	// Assigned are the sandboxes the control plane assigns to the node in
	// this epoch. Before it serves anything the node kills every
	// container it holds that is not among them.
	Assigned []string `json:"assigned"`
	// HeartbeatMS is how often, in milliseconds, the control plane expects a
	// heartbeat.
	HeartbeatMS int64 `json:"heartbeat_ms"`
}

// RenewRequest asks for a new certificate before the current one expires.
type RenewRequest struct {
	CSR string `json:"csr"`
}

// RenewAnswer is the renewed certificate.
type RenewAnswer struct {
	Certificate string `json:"certificate"`
}

// Heartbeat is a node's periodic report; the control plane's clock
// decides when a silent node is lost.
type Heartbeat struct {
	Epoch     int64    `json:"epoch"`
	Capacity  Capacity `json:"capacity"`
	Templates []string `json:"templates"`
	Sandboxes []string `json:"sandboxes"`
}

// HeartbeatAnswer acknowledges a heartbeat. A stale epoch, a lost or a
// removed node is answered with an api.Error instead: conflict means
// "register again", permission_denied means "you are revoked".
type HeartbeatAnswer struct {
	Epoch int64 `json:"epoch"`
}
