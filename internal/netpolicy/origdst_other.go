//go:build !linux

package netpolicy

import (
	"errors"
	"net"
	"net/netip"
)

func originalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("original destination: SO_ORIGINAL_DST needs Linux")
}
