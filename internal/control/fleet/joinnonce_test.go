package fleet

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/fleet/pki"
	"github.com/cove-dev/cove/internal/store"
)

// rowsNamed are the store's nodes of a name, removed ones included.
func rowsNamed(t *testing.T, st store.Fleet, name string) []store.Node {
	t.Helper()
	all, err := st.ListNodes(t.Context())
	must(t, err)
	var out []store.Node
	for _, n := range all {
		if n.Name == name {
			out = append(out, n)
		}
	}
	return out
}

func liveRows(rows []store.Node) []store.Node {
	var out []store.Node
	for _, n := range rows {
		if n.State != api.NodeRemoved {
			out = append(out, n)
		}
	}
	return out
}

// TestJoinNonce: a join that brings the nonce the name was joined with
// is the same node retrying (its answer was lost), through either replica,
// any number of times: one row, the same ID, a new epoch each time. A
// join of the name with another nonce, or none, is refused with a
// conflict naming the node, and changes nothing.
func TestJoinNonce(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			_, a, b := replicas(t, st)
			ctx := t.Context()
			mine := pki.HashJoinNonce(strings.Repeat("ab", 32))
			theirs := pki.HashJoinNonce(strings.Repeat("cd", 32))

			first, err := a.Join(ctx, mine, registration("n1", 4))
			must(t, err)
			last := first
			for i, r := range []*Fleet{b, a, b} {
				again, err := r.Join(ctx, mine, registration("n1", 4))
				if err != nil {
					t.Fatalf("join %d again with the same nonce: %v", i+2, err)
				}
				if again.NodeID != first.NodeID || again.Epoch <= last.Epoch {
					t.Fatalf("join %d again: %+v after %+v; want the same node in a new epoch", i+2, again, last)
				}
				last = again
			}
			rows := rowsNamed(t, st, "n1")
			if len(rows) != 1 || rows[0].ID != first.NodeID || rows[0].JoinHash != mine ||
				rows[0].State != api.NodeReady || rows[0].Epoch != last.Epoch {
				t.Fatalf("rows named n1: %+v; want one, %s, ready, epoch %d", rows, first.NodeID, last.Epoch)
			}

			for _, r := range []*Fleet{a, b} {
				for _, hash := range []string{theirs, ""} {
					_, err := r.Join(ctx, hash, registration("n1", 4))
					wantCode(t, err, api.CodeConflict)
					if !strings.Contains(api.ErrorMessage(err), `"n1"`) {
						t.Fatalf("the refusal does not name the node: %v", err)
					}
				}
				_, err := r.Register(ctx, "", registration("n1", 4)) // no nonce at all
				wantCode(t, err, api.CodeConflict)
			}
			if after := rowsNamed(t, st, "n1"); len(after) != 1 || after[0].Epoch != last.Epoch || after[0].JoinHash != mine {
				t.Fatalf("after refused joins, rows named n1: %+v; want the one row untouched", after)
			}
			must(t, a.Refresh(ctx))
			if n, err := a.Node(ctx, "n1"); err != nil || n.ID != first.NodeID || n.State != api.NodeReady {
				t.Fatalf("replica a sees n1 as %+v, %v", n, err)
			}

			// Its first heartbeat (with its certificate) spends the nonce:
			// from then on the nonce admits no one, the node itself
			// neither (it registers with its certificate).
			_, err = b.Heartbeat(ctx, first.NodeID, fleetwire.Heartbeat{Epoch: last.Epoch})
			must(t, err)
			if rows := rowsNamed(t, st, "n1"); len(rows) != 1 || rows[0].JoinHash != "" {
				t.Fatalf("after a heartbeat, rows named n1: %+v; want the join hash spent", rows)
			}
			for _, r := range []*Fleet{a, b} {
				_, err := r.Join(ctx, mine, registration("n1", 4))
				wantCode(t, err, api.CodeConflict)
			}
			if rows := rowsNamed(t, st, "n1"); len(rows) != 1 || rows[0].Epoch != last.Epoch {
				t.Fatalf("a spent nonce changed the node: %+v", rows)
			}
		})
	}
}

