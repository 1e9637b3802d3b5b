package teams

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
)

// IdempotencyTTL is how long an answer is replayed for its key.
const IdempotencyTTL = 24 * time.Hour

// InFlightRetryS is the Retry-After of a request whose key's first attempt
// is still running.
const InFlightRetryS = 1

// Answer is a response to replay.
type Answer struct {
	Status int
	Body   []byte
}

// Idempotently runs do at most once for a team's key, across every
// replica sharing the store:
//
//   - the first request with the key claims it in the store and runs; its
//     successful answer is kept, a failed one is not: after a refusal
//     (4xx) the claim is released, so the request may be retried with its
//     key; after a server error (5xx), which may come after part of the
//     work, it is given up, and a retry takes it over as below;
//   - a later request with the same key and request gets the kept answer
//     (replayed true); one with another request under the key is refused;
//     with a Keeper, the answer is given while it is being stored, and
//     this replica replays it from memory until it is;
//   - while the first attempt runs, on this replica or another, a retry
//     is refused with conflict and a Retry-After;
//   - when the replica running the first attempt died, or gave the claim
//     up, a retry takes the claim over and runs do again. do is given a
//     ctx whose IDs (id.For) are derived from the claim, so the second
//     attempt finds what the first created instead of creating it again;
//     calls on existing resources check their state, so they do not act
//     twice.
func (s *Service) Idempotently(ctx context.Context, teamID, key, requestHash string, do func(ctx context.Context) Answer) (Answer, bool, error) {
	// One request per key runs in this process at a time; the others
	// are in flight behind it. Holding the key here also tells a claim of
	// this replica's ID that no request of this process runs: it was left
	// by an earlier run of the replica, which died with it.
	run := teamID + "\x00" + key
	s.mu.Lock()
	if k, ok := s.keeping[run]; ok {
		// Answered a moment ago, and being kept: the answer is known.
		s.mu.Unlock()
		if k.requestHash != requestHash {
			return Answer{}, false, reused(key)
		}
		return k.answer, true, nil
	}
	if s.running[run] {
		s.mu.Unlock()
		return Answer{}, false, inFlight()
	}
	s.running[run] = true
	s.mu.Unlock()
	handedOff := false // to the keeper, which ends the run
	defer func() {
		if !handedOff {
			s.endRun(run)
		}
	}()
	seed := make([]byte, 16)
	rand.Read(seed)
	rec, claimed, err := s.st.ClaimIdempotent(ctx, store.IdempotencyClaim{
		TeamID: teamID, Key: key, RequestHash: requestHash, Owner: s.cfg.Replica, Seed: seed, ClaimedAt: s.now(),
	})
	if err != nil {
		return Answer{}, false, err
	}
	if !claimed {
		if rec.RequestHash != requestHash {
			return Answer{}, false, reused(key)
		}
		if !rec.Pending() {
			return Answer{Status: rec.Status, Body: rec.Body}, true, nil
		}
		if rec, err = s.takeOver(ctx, rec); err != nil {
			return Answer{}, false, err
		}
	}
	d := id.NewDerivation(rec.Seed, teamID, key, rec.CreatedAt)
	if !claimed {
		d.Resume() // an earlier attempt's claim, taken over
	}
	a := do(id.WithDerivation(ctx, d))
	// The claim's end must not depend on the request's ctx: a client gone
	// must not leave its key pending.
	sctx := context.WithoutCancel(ctx)
	if a.Status >= 500 {
		// A server error may come after part of the work (a command
		// started, then the store went away): the claim is given up
		// before the answer, not dropped, so that a retry on any replica
		// takes it over and resumes with the same IDs, as after a death.
		s.giveUp(sctx, teamID, key)
		return a, false, nil
	}
	if a.Status < 200 || a.Status >= 300 {
		// Released before the answer: its retry runs again.
		s.release(sctx, teamID, key)
		return a, false, nil
	}
	if s.cfg.Keeper == nil {
		s.complete(sctx, teamID, key, a)
		return a, false, nil
	}
	// The answer goes out while it is kept: the request is done, and
	// what it did is found again by a retry even if this process dies
	// before the answer is stored (the claim is then taken over, and the
	// IDs it derives find what this attempt made).
	s.mu.Lock()
	s.keeping[run] = keeping{requestHash: requestHash, answer: a}
	s.mu.Unlock()
	handedOff = true
	s.cfg.Keeper.Go(func() {
		defer s.endRun(run)
		s.complete(sctx, teamID, key, a)
	})
	return a, false, nil
}

