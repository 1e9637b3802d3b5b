package lease_test

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

func TestMain(m *testing.M) { pgserver.Main(m) }

// TestTakeoverOnPostgres: on PostgreSQL (expiry on the database's clock),
// a leader that stalls (it renews no more) loses the lease once it
// expires, another replica trying on its own timer takes it in the next
// term, and the stalled one stops leading at its next renewal.
func TestTakeoverOnPostgres(t *testing.T) {
	url := pgserver.Start(t).NewDatabase(t)
	st, err := postgres.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const ttl = time.Second
	a, _ := runReplica(t, st, "rep_a", ttl, true) // renews only when the test ticks it
	// Its first try may run out of time on a loaded machine (a try gets
	// ttl/3): it is ticked again until it leads, then no more.
	eventually(t, "rep_a leads", func() bool {
		select {
		case a.tick <- time.Time{}:
		default:
		}
		return a.l.Leader()
	})
	b, _ := runReplica(t, st, "rep_b", ttl, false) // tries every ttl/3
	eventually(t, "rep_b leads once rep_a's lease expired", b.l.Leader)
	if b.l.Term() != 2 {
		t.Errorf("rep_b's term = %d; want 2", b.l.Term())
	}
	a.tick <- time.Time{}
	eventually(t, "rep_a stops leading", func() bool { return !a.l.Leader() })
	l, err := st.AcquireLease(t.Context(), "leader", "rep_c", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != "rep_b" {
		t.Errorf("lease = %+v; want rep_b's", l)
	}
}
