package storetest

import (
	"fmt"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

func webhook(team, id string, events ...string) store.Webhook {
	return store.Webhook{
		Webhook: api.Webhook{ID: id, TeamID: team, URL: "https://example.test/" + id, Events: events, CreatedAt: at(1).UTC()},
		Secret:  "whsec_" + id,
	}
}

func testWebhooks(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	a1 := webhook("team_a", "whk_1", "*")
	a2 := webhook("team_a", "whk_2", "sandbox.*", "command.exited")
	b3 := webhook("team_b", "whk_3", "sandbox.running")
	for _, w := range []store.Webhook{a1, a2, b3} {
		mustDo(t, s.CreateWebhook(ctx, w))
	}
	wantCode(t, s.CreateWebhook(ctx, a1), api.CodeConflict)
	wantCode(t, s.CreateWebhook(ctx, webhook("team_missing", "whk_9")), api.CodeNotFound)

	diff(t, "get", a2, mustGet[store.Webhook](t)(s.GetWebhook(ctx, "team_a", "whk_2")))
	diff(t, "get in any team", b3, mustGet[store.Webhook](t)(s.GetWebhook(ctx, "", "whk_3")))
	_, err := s.GetWebhook(ctx, "team_b", "whk_1") // another team's
	wantCode(t, err, api.CodeNotFound)

	diff(t, "list", []store.Webhook{a1, a2}, mustGet[[]store.Webhook](t)(s.ListWebhooks(ctx, store.WebhookFilter{TeamID: "team_a"})))
	diff(t, "page", []store.Webhook{a2}, mustGet[[]store.Webhook](t)(s.ListWebhooks(ctx, store.WebhookFilter{TeamID: "team_a", After: "whk_1", Limit: 1})))

	// The secret is replaced only while it is what the caller saw.
	if ok, err := s.ReplaceWebhookSecret(ctx, "whk_2", "whsec_other", "sealed1:x"); err != nil || ok {
		t.Fatalf("replace a secret that changed: %v %v", ok, err)
	}
	if ok, err := s.ReplaceWebhookSecret(ctx, "whk_2", a2.Secret, "sealed1:x"); err != nil || !ok {
		t.Fatalf("replace: %v %v", ok, err)
	}
	if ok, err := s.ReplaceWebhookSecret(ctx, "whk_missing", a2.Secret, "sealed1:x"); err != nil || ok {
		t.Fatalf("replace a missing webhook's: %v %v", ok, err)
	}
	a2.Secret = "sealed1:x"
	diff(t, "get after replace", a2, mustGet[store.Webhook](t)(s.GetWebhook(ctx, "team_a", "whk_2")))

	wantCode(t, s.DeleteWebhook(ctx, "team_b", "whk_1"), api.CodeNotFound)
	mustDo(t, s.DeleteWebhook(ctx, "team_a", "whk_1"))
	wantCode(t, s.DeleteWebhook(ctx, "team_a", "whk_1"), api.CodeNotFound)
	diff(t, "list after delete", []store.Webhook{a2}, mustGet[[]store.Webhook](t)(s.ListWebhooks(ctx, store.WebhookFilter{TeamID: "team_a"})))
}

func testWebhookOutbox(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	mustDo(t, s.CreateWebhook(ctx, webhook("team_a", "whk_all", "*")))
	mustDo(t, s.CreateWebhook(ctx, webhook("team_a", "whk_cmd", "command.*")))
	mustDo(t, s.CreateWebhook(ctx, webhook("team_b", "whk_b", "*")))

	if _, ok, err := s.NextDeliveryAt(ctx); err != nil || ok {
		t.Fatalf("next delivery of an empty outbox: %v %v", ok, err)
	}
	e1, err := s.AppendEvent(ctx, "team_a", api.Event{Type: "sandbox.running", SandboxID: "sbx_1", Time: at(2), Data: map[string]any{"n": float64(1)}})
	mustDo(t, err)
	e2, err := s.AppendEvent(ctx, "team_a", api.Event{Type: "command.started", SandboxID: "sbx_1", CommandID: "cmd_1", Time: at(3)})
	mustDo(t, err)

	next, ok, err := s.NextDeliveryAt(ctx)
	mustDo(t, err)
	if !ok || !next.Equal(at(2)) {
		t.Fatalf("next delivery at %v (%v); want %v", next, ok, at(2))
	}
	// Not yet due.
	if due := mustGet[[]store.DueDelivery](t)(s.DueDeliveries(ctx, at(1), 10)); len(due) != 0 {
		t.Fatalf("due before their time: %+v", due)
	}
	// The oldest due delivery of each webhook: whk_all's first, whk_cmd's only.
	due := mustGet[[]store.DueDelivery](t)(s.DueDeliveries(ctx, at(5), 10))
	type row struct{ Webhook, Event, Type, URL, Secret string }
	var got []row
	for _, d := range due {
		got = append(got, row{d.Delivery.WebhookID, d.Event.ID, d.Event.Type, d.URL, d.Secret})
		if d.Delivery.EventID != d.Event.ID || d.Delivery.State != api.DeliveryPending {
			t.Errorf("delivery %+v of event %s", d.Delivery, d.Event.ID)
		}
	}
	diff(t, "due", []row{
		{"whk_all", e1.ID, "sandbox.running", "https://example.test/whk_all", "whsec_whk_all"},
		{"whk_cmd", e2.ID, "command.started", "https://example.test/whk_cmd", "whsec_whk_cmd"},
	}, got)
	diff(t, "event round trip", e1, due[0].Event)
	if l := mustGet[[]store.DueDelivery](t)(s.DueDeliveries(ctx, at(5), 1)); len(l) != 1 {
		t.Fatalf("limit 1: %d", len(l))
	}

	// A failed attempt with a retry, then success.
	first := due[0].Delivery.ID
	retry := at(10).UTC()
	mustDo(t, s.RecordAttempt(ctx, first, api.DeliveryAttempt{Time: at(5), StatusCode: 500, LatencyMS: 7, Error: "HTTP 500"}, api.DeliveryPending, &retry))
	due = mustGet[[]store.DueDelivery](t)(s.DueDeliveries(ctx, at(6), 10))
	if len(due) != 2 || due[0].Event.ID != e2.ID {
		// whk_all's first is waiting: its second (e2) is due now.
		t.Fatalf("due while the first waits: %+v", due)
	}
	mustDo(t, s.RecordAttempt(ctx, first, api.DeliveryAttempt{Time: at(11), StatusCode: 204, LatencyMS: 3}, api.DeliveryDelivered, nil))
	wantCode(t, s.RecordAttempt(ctx, "whd_99999", api.DeliveryAttempt{}, api.DeliveryFailed, nil), api.CodeNotFound)

	l := mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_all"}))
	if len(l) != 2 || l[1].ID != first {
		t.Fatalf("deliveries, newest first: %+v", l)
	}
	d := l[1]
	d.CreatedAt = d.CreatedAt.UTC()
	diff(t, "delivered", api.Delivery{
		ID: first, WebhookID: "whk_all", EventID: e1.ID, EventType: "sandbox.running", State: api.DeliveryDelivered,
		AttemptCount: 2, CreatedAt: at(2).UTC(),
		Attempts: []api.DeliveryAttempt{
			{Time: at(5).UTC(), StatusCode: 500, LatencyMS: 7, Error: "HTTP 500"},
			{Time: at(11).UTC(), StatusCode: 204, LatencyMS: 3},
		},
	}, d)
	diff(t, "page", []api.Delivery{l[1]}, mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_all", After: l[0].ID, Limit: 5})))
	_, err = s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_all", After: "garbage"})
	wantCode(t, err, api.CodeInvalidArgument)

	// Only the latest attempts are kept; all are counted.
	for i := range store.MaxAttemptsKept + 3 {
		mustDo(t, s.RecordAttempt(ctx, l[0].ID, api.DeliveryAttempt{Time: at(20 + i), StatusCode: 500}, api.DeliveryPending, &retry))
	}
	l = mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_all", Limit: 1}))
	if got := l[0]; got.AttemptCount != store.MaxAttemptsKept+3 || len(got.Attempts) != store.MaxAttemptsKept || !got.Attempts[0].Time.Equal(at(23)) {
		t.Fatalf("attempts kept: count %d, kept %d, first %v", got.AttemptCount, len(got.Attempts), got.Attempts[0].Time)
	}

	// Team b got nothing of team a's.
	if l := mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_b"})); len(l) != 0 {
		t.Fatalf("another team's webhook got %+v", l)
	}
	// Deleting a webhook drops its deliveries; expiring events drops theirs.
	mustDo(t, s.DeleteWebhook(ctx, "team_a", "whk_cmd"))
	if l := mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_cmd"})); len(l) != 0 {
		t.Fatalf("deliveries of a deleted webhook: %+v", l)
	}
	if _, err := s.DeleteEventsBefore(ctx, at(3)); err != nil {
		t.Fatal(err)
	}
	l = mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_all"}))
	if len(l) != 1 || l[0].EventID != e2.ID {
		t.Fatalf("deliveries after expiry: %+v", l)
	}
}

