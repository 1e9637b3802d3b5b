//go:build !linux

package netpolicy

import "net/netip"

// isNodeAddr knows no node addresses off Linux; the gateway's other checks
// (loopback, its own and configured addresses) still hold.
func isNodeAddr(netip.Addr) bool { return false }
