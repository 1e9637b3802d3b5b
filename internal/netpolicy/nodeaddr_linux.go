package netpolicy

import (
	"errors"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// isNodeAddr asks the kernel how it would route a connection to addr: a
// route of type local means the connection would stay on this node (the
// local table holds every address of every interface, down ones included,
// and local routes such as AnyIP ones). It is asked at each decision, so
// addresses added since (a new sandbox's veth) count at once. When the
// kernel has no route at all the connection cannot leave either; any other
// failure counts as local (fail closed).
func isNodeAddr(addr netip.Addr) bool {
	routes, err := netlink.RouteGet(addr.Unmap().AsSlice())
	switch {
	case errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EHOSTUNREACH),
		errors.Is(err, unix.EACCES), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EAFNOSUPPORT):
		return false // unreachable, prohibited, blackholed, no IPv6: not here either
	case err != nil:
		return true
	}
	for _, r := range routes {
		if r.Type == unix.RTN_LOCAL {
			return true
		}
	}
	return false
}