// testWebhookDueByTeam: due deliveries come team by team, each team with
// the heads of at most perTeam of its webhooks, however many webhooks an
// older team has.
func testWebhookDueByTeam(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	for i := range 5 {
		mustDo(t, s.CreateWebhook(ctx, webhook("team_a", fmt.Sprintf("whk_a%d", i), "*")))
	}
	mustDo(t, s.CreateWebhook(ctx, webhook("team_b", "whk_b", "*")))
	for i := range 3 {
		_, err := s.AppendEvent(ctx, "team_a", api.Event{Type: "sandbox.running", Time: at(2 + i)})
		mustDo(t, err)
	}
	_, err := s.AppendEvent(ctx, "team_b", api.Event{Type: "sandbox.running", Time: at(9)})
	mustDo(t, err)
	type row struct{ Team, Webhook string }
	var got []row
	for _, d := range mustGet[[]store.DueDelivery](t)(s.DueDeliveries(ctx, at(10), 2)) {
		got = append(got, row{d.TeamID, d.Delivery.WebhookID})
	}
	diff(t, "due, two per team", []row{{"team_a", "whk_a0"}, {"team_a", "whk_a1"}, {"team_b", "whk_b"}}, got)
}

// backlogSetter is a store whose webhook backlog bound can be set.
type backlogSetter interface{ SetWebhookBacklog(n int) }

