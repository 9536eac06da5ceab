package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/proto/timelinepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// historyCmd is `kelpie job history NAME [--json]`: a job's recorded
// timeline, live or finished. With --json, one JSON object per line (a
// HistoryRecord: {"frame": ...}, {"action": ...} or {"event": ...}) in time
// order, for notebooks and scripts.
func historyCmd() *cobra.Command {
	var f apiFlags
	c := &cobra.Command{Use: "history NAME", Short: "a job's recorded timeline (one JSON object per line with --json)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			cl, err := f.dial(ctx, client.WithName("kelpie-job"))
			if err != nil {
				return err
			}
			defer cl.Close()
			if err := cl.WaitConnected(ctx); err != nil {
				return fmt.Errorf("connect to %s: %v", f.scheduler, err)
			}
			h, err := cl.History(ctx, args[0])
			if err != nil {
				return err
			}
			if f.asJSON {
				return printRecords(h.Records())
			}
			printHistory(h)
			return nil
		}}
	f.add(c, true)
	return c
}

// printRecords writes one record per line.
func printRecords(recs []*timelinepb.HistoryRecord) error {
	w := bufio.NewWriter(os.Stdout)
	for _, r := range recs {
		b, err := protoJSON(r) // one line, 64-bit integers as numbers (as job describe --json)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
			return err
		}
	}
	return w.Flush()
}

// printHistory is the timeline for people: one line per frame (time into
// the job, iteration, throughput, loss, the nodes the Monitor classed as
// stragglers) and the actions where they happened.
func printHistory(h *client.History) {
	if len(h.Frames) == 0 {
		fmt.Println("no timeline recorded")
		return
	}
	t0 := h.Frames[0].Start()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "T\tSPAN\tSTATE\tITERATION\tSAMPLES/S\tLOSS\tSTRAGGLERS")
	for _, r := range h.Records() {
		switch k := r.Kind.(type) {
		case *timelinepb.HistoryRecord_Frame:
			f := k.Frame
			var slow []string
			for _, n := range f.GetNodes() {
				if n.GetClass() == "transient" || n.GetClass() == "persistent" {
					slow = append(slow, n.GetName()+"("+n.GetClass()[:1]+")")
				}
			}
			loss := "–"
			if f.Loss != nil {
				loss = fmt.Sprintf("%.4f", f.GetLoss())
			}
			// What the job trained per second over the frame (older
			// frames: the figure the console showed then).
			rate := f.GetSamplesPerS()
			if rate == 0 {
				rate = f.GetThroughput()
			}
			fmt.Fprintf(tw, "%.0fs\t%.0fs\t%s\t%d\t%.0f\t%s\t%s\n", f.GetTime().AsTime().Sub(t0).Seconds(), f.GetSpanSeconds(),
				f.GetState(), f.GetIteration(), rate, loss, strings.Join(slow, " "))
		case *timelinepb.HistoryRecord_Action:
			a := k.Action
			line := fmt.Sprintf("  ▸ %s %s %s (%s): %s", a.GetId(), a.GetKind(), a.GetTarget(), a.GetPolicy(), a.GetState())
			if r := a.GetRealized(); r != nil {
				line += " · " + r.GetVerdict()
			}
			fmt.Fprintf(tw, "%.0fs\t%s\n", a.GetTime().AsTime().Sub(t0).Seconds(), line)
		}
	}
	tw.Flush()
}
