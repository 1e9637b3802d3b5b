package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
)

func (a *app) webhooksCmd() *cobra.Command {
	hooks := &cobra.Command{Use: "webhooks", Short: "Send the team's events to URLs as signed POSTs"}
	var events []string
	add := &cobra.Command{
		Use:   "add URL",
		Short: "Register a URL for the team's events and print its signing secret (shown once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			// A second webhook of one URL would deliver every event twice.
			if w, ok, err := existingWebhook(cmd.Context(), cl, args[0]); err != nil {
				return err
			} else if ok {
				return a.existingWebhookFound(w, events)
			}
			resp, err := cl.CreateWebhook(cmd.Context(), api.CreateWebhookRequest{URL: args[0], Events: events})
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(resp)
			}
			fmt.Fprintf(a.env.Stdout, "webhook %s → %s (events: %s)\nsigning secret (shown once): %s\n",
				resp.Webhook.ID, resp.Webhook.URL, strings.Join(resp.Webhook.Events, ","), resp.Secret)
			return nil
		},
	}
	add.Flags().StringSliceVar(&events, "event", nil, "event types to send: a type (sandbox.running), a family (sandbox.*) or *; repeatable (default *)")
	a.jsonFlag(add)

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the team's webhooks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			var all []api.Webhook
			cursor := ""
			for {
				page, err := cl.ListWebhooks(cmd.Context(), 0, cursor)
				if err != nil {
					return err
				}
				all = append(all, page.Items...)
				if cursor = page.NextCursor; cursor == "" {
					break
				}
			}
			if a.json {
				return a.printJSON(all)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tURL\tEVENTS\tCREATED")
			for _, w := range all {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", w.ID, w.URL, strings.Join(w.Events, ","), w.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	a.jsonFlag(ls)

	rm := &cobra.Command{
		Use:   "rm ID",
		Short: "Delete a webhook and its pending deliveries",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			return cl.DeleteWebhook(cmd.Context(), args[0])
		},
	}

	var limit int
	deliveries := &cobra.Command{
		Use:   "deliveries ID",
		Short: "Show a webhook's latest deliveries and their attempts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			page, err := cl.ListDeliveries(cmd.Context(), args[0], limit, "")
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(page.Items)
			}
			tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tEVENT\tSTATE\tATTEMPTS\tLAST")
			for _, d := range page.Items {
				last := "-"
				if n := len(d.Attempts); n > 0 {
					at := d.Attempts[n-1]
					last = fmt.Sprintf("%d in %dms", at.StatusCode, at.LatencyMS)
					if at.Error != "" {
						last += ": " + at.Error
					}
				}
				fmt.Fprintf(tw, "%s\t%s %s\t%s\t%d\t%s\n", d.ID, d.EventType, d.EventID, d.State, d.AttemptCount, last)
			}
			return tw.Flush()
		},
	}
	deliveries.Flags().IntVar(&limit, "limit", 20, "how many of the newest deliveries")
	a.jsonFlag(deliveries)

	hooks.AddCommand(add, ls, rm, deliveries)
	return hooks
}