// testWebhookBacklog: past a team's backlog bound the oldest pending
// deliveries fail with reason backlog_full (down to nine tenths of the
// bound), other teams' untouched; a webhook.dropped event says how many
// and goes to each webhook that lost some, due before their backlog. An
// attempt that ends after its delivery was dropped leaves it failed.
func testWebhookBacklog(t *testing.T, s store.Store) {
	bs, ok := s.(backlogSetter)
	if !ok {
		t.Skip("the store's backlog bound cannot be set")
	}
	bs.SetWebhookBacklog(10)
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	mustDo(t, s.CreateWebhook(ctx, webhook("team_a", "whk_a", "sandbox.*")))
	mustDo(t, s.CreateWebhook(ctx, webhook("team_b", "whk_b", "*")))
	for range 10 {
		_, err := s.AppendEvent(ctx, "team_a", api.Event{Type: "sandbox.running", Time: at(2)})
		mustDo(t, err)
		_, err = s.AppendEvent(ctx, "team_b", api.Event{Type: "sandbox.running", Time: at(2)})
		mustDo(t, err)
	}
	first := mustGet[[]store.DueDelivery](t)(s.DueDeliveries(ctx, at(3), 1))[0].Delivery.ID
	// The 11th of team a's is past the bound: 2 go (down to 9).
	_, err := s.AppendEvent(ctx, "team_a", api.Event{Type: "sandbox.running", Time: at(4)})
	mustDo(t, err)

	l := mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_a"}))
	states := map[string]int{}
	for _, d := range l {
		states[string(d.State)+"/"+d.Reason]++
	}
	diff(t, "team a's deliveries", map[string]int{"pending/": 10, "failed/backlog_full": 2}, states)
	if d := l[len(l)-1]; d.ID != first || d.State != api.DeliveryFailed || d.Reason != api.ReasonBacklogFull {
		t.Errorf("the oldest delivery %+v", d)
	}
	if n := len(mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_b"}))); n != 10 {
		t.Errorf("team b has %d deliveries, want its 10 untouched", n)
	}
	// The notice is whk_a's next due delivery, though its pattern does not
	// name webhook.* and older deliveries wait.
	due := mustGet[[]store.DueDelivery](t)(s.DueDeliveries(ctx, at(5), 1))
	var notice store.DueDelivery
	for _, d := range due {
		if d.Delivery.WebhookID == "whk_a" {
			notice = d
		}
	}
	if notice.Event.Type != api.EventWebhookDropped || notice.Event.Data["dropped"] != float64(2) ||
		notice.Event.Data["reason"] != api.ReasonBacklogFull {
		t.Fatalf("whk_a's next due delivery: %+v", notice)
	}
	evs := mustGet[[]api.Event](t)(s.ListEvents(ctx, store.EventFilter{TeamID: "team_a", Types: []string{api.EventWebhookDropped}}))
	if len(evs) != 1 || evs[0].ID != notice.Event.ID {
		t.Errorf("team a's webhook.dropped events: %+v", evs)
	}

	// A failed attempt of a dropped delivery does not bring it back.
	retry := at(20).UTC()
	mustDo(t, s.RecordAttempt(ctx, first, api.DeliveryAttempt{Time: at(5), Error: "no answer"}, api.DeliveryPending, &retry))
	l = mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_a"}))
	if d := l[len(l)-1]; d.State != api.DeliveryFailed || d.Reason != api.ReasonBacklogFull || d.AttemptCount != 1 || d.NextAttemptAt != nil {
		t.Errorf("a dropped delivery after a failed attempt: %+v", d)
	}
}
