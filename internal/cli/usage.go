package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/api"
	cove "github.com/cove-dev/cove/sdk/go"
)

func (a *app) metricsCmd() *cobra.Command {
	var since, step time.Duration
	c := &cobra.Command{
		Use:   "metrics REF",
		Short: "Show a sandbox's latest CPU, memory, disk and network use with sparklines over --since",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			now := time.Now()
			m, err := cl.Metrics(cmd.Context(), args[0], cove.MetricsQuery{From: now.Add(-since), To: now, Step: step})
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(m)
			}
			a.printMetrics(m)
			return nil
		},
	}
	c.Flags().DurationVar(&since, "since", time.Hour, "how far back the sparklines reach")
	c.Flags().DurationVar(&step, "step", 0, "time per point (default: the server's choice, at most 1000 points)")
	a.jsonFlag(c)
	return c
}

func (a *app) printMetrics(m api.Metrics) {
	out := a.env.Stdout
	if len(m.Samples) == 0 {
		fmt.Fprintf(out, "no samples between %s and %s\n", m.From.Local().Format(time.DateTime), m.To.Local().Format(time.DateTime))
	} else {
		last := m.Samples[len(m.Samples)-1]
		fmt.Fprintf(out, "%s, %d samples of %ds; latest at %s\n\n", m.SandboxID, len(m.Samples), m.StepS, last.Time.Local().Format(time.DateTime))
		series := func(f func(api.MetricSample) int64) []int64 {
			v := make([]int64, len(m.Samples))
			for i, s := range m.Samples {
				v[i] = f(s)
			}
			return v
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		row := func(name, now string, v []int64) { fmt.Fprintf(tw, "%s\t%s\t%s\n", name, now, sparkline(v, 60)) }
		row("cpu", fmt.Sprintf("%dm", last.CPUMillicores), series(func(s api.MetricSample) int64 { return s.CPUMillicores }))
		row("memory", humanBytes(last.MemoryBytes), series(func(s api.MetricSample) int64 { return s.MemoryBytes }))
		row("memory peak", humanBytes(last.MemoryPeakBytes), series(func(s api.MetricSample) int64 { return s.MemoryPeakBytes }))
		row("disk", humanBytes(last.DiskBytes), series(func(s api.MetricSample) int64 { return s.DiskBytes }))
		row("net in", humanBytes(last.NetInBytes), series(func(s api.MetricSample) int64 { return s.NetInBytes }))
		row("net out", humanBytes(last.NetOutBytes), series(func(s api.MetricSample) int64 { return s.NetOutBytes }))
		tw.Flush()
	}
	for _, g := range m.Gaps {
		fmt.Fprintf(out, "gap %s – %s: %s\n", g.From.Local().Format(time.DateTime), g.To.Local().Format(time.DateTime), g.Reason)
	}
}

// sparkline draws values as at most width block characters, each the
// largest of the values it stands for, scaled to the largest of all.
func sparkline(v []int64, width int) string {
	if len(v) == 0 {
		return ""
	}
	if len(v) > width {
		per := (len(v) + width - 1) / width
		var folded []int64
		for i := 0; i < len(v); i += per {
			m := v[i]
			for _, x := range v[i:min(i+per, len(v))] {
				m = max(m, x)
			}
			folded = append(folded, m)
		}
		v = folded
	}
	bars := []rune("▁▂▃▄▅▆▇█")
	top := int64(0)
	for _, x := range v {
		top = max(top, x)
	}
	var b strings.Builder
	for _, x := range v {
		i := 0
		if top > 0 && x > 0 {
			i = int(x * int64(len(bars)-1) / top)
		}
		b.WriteRune(bars[i])
	}
	return b.String()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func (a *app) usageCmd() *cobra.Command {
	var since time.Duration
	var groupBy string
	c := &cobra.Command{
		Use:   "usage [REF]",
		Short: "Show what a sandbox, or the whole team, used and cost",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			out := a.env.Stdout
			if len(args) == 1 {
				u, err := cl.SandboxUsage(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if a.json {
					return a.printJSON(u)
				}
				limit := "none"
				if u.SpendLimitUSD != nil {
					limit = "$" + strconv.FormatFloat(*u.SpendLimitUSD, 'f', -1, 64)
				}
				fmt.Fprintf(out, "%s: $%.4f (limit %s)\ncpu %.0f vCPU-s, memory %.0f GiB-s, storage %.4f GiB-h, egress %s\nprice per hour: $%.4f running, at most $%.4f asleep\n",
					u.SandboxID, u.CostUSD, limit, u.CPUS, u.MemoryGiBS, u.StorageGiBH, humanBytes(u.EgressBytes),
					u.PricePerHourUSD.Running, u.PricePerHourUSD.Asleep)
				return nil
			}
			q := cove.UsageQuery{GroupBy: groupBy}
			if since > 0 {
				q.From = time.Now().Add(-since)
			}
			r, err := cl.Usage(cmd.Context(), q)
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(r)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, strings.ToUpper(groupBy)+"\tCOST\tVCPU-S\tGIB-S\tSTORAGE GIB-H\tEGRESS")
			for _, u := range append(r.Items, r.Total) {
				key := u.Day + u.SandboxID
				if key == "" {
					key = "total"
				}
				fmt.Fprintf(tw, "%s\t$%.4f\t%.0f\t%.0f\t%.4f\t%s\n", key, u.CostUSD, u.CPUS, u.MemoryGiBS, u.StorageGiBH, humanBytes(u.EgressBytes))
			}
			tw.Flush()
			limit := "no monthly limit"
			if r.SpendLimitUSD != nil {
				limit = fmt.Sprintf("monthly limit $%g", *r.SpendLimitUSD)
			}
			fmt.Fprintf(out, "\nthis month: $%.4f (%s)\n", r.MonthCostUSD, limit)
			return nil
		},
	}
	c.Flags().DurationVar(&since, "since", 0, "report from this long ago (default: the start of this month)")
	c.Flags().StringVar(&groupBy, "by", "day", "group by day or sandbox")
	a.jsonFlag(c)
	return c
}

func (a *app) teamsLimitCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "limit TEAM_ID USD",
		Short: "Set a team's monthly spend limit in US dollars (negative: none)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			usd, err := strconv.ParseFloat(args[1], 64)
			if err != nil {
				return fmt.Errorf("limit %q: want a number of US dollars", args[1])
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			t, err := cl.UpdateTeam(cmd.Context(), args[0], api.UpdateTeamRequest{SpendLimitUSD: &usd})
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(t)
			}
			if t.SpendLimitUSD == nil {
				fmt.Fprintf(a.env.Stdout, "team %s has no monthly spend limit\n", t.Name)
			} else {
				fmt.Fprintf(a.env.Stdout, "team %s: monthly spend limit $%g\n", t.Name, *t.SpendLimitUSD)
			}
			return nil
		},
	}
	a.jsonFlag(c)
	return c
}
