package service

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/control/lease"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
)

// leaderLease is the name of the lease whose holder runs the singletons.
const leaderLease = "leader"

// changesChannel is the LISTEN/NOTIFY channel of the replicas' changes.
const changesChannel = "cove_changes"

// beatInterval is how often a replica records that it is alive; one not
// seen for replicaDeadAfter is dead.
const (
	beatInterval     = 2 * time.Second
	replicaDeadAfter = 5 * beatInterval
)

// A replica not seen for replicaPruneAfter loses its row, and the claims
// of ended sandboxes are deleted, by the leader every pruneEvery beats:
// an hour is far past replicaDeadAfter, so a pruned replica was long
// taken as dead (an unknown replica is dead to Alive as well), and its
// row stays long enough for an operator to see it.
const (
	replicaPruneAfter = time.Hour
	pruneEvery        = 30
)

// pollInterval is how often a replica wakes its waiters to read the store
// again when changes come through LISTEN/NOTIFY: a notification lost (a
// reconnection) delays a change by this much at most.
const pollInterval = time.Second

// notifier carries change notifications between the replicas sharing a
// store: PostgreSQL's LISTEN/NOTIFY. A store without it (SQLite, one
// process) has none.
type notifier interface {
	// Listen calls fn at each notification on channel, and each time it
	// starts listening (after a reconnection), until ctx ends.
	Listen(ctx context.Context, channel string, fn func())
	// Notify sends a notification on channel.
	Notify(ctx context.Context, channel string) error
}

// The PostgreSQL store carries the notifications.
var _ notifier = (*postgres.DB)(nil)

// replica is this process as one replica of the control plane over a
// shared store: its ID and beats, the leader lease under which the
// singletons run, and the changes made through the other replicas.
type replica struct {
	id      string
	started time.Time
	st      store.Replicas
	lease   *lease.Lease
	log     *slog.Logger
	// notes carries changes between replicas; nil alone (SQLite).
	notes notifier
	// wake wakes this replica's waiters (the core's Wake).
	wake func()

	addr atomic.Value // string: the API's address, once bound
	// changed is signalled (never blocking) at a local change to
	// announce; one pending signal stands for any number of changes.
	changed chan struct{}
}

func newReplica(st store.Replicas, ttl time.Duration, notes notifier, wake func(), log *slog.Logger) (*replica, error) {
	r := &replica{
		id: id.New("rep"), started: time.Now().UTC(), st: st, notes: notes, wake: wake,
		changed: make(chan struct{}, 1),
	}
	r.log = log.With("replica", r.id)
	r.addr.Store("")
	var err error
	if r.lease, err = lease.New(lease.Config{Name: leaderLease, Holder: r.id, TTL: ttl}, st, r.log); err != nil {
		return nil, err
	}
	return r, nil
}

// ReplicaID is the replica's ID.
func (r *replica) ReplicaID() string { return r.id }

// Leader reports whether this replica leads.
func (r *replica) Leader() bool { return r.lease.Leader() }

// StoreHealth reads the replicas' table: the store answers.
func (r *replica) StoreHealth(ctx context.Context) error {
	_, err := r.st.ListReplicas(ctx)
	return err
}

// Alive reports whether the replica id beat recently; this replica is
// always alive.
func (r *replica) Alive(ctx context.Context, id string) (bool, error) {
	if id == r.id {
		return true, nil
	}
	reps, err := r.st.ListReplicas(ctx)
	if err != nil {
		return false, err
	}
	for _, rep := range reps {
		if rep.ID == id {
			return time.Since(rep.SeenAt) < replicaDeadAfter, nil
		}
	}
	return false, nil
}

// OthersAlive reports whether another replica beat recently.
func (r *replica) OthersAlive(ctx context.Context) (bool, error) {
	reps, err := r.st.ListReplicas(ctx)
	if err != nil {
		return false, err
	}
	for _, rep := range reps {
		if rep.ID != r.id && time.Since(rep.SeenAt) < replicaDeadAfter {
			return true, nil
		}
	}
	return false, nil
}

// setAddr records where this replica's API listens, for its beats.
func (r *replica) setAddr(addr string) { r.addr.Store(addr) }

// announce tells the other replicas of a change made here; it never
// blocks (the core calls it under its own lock's release).
func (r *replica) announce() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// run beats, takes the leader lease and runs lead under it, and carries
// changes between replicas, until ctx ends; then it waits for all of it
// (the lease is released for another replica to take at once).
func (r *replica) run(ctx context.Context, lead func(ctx context.Context)) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.beat(ctx) })
	wg.Go(func() { r.lease.Run(ctx, lead) })
	if r.notes == nil {
		return
	}
	wg.Go(func() { r.notes.Listen(ctx, changesChannel, r.wake) })
	wg.Go(func() { r.sendChanges(ctx) })
	wg.Go(func() {
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.wake()
			case <-ctx.Done():
				return
			}
		}
	})
}

// beat records this replica alive every beatInterval.
func (r *replica) beat(ctx context.Context) {
	t := time.NewTicker(beatInterval)
	defer t.Stop()
	failing := false
	for n := 0; ; n++ {
		rep := store.Replica{ID: r.id, Addr: r.addr.Load().(string), StartedAt: r.started}
		if err := r.st.BeatReplica(ctx, rep); err != nil && ctx.Err() == nil {
			if !failing {
				r.log.Warn("record this replica alive", "err", err)
			}
			failing = true
		} else {
			failing = false
			if n%pruneEvery == pruneEvery-1 && r.Leader() {
				r.prune(ctx)
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// prune deletes the rows of replicas not seen for replicaPruneAfter and
// the claims of ended sandboxes. The cutoff is taken from this replica's
// own last beat, on the store's clock; both deletes are conditional, so
// two leaders for a moment delete nothing twice and nothing alive.
func (r *replica) prune(ctx context.Context) {
	reps, err := r.st.ListReplicas(ctx)
	if err != nil {
		r.log.Warn("list replicas to prune", "err", err)
		return
	}
	for _, rep := range reps {
		if rep.ID != r.id {
			continue
		}
		if n, err := r.st.PruneReplicas(ctx, rep.SeenAt.Add(-replicaPruneAfter)); err != nil {
			r.log.Warn("prune replicas", "err", err)
		} else if n > 0 {
			r.log.Info("pruned replicas not seen for an hour", "count", n)
		}
	}
	if _, err := r.st.PruneSandboxOwners(ctx); err != nil {
		r.log.Warn("prune the claims of ended sandboxes", "err", err)
	}
}

// sendChanges notifies the other replicas of the changes announced here,
// one notification for however many came since the last.
func (r *replica) sendChanges(ctx context.Context) {
	for {
		select {
		case <-r.changed:
		case <-ctx.Done():
			return
		}
		if err := r.notes.Notify(ctx, changesChannel); err != nil && ctx.Err() == nil {
			// The others' polling still sees the change.
			r.log.Debug("notify the other replicas", "err", err)
		}
	}
}
