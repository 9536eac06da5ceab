package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/runtime/torch"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

type apiFlags struct {
	scheduler, token string
	asJSON           bool
	timeout          time.Duration
	conn             connFlags
}

// dial connects to the scheduler's console with the flags' token and TLS.
func (f *apiFlags) dial(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	tok, err := f.conn.token(f.token)
	if err != nil {
		return nil, err
	}
	more, err := f.conn.options()
	if err != nil {
		return nil, err
	}
	return client.Dial(ctx, f.scheduler, tok, append(opts, more...)...)
}

func (f *apiFlags) add(c *cobra.Command, json bool) {
	c.Flags().StringVar(&f.scheduler, "scheduler", envOr("KELPIE_SCHEDULER", "127.0.0.1:7080"), "the scheduler's console address host:port, several replicas' comma-separated ($KELPIE_SCHEDULER)")
	c.Flags().StringVar(&f.token, "token", os.Getenv("KELPIE_TOKEN"), "bearer token ($KELPIE_TOKEN)")
	f.conn.add(c.Flags())
	c.Flags().DurationVar(&f.timeout, "timeout", 15*time.Second, "how long to wait for the scheduler")
	if json {
		c.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// snapshot connects, subscribes to jobs (all when empty) and returns the
// first snapshot.
func (f *apiFlags) snapshot(jobs []string) ([]*consolepb.JobView, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	got := make(chan *consolepb.Snapshot, 1)
	c, err := f.dial(ctx, client.WithSubscription(jobs, 1, 60),
		client.WithName("kelpie-job"), client.WithHandler(func(m any) {
			if s, ok := m.(client.SnapshotMsg); ok {
				select {
				case got <- s.Snapshot:
				default:
				}
			}
		}))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := connected(ctx, c, f.scheduler); err != nil {
		return nil, err
	}
	select {
	case s := <-got:
		return s.Jobs, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("no snapshot from the scheduler at %s within --timeout", f.scheduler)
	}
}

// command sends one command and turns a refusal into an error.
func (f *apiFlags) command(cmd *consolepb.Command) (*consolepb.CommandResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	c, err := f.dial(ctx, client.WithName("kelpie-job"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := connected(ctx, c, f.scheduler); err != nil {
		return nil, err
	}
	res, err := c.Send(ctx, cmd)
	if err != nil {
		if errors.Is(err, client.ErrConnectionLost) {
			// The scheduler closed the stream: say why, once the client
			// has recorded the close reason.
			for ctx.Err() == nil {
				if st := c.Status(); st.State != client.Connected && st.Err != nil {
					return nil, fmt.Errorf("%v (%v)", err, st.Err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		return nil, err
	}
	if !res.Ok {
		return res, fmt.Errorf("refused (%s): %s", codes.Code(res.Code), res.Error)
	}
	return res, nil
}

func printJSON(m any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(m)
}

func jobCmd() *cobra.Command {
	c := &cobra.Command{Use: "job", Short: "job control from scripts: submit, list, describe, kill, act"}
	var f apiFlags

	submit := &cobra.Command{Use: "submit SPEC.yaml", Short: "submit a job", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return exitCode(2, err)
			}
			// The structure is checked here, so errors name this file and
			// its lines; the sizes against the scheduler's own limits there.
			s, err := spec.ParseLimits(args[0], src, spec.Unlimited())
			if err != nil {
				return exitCode(2, withLimitErrors(&f, args[0], src, err))
			}
			if s.Model.Kind == spec.ModelTorch {
				// The scheduler cannot run Python: the script's tensors
				// and sample counts travel in the spec.
				if err := torch.Complete(s, filepath.Dir(args[0]), os.Stderr); err != nil {
					return exitCode(2, fmt.Errorf("%s: %v", args[0], err))
				}
				src = s.YAML()
			}
			res, err := f.command(&consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: string(src)}}})
			if err != nil {
				err = submitError(args[0], len(src), err)
				if res != nil && codes.Code(res.Code) == codes.InvalidArgument || errors.Is(err, errSpecTooLarge) {
					return exitCode(2, err)
				}
				return err
			}
			if f.asJSON {
				return printJSON(map[string]string{"job": res.Job})
			}
			fmt.Println(res.Job)
			return nil
		}}
	f.add(submit, true)

	var lf apiFlags
	list := &cobra.Command{Use: "list", Short: "list jobs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			jobs, err := lf.snapshot(nil)
			if err != nil {
				return err
			}
			sort.Slice(jobs, func(a, b int) bool { return jobs[a].Name < jobs[b].Name })
			if lf.asJSON {
				return printProtos(jobs)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tWORKERS\tSERVERS\tITERATION\tSHARDS\tSAMPLES/S\tSYNC")
			for _, j := range jobs {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d/%d\t%d/%d\t%.0f\t%s\n", j.Name, j.State, j.Workers, j.Servers,
					j.Iteration, j.Iterations, j.ShardsDone, j.ShardsTotal, j.Throughput, j.Sync)
			}
			return tw.Flush()
		}}
	lf.add(list, true)

	var df apiFlags
	describe := &cobra.Command{Use: "describe NAME", Short: "show a job: nodes, Monitor figures, actions", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			jobs, err := df.snapshot(args)
			if err != nil {
				return err
			}
			if len(jobs) == 0 {
				return fmt.Errorf("no job %q", args[0])
			}
			if df.asJSON {
				// One object: the job asked for (it was an array of
				// one before).
				o, err := protoJSON(jobs[0])
				if err != nil {
					return err
				}
				return printJSON(o)
			}
			describeJob(jobs[0])
			return nil
		}}
	df.add(describe, true)

	var kf apiFlags
	kill := &cobra.Command{Use: "kill NAME", Short: "stop a job", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := kf.command(&consolepb.Command{Kind: &consolepb.Command_KillJob{KillJob: &consolepb.KillJob{Job: args[0]}}})
			return err
		}}
	kf.add(kill, false)

	c.AddCommand(append([]*cobra.Command{submit, list, describe, kill, historyCmd(), stacksCmd(), probeCmd()}, actCmds()...)...)
	return c
}

