package webhooks

import (
	"net"
	"sync"
	"testing"
	"time"
)

// tarpit is a webhook receiver on loopback that accepts connections,
// reads what comes and never answers: each attempt to it is held until
// the sender gives up. It records when each connection came and went.
type tarpit struct {
	ln    net.Listener
	URL   string
	mu    sync.Mutex
	conns []*tarpitConn
	wg    sync.WaitGroup
}

type tarpitConn struct {
	c              net.Conn
	opened, closed time.Time // closed is zero while the sender holds it
}

func newTarpit(t *testing.T) *tarpit {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tarpit{ln: ln, URL: "http://" + ln.Addr().String()}
	tp.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := &tarpitConn{c: c, opened: time.Now()}
			tp.mu.Lock()
			tp.conns = append(tp.conns, tc)
			tp.mu.Unlock()
			tp.wg.Go(func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				tp.mu.Lock()
				tc.closed = time.Now()
				tp.mu.Unlock()
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		tp.mu.Lock()
		for _, c := range tp.conns {
			c.c.Close()
		}
		tp.mu.Unlock()
		tp.wg.Wait()
	})
	return tp
}

// open returns the connections the sender holds now.
func (tp *tarpit) open() []*tarpitConn {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []*tarpitConn
	for _, c := range tp.conns {
		if c.closed.IsZero() {
			out = append(out, c)
		}
	}
	return out
}

// closedAt is when c was closed, zero if it is still held.
func (tp *tarpit) closedAt(c *tarpitConn) time.Time {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return c.closed
}

func (tp *tarpit) count() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.conns)
}
