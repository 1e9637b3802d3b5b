package remote

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cove-dev/cove/internal/node/nodeapi"
)

// reconnectAfter is the pause before the event stream is opened again
// after a cut.
const reconnectAfter = 500 * time.Millisecond

// Run keeps the node's event stream open until ctx is done or the client
// closes, resuming after a cut from the last event delivered, and hands
// command exits to OnExit and network denials to OnDenied, in order.
func (c *Client) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	var epoch string
	var after int64
	for ctx.Err() == nil {
		err := c.events(ctx, &epoch, &after)
		if ctx.Err() != nil {
			return
		}
		c.cfg.Log.Info("the node's event stream was cut; opening it again", "node", c.cfg.NodeID, "after", after, "err", err)
		select {
		case <-time.After(reconnectAfter):
		case <-ctx.Done():
		}
	}
}

// events reads the stream once, from after, until it breaks.
func (c *Client) events(ctx context.Context, epoch *string, after *int64) error {
	q := url.Values{"after": {strconv.FormatInt(*after, 10)}, "epoch": {*epoch}}
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "events", query: q})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if e := resp.Header.Get(nodeapi.EventsEpochHeader); e != *epoch {
		if *epoch != "" {
			c.cfg.Log.Warn("the node restarted: its events start again", "node", c.cfg.NodeID)
		}
		*epoch, *after = e, 0
	}
	if lost := resp.Header.Get(nodeapi.EventsLostHeader); lost != "" && lost != "0" {
		c.cfg.Log.Warn("events of the node were lost from its backlog", "node", c.cfg.NodeID, "lost", lost)
	}
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for {
		var e nodeapi.Event
		if err := dec.Decode(&e); err != nil {
			return c.transportErr(ctx, err)
		}
		if e.Seq <= *after {
			continue
		}
		c.deliver(e)
		*after = e.Seq
	}
}

func (c *Client) deliver(e nodeapi.Event) {
	switch e.Kind {
	case nodeapi.EventExit:
		if c.cfg.OnExit != nil && e.Exit != nil {
			c.cfg.OnExit(e.Sandbox, e.Command, *e.Exit, e.Lost)
		}
	case nodeapi.EventDenied:
		if c.cfg.OnDenied != nil && e.Observation != nil {
			c.cfg.OnDenied(e.Sandbox, *e.Observation, e.Suppressed)
		}
	case nodeapi.EventInjected:
		if c.cfg.OnInjected != nil && e.Injected != nil {
			c.cfg.OnInjected(e.Sandbox, *e.Injected)
		}
	default:
		c.cfg.Log.Debug("an event of a kind this control plane does not know", "node", c.cfg.NodeID, "kind", e.Kind)
	}
}