// actCmds are approve, reject and trigger, for scripts.
func actCmds() []*cobra.Command {
	var af, rf, tf apiFlags
	var note string
	approve := &cobra.Command{Use: "approve JOB ACTION", Short: "approve a proposed action", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := af.command(&consolepb.Command{Kind: &consolepb.Command_Approve{Approve: &consolepb.DecideAction{Job: args[0], ActionId: args[1], Reason: note}}}); err != nil {
				return err
			}
			fmt.Printf("approved %s of job %s: it is dispatched now\n", args[1], args[0])
			return nil
		}}
	af.add(approve, false)
	approve.Flags().StringVar(&note, "note", "", "note for the audit log")
	reject := &cobra.Command{Use: "reject JOB ACTION", Short: "reject a proposed action", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := rf.command(&consolepb.Command{Kind: &consolepb.Command_Reject{Reject: &consolepb.DecideAction{Job: args[0], ActionId: args[1], Reason: note}}}); err != nil {
				return err
			}
			fmt.Printf("rejected %s of job %s\n", args[1], args[0])
			return nil
		}}
	rf.add(reject, false)
	reject.Flags().StringVar(&note, "note", "", "note for the audit log")
	var sizes, accum, params, syncModel string
	trigger := &cobra.Command{Use: "trigger JOB KIND [NODE]",
		Short: "trigger an action of any kind: " + strings.Join(actionKinds(), ", "),
		Long:  "trigger asks the scheduler to carry out an action now, as an operator.\n\nKIND is one of:\n" + kindsHelp(),
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			a := &consolepb.Action{Kind: strings.ToUpper(args[1]), SyncModel: syncModel}
			if len(args) == 3 {
				a.Target = args[2]
			}
			var err error
			if a.BatchSizes, err = intPairs("--sizes", sizes); err != nil {
				return exitCode(2, err)
			}
			if a.Accumulation, err = intPairs("--accumulation", accum); err != nil {
				return exitCode(2, err)
			}
			if params != "" {
				a.Params = map[string]float64{}
				for _, kv := range strings.Split(params, ",") {
					k, v, ok := strings.Cut(kv, "=")
					f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
					if !ok || err != nil {
						return exitCode(2, fmt.Errorf("--params: %q is not KEY=NUMBER", kv))
					}
					a.Params[strings.TrimSpace(k)] = f
				}
			}
			res, err := tf.command(&consolepb.Command{Kind: &consolepb.Command_Trigger{Trigger: &consolepb.TriggerAction{Job: args[0], Action: a}}})
			if err != nil {
				return err
			}
			if tf.asJSON {
				return printJSON(map[string]string{"action_id": res.ActionId})
			}
			fmt.Println(res.ActionId)
			return nil
		}}
	tf.add(trigger, true)
	trigger.Flags().StringVar(&sizes, "sizes", "", "ADJUST_BS: NODE=SIZE,... for every worker")
	trigger.Flags().StringVar(&accum, "accumulation", "", "ADJUST_BS: NODE=COUNT,... gradient-accumulation counts (samples per iteration = size × count)")
	trigger.Flags().StringVar(&params, "params", "", "KEY=NUMBER,...: drop (BACKUP_WORKERS), lr_scale (ADJUST_LR), staleness... (SET_SYNC)")
	trigger.Flags().StringVar(&syncModel, "sync-model", "", "SET_SYNC: bsp | ssp | asp | pssp | dsps | drop")
	return []*cobra.Command{approve, reject, trigger}
}

