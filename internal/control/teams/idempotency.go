package teams

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// IdempotencyTTL is how long an answer is replayed for its key.
const IdempotencyTTL = 24 * time.Hour

// Answer is a response to replay.
type Answer struct {
	Status int
	Body   []byte
}

// Idempotently runs do at most once for a team's key: the first request
// with the key runs, and its successful answer is stored; a later request
// with the same key and the same request gets that answer again (replayed
// true), one with another request under the key is refused. Failed answers
// are not stored, so a failed request may be retried with its key.
func (s *Service) Idempotently(ctx context.Context, teamID, key, requestHash string, do func() Answer) (Answer, bool, error) {
	unlock := s.idemLocks.Lock(teamID + "\x00" + key)
	defer unlock()
	if prev, err := s.st.GetIdempotent(ctx, teamID, key); err == nil {
		if prev.RequestHash != requestHash {
			return Answer{}, false, api.Errorf(api.CodeUnprocessable,
				"Idempotency-Key %q was used for another request; use a new key for a new request", key)
		}
		return Answer{Status: prev.Status, Body: prev.Body}, true, nil
	} else if api.ErrorCode(err) != api.CodeNotFound {
		return Answer{}, false, err
	}
	a := do()
	if a.Status >= 200 && a.Status < 300 {
		err := s.st.PutIdempotent(context.WithoutCancel(ctx), store.Idempotent{
			TeamID: teamID, Key: key, RequestHash: requestHash, Status: a.Status, Body: a.Body, CreatedAt: s.now(),
		})
		if err != nil {
			s.log.Error("store idempotent answer", "team", teamID, "err", err)
		}
	}
	return a, false, nil
}

// ExpireIdempotent drops answers older than IdempotencyTTL.
func (s *Service) ExpireIdempotent(ctx context.Context) {
	if err := s.st.DeleteIdempotentBefore(ctx, s.now().Add(-IdempotencyTTL)); err != nil {
		s.log.Warn("expire idempotent answers", "err", err)
	}
}
