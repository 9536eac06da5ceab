package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// probeCmd is `kelpie job probe NAME NODE`: a short, bounded check of one
// node through the agents — a fixed compute kernel on every node of the
// job, round trips from every worker to each server — and the verdict:
// the node, its link or a server is slow, or nothing stands out.
func probeCmd() *cobra.Command {
	var f apiFlags
	var wait time.Duration
	c := &cobra.Command{Use: "probe NAME NODE", Short: "check whether a node, its link or a server is slow (a short, bounded probe)",
		Long: "Runs a short, bounded check through the agents of a running job: every node runs the same fixed compute " +
			"kernel (timed), every worker makes round trips of 64 KiB each way to each server; the node's figures against " +
			"the other nodes' say whether the node (its compute), its link or a server (its link or its own handling) is " +
			"slow. An operator command, recorded in the job's events.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.timeout < wait+5*time.Second {
				f.timeout = wait + 5*time.Second // the scheduler waits for the agents first
			}
			res, err := f.command(&consolepb.Command{Kind: &consolepb.Command_Probe{Probe: &consolepb.GetProbe{
				Job: args[0], Node: args[1], TimeoutS: wait.Seconds()}}})
			if err != nil {
				return err
			}
			if f.asJSON {
				b, err := protoJSON(res.GetProbe())
				if err != nil {
					return err
				}
				_, err = os.Stdout.Write(append(b, '\n'))
				return err
			}
			printProbe(os.Stdout, res.GetProbe())
			return nil
		}}
	f.add(c, true)
	c.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long the scheduler waits for the agents")
	return c
}

// printProbe writes a probe's verdict, then each node's figures.
func printProbe(w io.Writer, p *consolepb.ProbeResult) {
	fmt.Fprintf(w, "%s: %s\n", p.GetVerdict(), p.GetDetail())
	for _, n := range p.GetNodes() {
		fmt.Fprintf(w, "  %-10s %-6s", n.Node, n.Role)
		if n.KernelS > 0 {
			fmt.Fprintf(w, " kernel %6.1fms", 1000*n.KernelS)
			if n.KernelRatio > 0 {
				fmt.Fprintf(w, " (%.1f×)", n.KernelRatio)
			}
		}
		for _, t := range n.Trips {
			if t.Error != "" {
				fmt.Fprintf(w, "  %s: %s", t.Server, t.Error)
				continue
			}
			fmt.Fprintf(w, "  %s %.1fms", t.Server, 1000*t.RttS)
			if t.Ratio > 0 {
				fmt.Fprintf(w, " (%.1f×)", t.Ratio)
			}
		}
		if n.Error != "" {
			fmt.Fprintf(w, "  !! %s", n.Error)
		}
		fmt.Fprintln(w)
	}
}