// intPairs parses NODE=N,... (nil when s is empty).
func intPairs(flag, s string) (map[string]int32, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]int32{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s: %q is not NODE=NUMBER", flag, kv)
		}
		out[strings.TrimSpace(k)] = int32(n)
	}
	return out, nil
}

// printProtos prints the jobs as a JSON array (job list --json).
func printProtos(jobs []*consolepb.JobView) error {
	out := []json.RawMessage{}
	for _, j := range jobs {
		b, err := protoJSON(j)
		if err != nil {
			return err
		}
		out = append(out, b)
	}
	return printJSON(out)
}

// protoJSON is m as the CLI prints it: protojson's field names and forms
// (the console API's, docs/console-api.md), except that 64-bit integers are
// JSON numbers, not strings ("iteration": 1430, as "workers": 3 always
// was). protojson quotes them because JavaScript's numbers hold 53 bits;
// the counts kelpie prints stay far below that, and scripts compare them
// as numbers.
func protoJSON(m proto.Message) (json.RawMessage, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(int64Numbers(m.ProtoReflect().Descriptor(), v))
}

// int64Numbers turns the 64-bit integer fields of v, a message of type md
// decoded from protojson, into numbers.
func int64Numbers(md protoreflect.MessageDescriptor, v any) any {
	obj, ok := v.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return v // well-known types keep their JSON forms
	}
	fields := md.Fields()
	for k, x := range obj {
		fd := fields.ByJSONName(k)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(k))
		}
		if fd == nil {
			continue
		}
		one := func(fd protoreflect.FieldDescriptor, x any) any {
			switch fd.Kind() {
			case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
				protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				if s, ok := x.(string); ok {
					return json.Number(s)
				}
			case protoreflect.MessageKind, protoreflect.GroupKind:
				return int64Numbers(fd.Message(), x)
			}
			return x
		}
		switch {
		case fd.IsMap():
			if mv, ok := x.(map[string]any); ok {
				for mk, e := range mv {
					mv[mk] = one(fd.MapValue(), e)
				}
			}
		case fd.IsList():
			if l, ok := x.([]any); ok {
				for i, e := range l {
					l[i] = one(fd, e)
				}
			}
		default:
			obj[k] = one(fd, x)
		}
	}
	return obj
}

func describeJob(j *consolepb.JobView) {
	fmt.Printf("Job %s: %s (%s, %s)\n", j.Name, j.State, j.Model, j.Sync)
	if j.Error != "" {
		fmt.Printf("  error: %s\n", j.Error)
	}
	if d := j.Diverged; d != nil {
		fmt.Printf("  diverged: non-finite %s (%s) at %s, iteration %d", d.What, d.Value, d.Node, d.Iteration)
		if d.Detail != "" {
			fmt.Printf(" (%s)", d.Detail)
		}
		if d.Reporter != "" && d.Reporter != d.Node {
			fmt.Printf(", reported by %s", d.Reporter)
		}
		fmt.Println()
	}
	fmt.Printf("  iteration %d/%d, shards %d/%d done, %.0f samples/s, loss %s\n", j.Iteration, j.Iterations,
		j.ShardsDone, j.ShardsTotal, j.Throughput, lossText(j.Loss))
	describeGoodput(j)
	if j.Monitor != nil {
		fmt.Printf("  monitor: mean BPT %.4fs, PS speed variance %.2f, superior %v, λ %.2f, windows %.0fs/%.0fs\n",
			j.Monitor.MeanBptS, j.Monitor.SpeedVariance, j.Monitor.Superior, j.Monitor.Lambda,
			j.Monitor.WindowTransientS, j.Monitor.WindowPersistentS)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	// HOST last: the columns before it keep their places for scripts.
	fmt.Fprintln(tw, "\nNODE\tROLE\tSTATE\tPID\tRESTARTS\tBATCH\tBPT SHORT\tBPT LONG\tCLASS\tITERATION\tHOST")
	for _, n := range j.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.4f\t%.4f\t%s\t%d\t%s\n", n.Name, n.Role, n.State, n.Pid, n.Restarts,
			n.BatchSize, n.BptShortS, n.BptLongS, n.Class, n.Iteration, n.Host)
	}
	tw.Flush()
	if len(j.Policies) > 0 {
		fmt.Println("\nPolicies:")
		for _, p := range j.Policies {
			fmt.Printf("  %-15s %-8s %s\n", p.Name, p.Mode, paramsText(p.Params))
		}
	}
	if len(j.Actions) > 0 {
		fmt.Println("\nActions:")
		for _, a := range j.Actions {
			fmt.Printf("  %s %-12s %-10s %-10s by %s: %s\n", a.Id, a.Kind, a.Target, a.State, a.Policy, a.Reason)
			if r := a.GetRealized(); r != nil {
				fmt.Printf("      realized over %.0fs: %s\n", r.GetWindowS(), r.GetVerdict())
			}
		}
	}
}

