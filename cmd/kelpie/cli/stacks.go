package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// stacksCmd is `kelpie job stacks NAME`: every role's stacks, collected
// through the agents, each node's under a "== NODE" line.
func stacksCmd() *cobra.Command {
	var f apiFlags
	var wait time.Duration
	var saved bool
	c := &cobra.Command{Use: "stacks NAME", Short: "collect the stacks of every role of a job (goroutines; a torch worker's Python frames)",
		Long: "Collects the stacks of every node of a running job through its agents — the agent's and its role's " +
			"goroutines, a torch worker's Python child's frames — and prints each node's under a \"== NODE\" line. " +
			"The collection is saved with the job's history (--saved prints the last one, also after the job ended). " +
			"An operator command; each node's answer is bounded to 1 MiB, the job's to 16 MiB.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.timeout < wait+5*time.Second {
				f.timeout = wait + 5*time.Second // the scheduler waits for the agents first
			}
			res, err := f.command(&consolepb.Command{Kind: &consolepb.Command_Stacks{Stacks: &consolepb.GetStacks{
				Job: args[0], TimeoutS: wait.Seconds(), Saved: saved}}})
			if err != nil {
				return err
			}
			if f.asJSON {
				out := []json.RawMessage{}
				for _, s := range res.Stacks {
					b, err := protoJSON(s)
					if err != nil {
						return err
					}
					out = append(out, b)
				}
				return printJSON(out)
			}
			printStacks(os.Stdout, res.Stacks)
			return nil
		}}
	f.add(c, true)
	c.Flags().DurationVar(&wait, "wait", 5*time.Second, "how long the scheduler waits for the agents")
	c.Flags().BoolVar(&saved, "saved", false, "print the last collection saved with the job's history instead of collecting")
	return c
}

// printStacks writes each node's stacks under a "== NODE (role)" line.
func printStacks(w io.Writer, stacks []*consolepb.NodeStacks) {
	for _, s := range stacks {
		fmt.Fprintf(w, "== %s (%s)\n", s.Node, s.Role)
		if s.Error != "" {
			fmt.Fprintf(w, "!! %s\n", s.Error)
		}
		if s.Truncated {
			fmt.Fprintln(w, "!! truncated at the bound")
		}
		if s.Text != "" {
			fmt.Fprint(w, s.Text)
			if !strings.HasSuffix(s.Text, "\n") {
				fmt.Fprintln(w)
			}
		}
	}
}

// describeGoodput prints a job's goodput ledger, ETA and hang, if any.
func describeGoodput(j *consolepb.JobView) {
	if h := j.Hung; h != nil {
		fmt.Printf("  HUNG since %s (bound %.1fs): waiting for %s", h.Since.AsTime().Local().Format(time.TimeOnly), h.BoundS, strings.Join(h.Missing, ", "))
		if len(h.Holding) > 0 {
			fmt.Printf("; %s hold pushes for them", strings.Join(h.Holding, ", "))
		}
		fmt.Println(" — kelpie job stacks", j.Name)
	}
	g := j.Goodput
	if g == nil {
		return
	}
	fmt.Printf("  goodput: %.0f%% productive of %.0fs:", 100*g.GetProductiveShare(), g.GetAgeS())
	for _, p := range []string{"computing", "communicating", "waiting", "recovering", "paused", "queued", "idle"} {
		if s := g.Phases[p]; s >= 0.05 {
			fmt.Printf(" %s %.1fs", p, s)
		}
	}
	if g.EtaS != nil {
		fmt.Printf("; ETA %s", (time.Duration(g.GetEtaS()) * time.Second).String())
	}
	fmt.Println()
	for _, c := range g.EtaChecks {
		fmt.Printf("  ETA at %d%%: predicted %.0fs", c.Percent, c.PredictedS)
		if c.ActualS != nil {
			fmt.Printf(", actual %.0fs (error %+.0f%%)", c.GetActualS(), 100*c.GetError())
		}
		fmt.Println()
	}
}
