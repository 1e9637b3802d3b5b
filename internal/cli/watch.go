package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

// watchCmd streams a directory's file events until interrupted, resuming
// by sequence number when the connection breaks.
func (a *app) watchCmd() *cobra.Command {
	var q cove.WatchQuery
	var noWake bool
	c := &cobra.Command{
		Use:   "watch SANDBOX PATH",
		Short: "Stream the changes under a directory of a sandbox (-r: and below it) until interrupted",
		Long: "Prints one line per change: its sequence number, type and path (and size of a file), or with --json the record as JSON.\n" +
			"A `dropped` line counts changes not reported (past the rate, or lost while away); --after SEQ resumes after a record.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			q.Path, q.NoWake = args[1], noWake
			err = cl.WatchFiles(cmd.Context(), args[0], q, func(ev api.FileEvent) error {
				if a.json {
					b, _ := json.Marshal(ev)
					_, err := fmt.Fprintln(a.env.Stdout, string(b))
					return err
				}
				_, err := fmt.Fprintln(a.env.Stdout, watchLine(ev))
				return err
			})
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	f := c.Flags()
	f.BoolVarP(&q.Recursive, "recursive", "r", false, "watch every directory below PATH too, those made later included")
	f.Int64Var(&q.After, "after", 0, "resume after this sequence number (a record's seq)")
	f.BoolVar(&noWake, "no-wake", false, "fail on an asleep sandbox instead of waking it")
	f.BoolVar(&a.json, "json", false, "print each record as one JSON object")
	return c
}

// watchLine is a record as one line of text.
func watchLine(ev api.FileEvent) string {
	switch {
	case ev.Type == api.FileDropped && ev.Count == 0:
		return fmt.Sprintf("%d  dropped  (an unknown number: the watch's journal is gone; list the directory again)", ev.Seq)
	case ev.Type == api.FileDropped:
		return fmt.Sprintf("%d  dropped  %d changes not reported", ev.Seq, ev.Count)
	case ev.Entry != nil && ev.Entry.Type == api.FileTypeFile:
		return fmt.Sprintf("%d  %-6s %s  (%d bytes)", ev.Seq, ev.Type, ev.Path, ev.Entry.Size)
	case ev.Entry != nil && ev.Entry.Type == api.FileTypeDir:
		return fmt.Sprintf("%d  %-6s %s/", ev.Seq, ev.Type, ev.Path)
	}
	return fmt.Sprintf("%d  %-6s %s", ev.Seq, ev.Type, ev.Path)
}
