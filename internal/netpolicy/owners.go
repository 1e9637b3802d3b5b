package netpolicy

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Owner lookups: which command of a sandbox made a connection. The gateway
// knows the sandbox's side of each connection (its source address and
// port, and the original destination); the sandbox's agent knows which
// process holds that socket and which command the process belongs to. The
// lookup starts when a connection arrives and runs beside it, never in
// its way: an allowed connection is decided, dialled and spliced without
// waiting for it. A denial waits for it (OwnerWait at most), since once
// the sandbox's socket is reset its holder is gone.
//
// Lookups are batched per sandbox, one call in flight per sandbox, so a
// sandbox opening connections fast costs one call per batch rather than
// one per connection; a sandbox whose queue is full gets no lookups until
// it drains.

// MaxOwnerBatch bounds the sockets of one Owners call.
const MaxOwnerBatch = 256

// maxOwnerQueue bounds the lookups waiting per sandbox; past it a
// connection is not looked up.
const maxOwnerQueue = 1024

// maxConnKeys bounds the observations one connection names a command for
// (a CONNECT tunnel or a late decision may count a few).
const maxConnKeys = 8

// Socket is a socket of a sandbox as the sandbox sees it.
type Socket struct {
	Proto  string // "tcp" or "udp"
	Local  netip.AddrPort
	Remote netip.AddrPort // zero for "any" (an unconnected UDP socket)
}

// conn is one connection (or query) whose command is looked up.
type conn struct {
	sb   *sandbox
	seq  uint64 // orders connections: a later one's command wins
	sock Socket
	done chan struct{} // closed once cmd is set
	cmd  string

	// Guarded by Registry.mu.
	keys     []obsKey // observations this connection counted
	resolved bool     // cmd was applied to keys
}

// wait waits for the lookup, at most d.
func (c *conn) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	}
}

// command is the command found, "" while the lookup runs or when none was
// found.
func (c *conn) command() string {
	select {
	case <-c.done:
		return c.cmd
	default:
		return ""
	}
}

// countedLocked notes that the connection counted observation k.
func (c *conn) countedLocked(r *Registry, k obsKey) {
	for _, have := range c.keys {
		if have == k {
			return
		}
	}
	if len(c.keys) >= maxConnKeys {
		return
	}
	c.keys = append(c.keys, k)
	if c.resolved {
		r.attributeLocked(c.sb, k, c.seq, c.cmd)
	}
}

// owners holds the lookups waiting per sandbox.
type owners struct {
	seq  atomic.Uint64
	wake chan struct{} // RunOwners has work

	mu      sync.Mutex
	running bool
	queues  map[string]*ownerQueue
}

type ownerQueue struct {
	busy  bool // a call is in flight
	conns []*conn
}

// lookupOwner starts looking up the command behind a sandbox's socket and
// attaches the lookup to p, whose observations it then names the command
// in. Without Owners or RunOwners it does nothing.
func (r *Registry) lookupOwner(p *peer, sock Socket) {
	if r.cfg.Owners == nil || p.sb == nil || !sock.Local.IsValid() {
		return
	}
	c := &conn{sb: p.sb, seq: r.owners.seq.Add(1), sock: sock, done: make(chan struct{})}
	o := &r.owners
	o.mu.Lock()
	q := o.queues[p.id]
	if q == nil && o.running {
		q = &ownerQueue{}
		o.queues[p.id] = q
	}
	ok := q != nil && len(q.conns) < maxOwnerQueue
	if ok {
		q.conns = append(q.conns, c)
	}
	o.mu.Unlock()
	if !ok {
		r.resolve(c, "")
	} else {
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
	p.conn = c
}

// resolve records the command found for c and names it in the
// observations c counted.
func (r *Registry) resolve(c *conn, cmd string) {
	c.cmd = cmd
	close(c.done)
	r.mu.Lock()
	defer r.mu.Unlock()
	c.resolved = true
	for _, k := range c.keys {
		r.attributeLocked(c.sb, k, c.seq, cmd)
	}
}

// RunOwners makes the owner lookups until ctx is done: for each sandbox
// with lookups waiting and none in flight, one Owners call for up to
// MaxOwnerBatch of them. It returns once its calls have ended; lookups
// still waiting then find no command.
func (r *Registry) RunOwners(ctx context.Context) {
	o := &r.owners
	o.mu.Lock()
	o.running = true
	o.mu.Unlock()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		o.mu.Lock()
		o.running = false
		var left []*conn
		for id, q := range o.queues {
			left = append(left, q.conns...)
			delete(o.queues, id)
		}
		o.mu.Unlock()
		for _, c := range left {
			r.resolve(c, "")
		}
	}()
	for {
		select {
		case <-o.wake:
		case <-ctx.Done():
			return
		}
		o.mu.Lock()
		for id, q := range o.queues {
			if q.busy || len(q.conns) == 0 {
				continue
			}
			q.busy = true
			n := min(len(q.conns), MaxOwnerBatch)
			batch := q.conns[:n:n]
			q.conns = q.conns[n:]
			wg.Go(func() { r.lookupBatch(ctx, id, q, batch) })
		}
		o.mu.Unlock()
	}
}

// lookupBatch makes one Owners call and resolves its connections.
func (r *Registry) lookupBatch(ctx context.Context, id string, q *ownerQueue, batch []*conn) {
	socks := make([]Socket, len(batch))
	for i, c := range batch {
		socks[i] = c.sock
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.OwnerTimeout)
	start := time.Now()
	ids, err := r.cfg.Owners(cctx, id, socks)
	cancel()
	if err == nil && len(ids) != len(batch) {
		err = errWrongAnswer
	}
	r.log.Debug("socket owners", "sandbox", id, "sockets", len(batch), "took", time.Since(start), "err", err)
	if err != nil {
		ids = make([]string, len(batch))
	}
	for i, c := range batch {
		r.resolve(c, ids[i])
	}
	o := &r.owners
	o.mu.Lock()
	q.busy = false
	more := len(q.conns) > 0
	if !more && o.queues[id] == q {
		delete(o.queues, id)
	}
	o.mu.Unlock()
	if more {
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
}

var errWrongAnswer = errors.New("wrong number of owners")
