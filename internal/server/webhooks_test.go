package server_test

import (
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/server"
	"github.com/cove-dev/cove/internal/store"
)

func TestWebhooks(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	resp, err := h.srv.CreateWebhook(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/hook", Events: []string{"sandbox.*", "command.exited", "sandbox.*"}})
	if err != nil {
		t.Fatal(err)
	}
	w := resp.Webhook
	if !strings.HasPrefix(w.ID, "whk_") || !strings.HasPrefix(resp.Secret, "whsec_") || strings.Join(w.Events, ",") != "command.exited,sandbox.*" {
		t.Fatalf("created %+v", resp)
	}
	// Another team sees none of it.
	_, err = h.srv.GetWebhook(ctx, h.b, w.ID)
	wantCode(t, err, api.CodeNotFound)
	_, err = h.srv.ListDeliveries(ctx, h.b, w.ID, server.Page{})
	wantCode(t, err, api.CodeNotFound)
	wantCode(t, h.srv.DeleteWebhook(ctx, h.b, w.ID), api.CodeNotFound)
	if l, err := h.srv.ListWebhooks(ctx, h.b, server.Page{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("team b's list: %+v %v", l, err)
	}
	if l, err := h.srv.ListWebhooks(ctx, h.a, server.Page{}); err != nil || len(l.Items) != 1 || l.Items[0].ID != w.ID {
		t.Fatalf("team a's list: %+v %v", l, err)
	}

	// The team's matching events are enqueued for it, others are not.
	sb := h.running(t, h.a, "hooked")
	h.running(t, h.b, "other")
	l, err := h.srv.ListDeliveries(ctx, h.a, w.ID, server.Page{})
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

	for _, tt := range []api.CreateWebhookRequest{
		{URL: "http://127.0.0.1:8080/"},
		{URL: "http://localhost/"},
		{URL: "file:///etc/passwd"},
		{URL: "https://93.184.215.14/", Events: []string{"Sandbox.Running"}},
		{URL: "https://93.184.215.14/", Events: []string{"sandbox.**"}},
		{URL: "https://93.184.215.14/", Events: []string{""}},
	} {
		_, err := h.srv.CreateWebhook(ctx, h.a, tt)
		wantCode(t, err, api.CodeInvalidArgument)
	}
	for range server.MaxWebhooksPerTeam - 1 {
		if _, err := h.srv.CreateWebhook(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = h.srv.CreateWebhook(ctx, h.a, api.CreateWebhookRequest{URL: "https://93.184.215.14/"})
	wantCode(t, err, api.CodeResourceExhausted)

	if err := h.srv.DeleteWebhook(ctx, h.a, w.ID); err != nil {
		t.Fatal(err)
	}
	if d, _ := h.st.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: w.ID}); len(d) != 0 {
		t.Fatalf("deliveries left after delete: %+v", d)
	}
	_, err = h.srv.GetWebhook(ctx, h.a, w.ID)
	wantCode(t, err, api.CodeNotFound)
}
