// Package networktest sends forged packets from inside a network
// namespace, for tests that check the fence drops them. Since sandboxes
// hold no CAP_NET_RAW, the tests stand in for an attacker who could forge
// anyway: they join the sandbox's network namespace from the host (as
// root) and send datagrams whose source address is another's, out of the
// sandbox's own eth0.
package networktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/nsthread"
)

// Datagram is a UDP payload and the source it claims.
type Datagram struct {
	From    netip.AddrPort
	Payload []byte
}

// ForgeThenAsk sends, from inside the network namespace at nsPath (such as
// /proc/PID/ns/net), each forged datagram to `to`, then asks: it sends ask
// from the namespace's own address (the one its route picks) to `to` and
// returns the first reply.
//
// The forged datagrams carry their claimed source for real: each goes from
// a socket bound to that address with IP_TRANSPARENT, out by the
// namespace's route, as a raw socket would send it. Everything is sent by
// one thread pinned to one CPU, so the packets cross the veth in order and
// the host handles them in order (one CPU's backlog is a queue): once the
// reply to ask is back, the host has done whatever it does with every
// forged datagram, which makes the reply a barrier for checks that nothing
// happened.
func ForgeThenAsk(nsPath string, to netip.AddrPort, forged []Datagram, ask []byte, wait time.Duration) ([]byte, error) {
	f, err := os.Open(nsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var reply []byte
	err = nsthread.Run(int(f.Fd()), unix.CLONE_NEWNET, func() error {
		if err := pinToOneCPU(); err != nil {
			return err
		}
		for _, d := range forged {
			if err := sendFrom(d, to); err != nil {
				return err
			}
		}
		c, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.WriteTo(ask, net.UDPAddrFromAddrPort(to)); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 64<<10)
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no reply to the datagram from the namespace's own address: %w", err)
		}
		reply = buf[:n]
		return nil
	})
	return reply, err
}

func pinToOneCPU() error {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return err
	}
	for cpu := 0; cpu < 1024; cpu++ {
		if set.IsSet(cpu) {
			var one unix.CPUSet
			one.Set(cpu)
			return unix.SchedSetaffinity(0, &one)
		}
	}
	return errors.New("no CPU to pin to")
}

// sendFrom sends one datagram whose source is d.From, an address the
// namespace does not have.
func sendFrom(d Datagram, to netip.AddrPort) error {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	c, err := lc.ListenPacket(context.Background(), "udp4", d.From.String())
	if err != nil {
		return fmt.Errorf("a socket with source %s: %w", d.From, err)
	}
	defer c.Close()
	if _, err := c.WriteTo(d.Payload, net.UDPAddrFromAddrPort(to)); err != nil {
		return fmt.Errorf("send from %s: %w", d.From, err)
	}
	return nil
}

// ListenIn listens on UDP addr inside the network namespace at nsPath.
// The socket stays in that namespace wherever it is read from.
func ListenIn(nsPath string, addr netip.AddrPort) (net.PacketConn, error) {
	f, err := os.Open(nsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pc net.PacketConn
	err = nsthread.Run(int(f.Fd()), unix.CLONE_NEWNET, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", addr.String())
		return err
	})
	return pc, err
}

// Received returns what pc holds now, without waiting: one recvfrom with
// MSG_DONTWAIT. (A read deadline in the past would not even look.)
func Received(pc net.PacketConn) ([]byte, bool) {
	sc, ok := pc.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	buf := make([]byte, 64<<10)
	n := -1
	rc.Read(func(fd uintptr) bool {
		n, _, _ = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		return true
	})
	if n < 0 {
		return nil, false
	}
	return buf[:n], true
}