// TestJoinNonceLostAndRemoved: a lost node retrying its join with its
// nonce comes back as itself; a lost node's name joined with another
// nonce is a new identity (the lost one retired), as before nonces; a
// removed node is never revived by its nonce.
func TestJoinNonceLostAndRemoved(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			_, a, b := replicas(t, st)
			ctx := t.Context()
			mine := pki.HashJoinNonce(strings.Repeat("01", 32))
			other := pki.HashJoinNonce(strings.Repeat("02", 32))

			// Joined, never heard (its answer was lost), then declared
			// lost: its nonce brings it back as itself.
			first, err := a.Join(ctx, mine, registration("n1", 2))
			must(t, err)
			must(t, a.retire(ctx, first.NodeID, api.NodeLost, "was lost", time.Time{}))
			back, err := b.Join(ctx, mine, registration("n1", 2))
			must(t, err)
			if back.NodeID != first.NodeID {
				t.Fatalf("a lost node joining with its nonce came back as %s, not %s", back.NodeID, first.NodeID)
			}
			if live := liveRows(rowsNamed(t, st, "n1")); len(live) != 1 || live[0].State != api.NodeReady {
				t.Fatalf("rows named n1: %+v", live)
			}

			must(t, a.retire(ctx, first.NodeID, api.NodeLost, "was lost", time.Time{}))
			fresh, err := b.Join(ctx, other, registration("n1", 2))
			must(t, err)
			if fresh.NodeID == first.NodeID {
				t.Fatal("another host took the lost node's identity")
			}
			rows := rowsNamed(t, st, "n1")
			if live := liveRows(rows); len(rows) != 2 || len(live) != 1 || live[0].ID != fresh.NodeID || live[0].JoinHash != other {
				t.Fatalf("rows named n1: %+v; want the lost one removed and the new one live", rows)
			}
			// The retired node's nonce admits nothing now: the name is the
			// new node's.
			_, err = a.Join(ctx, mine, registration("n1", 2))
			wantCode(t, err, api.CodeConflict)

			// Removed: the nonce makes a new node, never the old one.
			must(t, a.Refresh(ctx))
			must(t, a.Remove(ctx, "n1"))
			if rows := rowsNamed(t, st, "n1"); len(liveRows(rows)) != 0 {
				t.Fatalf("after the removal, rows named n1: %+v", rows)
			}
			again, err := a.Join(ctx, other, registration("n1", 2))
			must(t, err)
			if again.NodeID == fresh.NodeID || again.NodeID == first.NodeID {
				t.Fatalf("a removed node was revived by its nonce: %s", again.NodeID)
			}
		})
	}
}

// TestJoinNonceConcurrent: the same node's join reaching both replicas
// at once (it timed out on one and tried the other) leaves one row and
// admits it twice as one node; two hosts joining one name at once leave
// one row, and one of them is refused.
func TestJoinNonceConcurrent(t *testing.T) {
	for name, open := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			_, a, b := replicas(t, st)
			for round := range 5 {
				node := "same" + string(rune('a'+round))
				hash := pki.HashJoinNonce(strings.Repeat(string(rune('a'+round)), 64))
				adms, errs := joinAtOnce(t, a, b, [2]string{hash, hash}, node)
				for _, err := range errs {
					must(t, err)
				}
				if adms[0].NodeID != adms[1].NodeID {
					t.Fatalf("round %d: one node admitted as %s and %s", round, adms[0].NodeID, adms[1].NodeID)
				}
				if rows := rowsNamed(t, st, node); len(rows) != 1 {
					t.Fatalf("round %d: rows %+v; want one", round, rows)
				}

				twin := "twin" + string(rune('a'+round))
				_, errs = joinAtOnce(t, a, b, [2]string{pki.HashJoinNonce(strings.Repeat("1", 64)), pki.HashJoinNonce(strings.Repeat("2", 64))}, twin)
				ok := 0
				for _, err := range errs {
					if err == nil {
						ok++
					} else {
						wantCode(t, err, api.CodeConflict)
					}
				}
				if rows := rowsNamed(t, st, twin); ok != 1 || len(rows) != 1 {
					t.Fatalf("round %d: two hosts joining %s at once: %v, rows %+v; want one admitted, one row", round, twin, errs, rows)
				}
			}
		})
	}
}

func joinAtOnce(t *testing.T, a, b *Fleet, hashes [2]string, name string) ([2]fleetwire.Admission, [2]error) {
	var adms [2]fleetwire.Admission
	var errs [2]error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, r := range []*Fleet{a, b} {
		wg.Go(func() {
			<-start
			adms[i], errs[i] = r.Join(t.Context(), hashes[i], registration(name, 1))
		})
	}
	close(start)
	wg.Wait()
	return adms, errs
}
