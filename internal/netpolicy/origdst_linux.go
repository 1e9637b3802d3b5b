package netpolicy

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// originalDst returns the IPv4 destination a connection had before nftables
// redirected it to the gateway (getsockopt SO_ORIGINAL_DST).
func originalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T has no socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	var (
		mreq   *unix.IPv6Mreq
		optErr error
	)
	// The kernel writes a struct sockaddr_in (16 bytes); IPv6Mreq (20 bytes)
	// is the x/sys getter with a buffer large enough for it.
	err = raw.Control(func(fd uintptr) {
		mreq, optErr = unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
	})
	if err == nil {
		err = optErr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: getsockopt SO_ORIGINAL_DST: %w", err)
	}
	b := mreq.Multiaddr[:]
	if fam := binary.NativeEndian.Uint16(b[0:2]); fam != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("original destination: address family %d, want IPv4", fam)
	}
	port := binary.BigEndian.Uint16(b[2:4])
	addr := netip.AddrFrom4([4]byte(b[4:8]))
	return netip.AddrPortFrom(addr, port), nil
}
