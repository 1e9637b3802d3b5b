package guest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sockDiag looks sockets up by their exact addresses through the kernel's
// sock_diag netlink interface: a hash lookup. Reading /proc/net/tcp
// instead walks every bucket of the host's connection table whatever the
// namespace holds: tens of milliseconds on a busy host, long enough for a
// short connection to be gone before its owner is found.
type sockDiag struct {
	fd  int
	seq uint32
	buf []byte
}

func openSockDiag() (*sockDiag, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag socket: %w", err)
	}
	tv := unix.NsecToTimeval(int64(time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sock_diag timeout: %w", err)
	}
	return &sockDiag{fd: fd, buf: make([]byte, 8192)}, nil
}

func (d *sockDiag) close() { unix.Close(d.fd) }

// Sizes and offsets of the kernel's structures (linux/inet_diag.h).
const (
	sizeofInetDiagReqV2 = 56 // family, protocol, ext, pad, states, inet_diag_sockid
	inetDiagMsgInode    = 68 // offset of idiag_inode in inet_diag_msg
)

// inode returns the inode of the socket with exactly these addresses (0
// when there is none, or no descriptor holds it any more). A UDP socket
// that is not connected matches any remote address.
func (d *sockDiag) inode(proto string, local, remote netip.AddrPort) (uint64, error) {
	family, ipproto := uint8(unix.AF_INET), uint8(unix.IPPROTO_TCP)
	if local.Addr().Is6() {
		family = unix.AF_INET6
	}
	src, dst := local, remote
	if proto == "udp" {
		ipproto = unix.IPPROTO_UDP
		// The kernel's UDP lookup takes source and destination the other
		// way round ("swapped for historical reasons", udp_diag.c).
		src, dst = remote, local
	}
	d.seq++
	req := make([]byte, unix.NLMSG_HDRLEN+sizeofInetDiagReqV2)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], d.seq)
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1] = family, ipproto
	ne.PutUint32(r[4:], 0xffffffff) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putAddr(id[4:20], src.Addr(), family)
	putAddr(id[20:36], dst.Addr(), family)
	ne.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag send: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(d.fd, d.buf, 0)
		if err != nil {
			return 0, fmt.Errorf("sock_diag receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(d.buf[:n])
		if err != nil {
			return 0, fmt.Errorf("sock_diag answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != d.seq {
				continue // the answer to an earlier request that timed out
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return 0, errors.New("sock_diag answer: short error")
				}
				switch errno := unix.Errno(-int32(ne.Uint32(m.Data))); errno {
				case 0, unix.ENOENT:
					return 0, nil
				default:
					return 0, fmt.Errorf("sock_diag: %w", errno)
				}
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(m.Data) < inetDiagMsgInode+4 {
					return 0, errors.New("sock_diag answer: short message")
				}
				return uint64(ne.Uint32(m.Data[inetDiagMsgInode:])), nil
			}
		}
	}
}

// putAddr writes a as the kernel's __be32[4] of the family.
func putAddr(b []byte, a netip.Addr, family uint8) {
	clear(b)
	if !a.IsValid() {
		return
	}
	if family == unix.AF_INET {
		v4 := a.Unmap().As4()
		copy(b, v4[:])
		return
	}
	v6 := a.As16()
	copy(b, v6[:])
}

// nameservers are the addresses of /etc/resolv.conf (three at most), where
// a DNS query whose destination the host does not know most likely went.
func nameservers() []netip.Addr {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() && len(out) < 3 {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}
