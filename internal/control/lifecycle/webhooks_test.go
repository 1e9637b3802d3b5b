package lifecycle_test

import (
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/page"
	"github.com/cove-dev/cove/internal/store"
)

// TestWebhooks: the team's matching events are enqueued for its webhooks
// as the core appends them (the service's own rules are tested in
// internal/webhooks).
func TestWebhooks(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	resp, err := h.plane.Webhooks.Create(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/hook", Events: []string{"sandbox.*", "command.exited", "sandbox.*"}})
	if err != nil {
		t.Fatal(err)
	}
	w := resp.Webhook
	if !strings.HasPrefix(w.ID, "whk_") || !strings.HasPrefix(resp.Secret, "whsec_") || strings.Join(w.Events, ",") != "command.exited,sandbox.*" {
		t.Fatalf("created %+v", resp)
	}
	// Another team sees none of it.
	_, err = h.plane.Webhooks.Get(ctx, h.b, w.ID)
	wantCode(t, err, api.CodeNotFound)
	_, err = h.plane.Webhooks.Deliveries(ctx, h.b, w.ID, page.Page{})
	wantCode(t, err, api.CodeNotFound)
	wantCode(t, h.plane.Webhooks.Delete(ctx, h.b, w.ID), api.CodeNotFound)
	if l, err := h.plane.Webhooks.List(ctx, h.b, page.Page{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("team b's list: %+v %v", l, err)
	}
	if l, err := h.plane.Webhooks.List(ctx, h.a, page.Page{}); err != nil || len(l.Items) != 1 || l.Items[0].ID != w.ID {
		t.Fatalf("team a's list: %+v %v", l, err)
	}

	// The team's matching events are enqueued for it, others are not.
	sb := h.running(t, h.a, "hooked")
	h.running(t, h.b, "other")
	l, err := h.plane.Webhooks.Deliveries(ctx, h.a, w.ID, page.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, d := range l.Items {
		types = append([]string{d.EventType}, types...)
		if d.State != api.DeliveryPending {
			t.Errorf("delivery %+v: no dispatcher runs here", d)
		}
	}
	if strings.Join(types, ",") != "sandbox.creating,sandbox.running" {
		t.Fatalf("deliveries of %s: %v", sb.ID, types)
	}

	if err := h.plane.Webhooks.Delete(ctx, h.a, w.ID); err != nil {
		t.Fatal(err)
	}
	if d, _ := h.st.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: w.ID}); len(d) != 0 {
		t.Fatalf("deliveries left after delete: %+v", d)
	}
	_, err = h.plane.Webhooks.Get(ctx, h.a, w.ID)
	wantCode(t, err, api.CodeNotFound)
}
