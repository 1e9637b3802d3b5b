// Package lease elects one leader among the control plane's replicas and
// runs the singletons (the meter, the idle and lifetime sweeper, the
// webhook dispatcher, …) on it alone. The election is a lease row in the
// store, taken and renewed by one conditional write (store.Replicas): a
// replica leads while its renewals succeed, and stops leading the moment
// one fails or finds the lease taken, before its lease can have run out.
// A second leader for a moment is still possible (a stalled process
// resumes), which is why every write a singleton makes is conditional.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// Store is the part of the store a lease uses.
type Store interface {
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error)
	ReleaseLease(ctx context.Context, name, holder string) error
}

// Config names a lease and its holder.
type Config struct {
	// Name is the lease's ("leader").
	Name string
	// Holder is this replica's ID.
	Holder string
	// TTL is how long a renewal holds the lease; a renewal is tried
	// every TTL/3, and one that takes longer than TTL/3 counts as failed.
	TTL time.Duration
	// After is the clock's timer (time.After when nil); tests give a
	// fake one.
	After func(time.Duration) <-chan time.Time
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Name == "" || c.Holder == "":
		return errors.New("lease: a name and a holder are required")
	case c.TTL < 30*time.Millisecond:
		return fmt.Errorf("lease %s: ttl %v is too short", c.Name, c.TTL)
	}
	return nil
}

// Lease runs work while this replica holds the lease.
type Lease struct {
	cfg Config
	st  Store
	log *slog.Logger

	leader atomic.Bool
	term   atomic.Int64
}

// New returns a lease over st; Run takes it.
func New(cfg Config, st Store, log *slog.Logger) (*Lease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	return &Lease{cfg: cfg, st: st, log: log.With("lease", cfg.Name, "holder", cfg.Holder)}, nil
}

// Leader reports whether this replica leads now.
func (l *Lease) Leader() bool { return l.leader.Load() }

// Term is the term of this replica's current or last lead (0: never led).
func (l *Lease) Term() int64 { return l.term.Load() }

// Run tries to take the lease every TTL/3 until ctx ends. While it holds
// the lease, lead runs with a context that is cancelled as soon as a
// renewal fails or the lease is lost; lead must return soon after. When
// it is taken again, lead runs again. At the end Run waits for lead and
// releases the lease, so that another replica takes it at once.
func (l *Lease) Run(ctx context.Context, lead func(ctx context.Context)) {
	var (
		wg   sync.WaitGroup
		stop context.CancelFunc
	)
	resign := func(why string, args ...any) {
		if stop == nil {
			return
		}
		stop()
		wg.Wait()
		stop = nil
		l.leader.Store(false)
		l.log.Warn("no longer the leader: "+why, args...)
	}
	defer func() {
		leading := stop != nil
		resign("stopping")
		if !leading {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.TTL)
		defer cancel()
		if err := l.st.ReleaseLease(rctx, l.cfg.Name, l.cfg.Holder); err != nil {
			l.log.Warn("release the lease; another replica takes it when it expires", "err", err)
		}
	}()
	for {
		held, err := l.acquire(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			resign("the lease could not be renewed", "err", err)
		case held.Holder != l.cfg.Holder:
			resign("another replica holds the lease", "leader", held.Holder, "term", held.Term)
		case stop == nil:
			l.term.Store(held.Term)
			l.leader.Store(true)
			l.log.Info("leading", "term", held.Term)
			stop = start(ctx, &wg, lead)
		}
		select {
		case <-ctx.Done():
			return
		case <-l.cfg.After(l.cfg.TTL / 3):
		}
	}
}

// start runs lead on wg with a context of its own; the returned func
// cancels it.
func start(ctx context.Context, wg *sync.WaitGroup, lead func(ctx context.Context)) context.CancelFunc {
	leadCtx, cancel := context.WithCancel(ctx)
	wg.Go(func() { lead(leadCtx) })
	return cancel
}

// acquire takes or renews the lease, giving up after TTL/3: with the
// wait between tries, a leader whose renewals stall stops leading before
// the lease it last renewed runs out.
func (l *Lease) acquire(ctx context.Context) (store.Lease, error) {
	actx, cancel := context.WithTimeout(ctx, l.cfg.TTL/3)
	defer cancel()
	return l.st.AcquireLease(actx, l.cfg.Name, l.cfg.Holder, l.cfg.TTL)
}
