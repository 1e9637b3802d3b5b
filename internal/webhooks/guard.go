package webhooks

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
)

// MaxURLLen bounds a webhook's URL.
const MaxURLLen = 2048

// refused reports why a delivery may not go to addr, or "" when it may.
// Cloud metadata addresses are refused whatever the operator allows; the
// node's own addresses (isNode, which may be nil when allowPrivate), public
// ones included, as the egress gateway refuses them, unless the operator
// allows private addresses.
func refused(addr netip.Addr, allowPrivate bool, isNode func(netip.Addr) bool) string {
	addr = addr.Unmap()
	switch {
	case netpolicy.IsMetadata(addr):
		return fmt.Sprintf("%s is a cloud metadata address", addr)
	case allowPrivate:
		return ""
	case netpolicy.IsSpecial(addr):
		return fmt.Sprintf("%s is a private, loopback or otherwise non-public address (the operator may allow such addresses with --webhook-allow-private)", addr)
	case isNode(addr):
		return fmt.Sprintf("%s is an address of this node (the operator may allow it with --webhook-allow-private)", addr)
	}
	return ""
}

// dialControl refuses, at connect time, an address a delivery may not
// reach. It sees the address actually dialled, after DNS, so a name that
// resolves (or re-resolves) to a private address, or to the node's own,
// is refused too.
func dialControl(allowPrivate bool, isNode func(netip.Addr) bool) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("webhook dial to %q: %w", address, err)
		}
		if why := refused(ap.Addr(), allowPrivate, isNode); why != "" {
			return &refusedError{why}
		}
		return nil
	}
}

type refusedError struct{ why string }

func (e *refusedError) Error() string { return "refused: " + e.why }

// CheckURL validates a webhook URL when it is created: http or https, a
// host, no fragment, and (unless allowPrivate) no address that is not
// public or is the node's own, whether written as an address or a name that
// resolves to one now. Deliveries check again at every dial.
func CheckURL(ctx context.Context, raw string, allowPrivate bool) error {
	bad := func(format string, args ...any) error {
		return api.Errorf(api.CodeInvalidArgument, "url: "+format, args...)
	}
	if raw == "" {
		return bad("missing; give the http(s) URL that receives the events")
	}
	if len(raw) > MaxURLLen {
		return bad("longer than %d bytes", MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return bad("scheme %q; use http or https", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return bad("no host")
	}
	if u.Fragment != "" {
		return bad("has a fragment (#…), which is never sent")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if addr, err := netip.ParseAddr(host); err == nil {
		if why := refused(addr, allowPrivate, netpolicy.IsNodeAddr); why != "" {
			return bad("%s", why)
		}
		return nil
	}
	if !allowPrivate && (host == "localhost" || strings.HasSuffix(host, ".localhost")) {
		return bad("%s is the local host (the operator may allow it with --webhook-allow-private)", host)
	}
	// A name that does not resolve now is taken: it may later, and every
	// dial is checked anyway.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if why := refused(a, allowPrivate, netpolicy.IsNodeAddr); why != "" {
			return bad("%s resolves to %s", host, why)
		}
	}
	return nil
}