// complete keeps a successful answer for its key. A conflict means
// another replica took the key over, taking this one for dead: its
// answer is the one kept.
func (s *Service) complete(ctx context.Context, teamID, key string, a Answer) {
	s.endKey(ctx, "keep idempotent answer", teamID, func(ctx context.Context) error {
		return s.st.CompleteIdempotent(ctx, teamID, key, s.cfg.Replica, a.Status, a.Body)
	})
}

// release gives up a key whose request failed, so that it may be retried.
func (s *Service) release(ctx context.Context, teamID, key string) {
	s.endKey(ctx, "release idempotency key", teamID, func(ctx context.Context) error {
		return s.st.ReleaseIdempotent(ctx, teamID, key, s.cfg.Replica)
	})
}

// giveUp leaves a key's claim pending with no owner, for any replica's
// retry to take over.
func (s *Service) giveUp(ctx context.Context, teamID, key string) {
	s.endKey(ctx, "give up idempotency key", teamID, func(ctx context.Context) error {
		_, err := s.st.TakeOverIdempotent(ctx, teamID, key, s.cfg.Replica, "")
		return err
	})
}

// endKeyFor bounds the writes that end a key's claim, retries included.
const endKeyFor = 30 * time.Second

// endKey runs write, which ends or gives up a key's claim, again while
// the store is unavailable (a database restarting or failing over), for
// up to endKeyFor. A claim left pending would be answered in flight by the
// other replicas for as long as this one lives.
func (s *Service) endKey(ctx context.Context, what, teamID string, write func(context.Context) error) {
	ctx, cancel := context.WithTimeout(ctx, endKeyFor)
	defer cancel()
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := write(ctx)
		if err == nil {
			return
		}
		if !store.Unavailable(err) {
			s.log.Warn(what, "team", teamID, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			s.log.Warn(what, "team", teamID, "err", err, "tried_for", endKeyFor)
			return
		case <-time.After(wait):
		}
	}
}

// endRun ends a key's request in this process: once its answer is kept,
// or it failed.
func (s *Service) endRun(run string) {
	s.mu.Lock()
	delete(s.running, run)
	delete(s.keeping, run)
	s.mu.Unlock()
}

// reused is the refusal of a key sent again with another request.
func reused(key string) error {
	return api.Errorf(api.CodeUnprocessable,
		"Idempotency-Key %q was used for another request; use a new key for a new request", key)
}

// takeOver returns the pending claim rec for this replica to run when its
// owner died, and the in-flight refusal while the owner runs (or when
// another replica took it over first). The caller holds the key in this
// process, so a claim of this replica's own ID is an earlier run's.
func (s *Service) takeOver(ctx context.Context, rec store.Idempotent) (store.Idempotent, error) {
	// A claim without owner was given up after a server error.
	if rec.Owner != s.cfg.Replica && rec.Owner != "" {
		alive, err := s.cfg.ReplicaAlive(ctx, rec.Owner)
		if err != nil {
			return rec, err
		}
		if alive {
			return rec, inFlight()
		}
	}
	taken, err := s.st.TakeOverIdempotent(ctx, rec.TeamID, rec.Key, rec.Owner, s.cfg.Replica)
	if api.ErrorCode(err) == api.CodeConflict {
		return rec, inFlight()
	}
	if err != nil {
		return rec, err
	}
	if rec.Owner == "" {
		s.log.Info("resumed an idempotency key given up after a server error", "team", rec.TeamID)
	} else {
		s.log.Info("took over an idempotency key from a dead replica", "team", rec.TeamID, "replica", rec.Owner)
	}
	return taken, nil
}

// inFlight is the refusal of a request whose key's first attempt runs.
func inFlight() error {
	return &api.Error{
		Code:    api.CodeConflict,
		Message: "a request with this Idempotency-Key is still in progress; retry shortly to get its answer",
		Details: map[string]any{"retry_after_s": InFlightRetryS},
	}
}

// ExpireIdempotent drops records claimed before IdempotencyTTL ago.
func (s *Service) ExpireIdempotent(ctx context.Context) {
	if err := s.st.DeleteIdempotentBefore(ctx, s.now().Add(-IdempotencyTTL)); err != nil {
		s.log.Warn("expire idempotent answers", "err", err)
	}
}
