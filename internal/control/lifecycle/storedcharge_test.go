package lifecycle

import (
	"math"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// TestStoredAccruals: storage is charged for the hour now is in and the one
// before, each clipped to when the thing was made and to now; an hour with
// none of that time gets no accrual.
func TestStoredAccruals(t *testing.T) {
	const gib = 1 << 30
	prices := api.Prices{StorageGiBHour: 0.5}
	at := func(hhmm string) time.Time {
		tm, err := time.Parse(time.RFC3339, "2026-03-04T"+hhmm+":00Z")
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	type hour struct {
		at      string
		minutes float64
	}
	for _, tc := range []struct {
		name         string
		created, now string
		want         []hour
	}{
		{"made within the current hour", "10:05", "10:20", []hour{{"10:00", 15}}},
		{"made before the two hours", "07:40", "10:20", []hour{{"09:00", 60}, {"10:00", 20}}},
		{"made in the hour before", "09:30", "10:20", []hour{{"09:00", 30}, {"10:00", 20}}},
		{"made on the previous hour's boundary", "09:00", "10:20", []hour{{"09:00", 60}, {"10:00", 20}}},
		{"made on the current hour's boundary", "10:00", "10:20", []hour{{"10:00", 20}}},
		{"now on an hour's boundary", "07:40", "10:00", []hour{{"09:00", 60}}},
		{"made now", "10:20", "10:20", nil},
		{"made after now", "10:30", "10:20", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := storedAccruals("snp_1", "team_1", 2*gib, at(tc.created), at(tc.now), prices)
			if len(got) != len(tc.want) {
				t.Fatalf("%d accruals %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				gibh := 2 * w.minutes / 60
				want := store.Accrual{SandboxID: "snp_1", TeamID: "team_1", Hour: at(w.at), StorageGiBH: gibh, CostUSD: gibh * 0.5}
				g := got[i]
				if g.SandboxID != want.SandboxID || g.TeamID != want.TeamID || !g.Hour.Equal(want.Hour) ||
					math.Abs(g.StorageGiBH-want.StorageGiBH) > 1e-12 || math.Abs(g.CostUSD-want.CostUSD) > 1e-12 ||
					g.CPUS != 0 || g.MemoryGiBS != 0 || g.EgressBytes != 0 || g.GPUS != 0 {
					t.Errorf("accrual %d: %+v, want %+v", i, g, want)
				}
			}
		})
	}
}
