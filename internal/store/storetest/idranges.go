package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// testIDRanges: ranges are given lowest first, kept per sandbox, reused
// once released, never given twice (also to allocations at once), and
// refused when all are held.
func testIDRanges(t *testing.T, s store.Store) {
	ctx := t.Context()
	const first, size = 1 << 21, 1 << 16
	alloc := func(id string, count int) store.IDRange {
		t.Helper()
		return mustGet[store.IDRange](t)(s.AllocIDRange(ctx, id, first, size, count))
	}
	_, err := s.GetIDRange(ctx, "sbx_a")
	wantCode(t, err, api.CodeNotFound)
	a, b, c := alloc("sbx_a", 3), alloc("sbx_b", 3), alloc("sbx_c", 3)
	diff(t, "ranges", []store.IDRange{
		{SandboxID: "sbx_a", HostID: first, Size: size},
		{SandboxID: "sbx_b", HostID: first + size, Size: size},
		{SandboxID: "sbx_c", HostID: first + 2*size, Size: size},
	}, []store.IDRange{a, b, c})
	diff(t, "again", a, alloc("sbx_a", 3))
	diff(t, "get", b, mustGet[store.IDRange](t)(s.GetIDRange(ctx, "sbx_b")))
	_, err = s.AllocIDRange(ctx, "sbx_d", first, size, 3)
	wantCode(t, err, api.CodeResourceExhausted)

	mustDo(t, s.ReleaseIDRange(ctx, "sbx_b"))
	mustDo(t, s.ReleaseIDRange(ctx, "sbx_b")) // twice is fine
	_, err = s.GetIDRange(ctx, "sbx_b")
	wantCode(t, err, api.CodeNotFound)
	diff(t, "reused", store.IDRange{SandboxID: "sbx_d", HostID: first + size, Size: size}, alloc("sbx_d", 3))
	diff(t, "list", []store.IDRange{a, {SandboxID: "sbx_d", HostID: first + size, Size: size}, c},
		mustGet[[]store.IDRange](t)(s.ListIDRanges(ctx)))

	// Allocations at once get distinct ranges.
	const n = 20
	got := make([]store.IDRange, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = s.AllocIDRange(ctx, fmt.Sprintf("sbx_p%d", i), first, size, 100)
		})
	}
	wg.Wait()
	seen := map[uint32]string{a.HostID: "sbx_a", c.HostID: "sbx_c", first + size: "sbx_d"}
	for i, r := range got {
		mustDo(t, errs[i])
		if other, ok := seen[r.HostID]; ok {
			t.Errorf("%s and %s both hold %d", r.SandboxID, other, r.HostID)
		}
		seen[r.HostID] = r.SandboxID
		if r.HostID >= first+(n+3)*size {
			t.Errorf("%s got %d: not the lowest free", r.SandboxID, r.HostID)
		}
	}
}