// paramsText is a policy's parameters as key=value, sorted by key
// ("lambda=1.5 window_persistent_s=4"), "–" for none.
func paramsText(params map[string]float64) string {
	if len(params) == 0 {
		return "–"
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatFloat(params[k], 'g', -1, 64)
	}
	return strings.Join(parts, " ")
}

// lossText shows a loss: "–" before any was reported, NaN or ±Inf as such.
func lossText(v float64) string {
	if v == 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

var errSpecTooLarge = errors.New("spec too large")

// submitError names the submitted file in err: the scheduler's errors say
// "spec.yaml" for it, and a spec larger than the scheduler reads ends the
// stream with a close reason (status 1009) rather than a result.
// withLimitErrors completes the errors found here (err) with those only
// the scheduler can find: the bounds of its --spec-limit, which this
// client does not know. A spec that fails here fails there too (the same
// checker, plus the bounds), so it is sent to be refused, and the
// scheduler's bound errors join the local ones, sorted by line; without a
// scheduler the local errors stand alone.
func withLimitErrors(f *apiFlags, file string, src []byte, err error) error {
	var local spec.Errors
	if !errors.As(err, &local) {
		return err
	}
	res, serr := f.command(&consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: string(src)}}})
	if serr == nil {
		// Only a scheduler with another checker gets here.
		return fmt.Errorf("%w\n%s: the scheduler accepted it nonetheless as job %s", err, file, res.Job)
	}
	if res == nil || codes.Code(res.Code) != codes.InvalidArgument {
		return err
	}
	type line struct {
		n    int
		text string
	}
	var all []line
	for _, e := range local {
		all = append(all, line{e.Line, e.Error()})
	}
	for _, l := range strings.Split(strings.ReplaceAll(res.Error, "spec.yaml:", file+":"), "\n") {
		if !strings.Contains(l, spec.LimitHint) {
			continue
		}
		n := 0
		if rest, ok := strings.CutPrefix(l, file+":"); ok {
			n, _ = strconv.Atoi(rest[:max(strings.IndexByte(rest, ':'), 0)])
		}
		all = append(all, line{n, l})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].n < all[j].n })
	texts := make([]string, len(all))
	for i, l := range all {
		texts[i] = l.text
	}
	return errors.New(strings.Join(texts, "\n"))
}

func submitError(file string, size int, err error) error {
	msg := strings.ReplaceAll(err.Error(), "spec.yaml:", file+":")
	if strings.Contains(msg, "read limited at") || strings.Contains(msg, "(1009)") {
		limit := ""
		if i := strings.Index(msg, "read limited at "); i >= 0 {
			limit = strings.Fields(msg[i+len("read limited at "):])[0]
			if n, e := strconv.Atoi(limit); e == nil {
				limit = fmt.Sprintf(" (limit %d bytes a frame)", n-1)
			}
		}
		return fmt.Errorf("%s: %w: %d bytes%s; %s", file, errSpecTooLarge, size, limit, msg)
	}
	if !strings.Contains(msg, file) {
		msg = file + ": " + msg
	}
	return errors.New(msg)
}
