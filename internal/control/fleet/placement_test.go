package fleet

import (
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
)

// TestPlacement: a sandbox goes to the ready node with the most room that
// has its template, never over capacity × overcommit, never to a
// draining, lost or removed node.
func TestPlacement(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, h *harness)
		cfg   Config
		cpus  float64
		tmpl  string
		want  string // node name, or "" for resource_exhausted
	}{
		{name: "most room", cpus: 1, want: "b", setup: func(t *testing.T, h *harness) {
			h.join(t, "a", 2)
			h.join(t, "b", 4)
		}},
		{name: "most room after reservations", cpus: 1, want: "b", setup: func(t *testing.T, h *harness) {
			h.join(t, "a", 4)
			h.join(t, "b", 2)
			must(t, h.f.Admit(t.Context(), spec("sbx_x", 3))) // only a has room
		}},
		{name: "template only on one node", cpus: 1, tmpl: "gpu-box", want: "a", setup: func(t *testing.T, h *harness) {
			r := registration("a", 2)
			r.Templates = []string{"managed", "gpu-box"}
			_, err := h.f.Register(t.Context(), "", r)
			must(t, err)
			h.join(t, "b", 8)
		}},
		{name: "template nowhere", cpus: 1, tmpl: "other", setup: func(t *testing.T, h *harness) {
			h.join(t, "a", 8)
		}},
		{name: "no room", cpus: 3, setup: func(t *testing.T, h *harness) {
			h.join(t, "a", 2)
			h.join(t, "b", 2)
		}},
		{name: "exactly full fits", cpus: 2, want: "a", setup: func(t *testing.T, h *harness) {
			h.join(t, "a", 2)
		}},
		{name: "overcommit", cpus: 3, want: "a", cfg: Config{CPUOvercommit: 2, MemoryOvercommit: 2}, setup: func(t *testing.T, h *harness) {
			h.join(t, "a", 2)
		}},
		{name: "draining gets nothing", cpus: 1, want: "a", setup: func(t *testing.T, h *harness) {
			h.join(t, "a", 2)
			h.join(t, "b", 8)
			_, err := h.f.Drain(t.Context(), "b")
			must(t, err)
		}},
		{name: "only a draining node", cpus: 1, setup: func(t *testing.T, h *harness) {
			h.join(t, "b", 8)
			_, err := h.f.Drain(t.Context(), "b")
			must(t, err)
		}},
		{name: "undrained takes again", cpus: 1, want: "b", setup: func(t *testing.T, h *harness) {
			h.join(t, "b", 8)
			_, err := h.f.Drain(t.Context(), "b")
			must(t, err)
			_, err = h.f.Undrain(t.Context(), "b")
			must(t, err)
		}},
		{name: "removed gets nothing", cpus: 1, want: "a", setup: func(t *testing.T, h *harness) {
			h.join(t, "a", 2)
			h.join(t, "b", 8)
			must(t, h.f.Remove(t.Context(), "b"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.cfg)
			tt.setup(t, h)
			s := spec("sbx_1", tt.cpus)
			if tt.tmpl != "" {
				s.Template = tt.tmpl
			}
			err := h.f.Admit(t.Context(), s)
			if tt.want == "" {
				wantCode(t, err, api.CodeResourceExhausted)
				return
			}
			must(t, err)
			if got := h.placedOn("sbx_1"); got != tt.want {
				t.Fatalf("placed on %q; want %q", got, tt.want)
			}
		})
	}
}

// TestConcurrentAdmits: twenty creates at once over two nodes of 4 CPUs
// fill them exactly, never over capacity; a draining node takes none.
func TestConcurrentAdmits(t *testing.T) {
	for _, drain := range []bool{false, true} {
		h := newHarness(t, Config{})
		h.join(t, "a", 4)
		h.join(t, "b", 4)
		if drain {
			_, err := h.f.Drain(t.Context(), "b")
			must(t, err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Go(func() { errs[i] = h.f.Admit(t.Context(), spec(sbxID(i), 1)) })
		}
		wg.Wait()
		ok, per := 0, map[string]int{}
		for i, err := range errs {
			if err == nil {
				ok++
				per[h.placedOn(sbxID(i))]++
				continue
			}
			wantCode(t, err, api.CodeResourceExhausted)
		}
		want := map[string]int{"a": 4, "b": 4}
		if drain {
			want = map[string]int{"a": 4}
		}
		if ok != len(want)*4 || per["a"] != want["a"] || per["b"] != want["b"] {
			t.Fatalf("drain=%v: %d admitted, per node %v; want %v", drain, ok, per, want)
		}
		nodes, err := h.f.Nodes(t.Context())
		must(t, err)
		for _, n := range nodes {
			if n.Reserved.CPUs > n.Capacity.CPUs {
				t.Fatalf("node %s reserves %g of %g CPUs", n.Name, n.Reserved.CPUs, n.Capacity.CPUs)
			}
		}
	}
}

func sbxID(i int) string { return "sbx_" + string(rune('a'+i)) }

// TestDestroyFreesRoom: a destroyed sandbox gives its reservation back; an
// asleep one reserves nothing.
func TestDestroyFreesRoom(t *testing.T) {
	h := newHarness(t, Config{})
	h.join(t, "a", 2)
	ctx := t.Context()
	must(t, h.f.Admit(ctx, spec("sbx_1", 2)))
	must(t, h.f.Start(ctx, spec("sbx_1", 2)))
	wantCode(t, h.f.Admit(ctx, spec("sbx_2", 1)), api.CodeResourceExhausted)
	must(t, h.f.Destroy(ctx, "sbx_1"))
	must(t, h.f.Admit(ctx, spec("sbx_2", 2)))
	must(t, h.f.Start(ctx, spec("sbx_2", 2)))
	if _, err := h.f.FinishSleep(ctx, "sbx_2"); err != nil {
		t.Fatal(err)
	}
	must(t, h.f.Admit(ctx, spec("sbx_3", 2)))
}

// TestAdmitRefusedByNode: a node that refuses gives the reservation back.
func TestAdmitRefusedByNode(t *testing.T) {
	h := newHarness(t, Config{})
	h.join(t, "a", 2)
	h.node("a").Fail("admit", api.Errorf(api.CodeResourceExhausted, "disk full"))
	wantCode(t, h.f.Admit(t.Context(), spec("sbx_1", 2)), api.CodeResourceExhausted)
	h.node("a").Fail("admit", nil)
	must(t, h.f.Admit(t.Context(), spec("sbx_2", 2)))
}
