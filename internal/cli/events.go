package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func (a *app) eventsCmd() *cobra.Command {
	var (
		q      cove.EventQuery
		follow bool
	)
	c := &cobra.Command{
		Use:   "events",
		Short: "Show the team's events, oldest first; --follow streams new ones",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			print := func(e api.Event) error {
				if a.json {
					b, _ := json.Marshal(e)
					_, err := fmt.Fprintln(a.env.Stdout, string(b))
					return err
				}
				_, err := fmt.Fprintf(a.env.Stdout, "%s  %-20s %s %s %s\n", e.Time.Local().Format(time.TimeOnly),
					e.Type, e.SandboxID, dash(e.CommandID), eventData(e.Data))
				return err
			}
			if follow {
				err := cl.FollowEvents(cmd.Context(), q, print)
				if errors.Is(err, context.Canceled) {
					return nil
				}
				return err
			}
			for {
				page, err := cl.Events(cmd.Context(), q)
				if err != nil {
					return err
				}
				for _, e := range page.Items {
					if err := print(e); err != nil {
						return err
					}
				}
				if page.NextCursor == "" {
					return nil
				}
				q.After = page.NextCursor
			}
		},
	}
	f := c.Flags()
	f.StringVar(&q.Sandbox, "sandbox", "", "only events of this sandbox (ID or name)")
	f.StringSliceVar(&q.Types, "type", nil, "only these types (comma-separated)")
	f.StringVar(&q.After, "after", "", "only events after this event ID")
	f.BoolVarP(&follow, "follow", "f", false, "stream new events until interrupted")
	c.Flags().BoolVar(&a.json, "json", false, "print one JSON object per event")
	return c
}

func eventData(d map[string]any) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, d[k]))
	}
	return strings.Join(parts, " ")
}
