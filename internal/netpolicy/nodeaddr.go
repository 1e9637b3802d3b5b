package netpolicy

import "net/netip"

// IsNodeAddr reports whether a connection to addr would stay on this node:
// an address of any of its interfaces now, as the gateway's default
// Config.IsNodeAddr sees it (failing closed). Other dialers of the node's
// own, such as webhook deliveries, refuse the same addresses.
func IsNodeAddr(addr netip.Addr) bool { return isNodeAddr(addr) }
