// Package forms holds the pure checks and builders behind the console's forms: batch sizes that
// must sum to the global batch, node names that must belong to the job, job names, policy modes
// and parameters, and the launch form's job spec YAML. No I/O, no UI: each function returns the
// value or an error whose text the form shows inline, as is.
package forms

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Choices offered by the launch form; the scheduler's spec parser remains the authority.
var (
	Models     = []string{"softmax", "mlp", "sparse-lr"}
	Datasets   = []string{"mnist", "synthetic-ctr"}
	SyncModels = []string{"bsp", "asp", "ssp", "dsps", "drop", "pssp"}
	Policies   = []string{"antdt-nd", "antdt-dd", "backup-workers", "adjust-lr", "psld"}
	Modes      = []string{"auto", "approve", "off"}
)

var jobName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// JobName checks a job name: [a-z0-9-], not empty, at most 63 characters, no leading or trailing '-'.
func JobName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("a name is required")
	case len(name) > 63:
		return fmt.Errorf("name %q is longer than 63 characters", name)
	case !jobName.MatchString(name):
		return fmt.Errorf("name %q may use only a-z, 0-9 and '-' (not at either end)", name)
	}
	return nil
}

// Node checks that name is a node of the job with the given role ("" for any); nodes maps each
// node's name to its role.
func Node(name string, nodes map[string]string, role string) error {
	name = strings.TrimSpace(name)
	if name == "" {
		return fmt.Errorf("a node name is required")
	}
	r, ok := nodes[name]
	if !ok {
		return fmt.Errorf("unknown node %s (the job has %s)", name, listNodes(nodes, role))
	}
	if role != "" && r != role {
		return fmt.Errorf("%s is a %s, not a %s", name, r, role)
	}
	return nil
}

func listNodes(nodes map[string]string, role string) string {
	var names []string
	for n, r := range nodes {
		if role == "" || r == role {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) > 6 {
		return strings.Join(names[:6], ", ") + fmt.Sprintf(" and %d more", len(names)-6)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Count parses a positive integer field.
func Count(field, s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("%s is required", field)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s must be a positive integer, not %q", field, s)
	}
	return n, nil
}

// FormatBatchSizes writes sizes as the batch form shows them: "worker-0=64 worker-1=64", in the
// order of names.
func FormatBatchSizes(names []string, sizes map[string]int32) string {
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+"="+strconv.Itoa(int(sizes[n])))
	}
	return strings.Join(parts, " ")
}

// BatchSizes parses "worker-0=96 worker-1=96, worker-2=32" into new local batch sizes. Every named
// node must be one of the job's workers (current holds their batch sizes now), every size a
// positive integer, and the sizes, with unnamed workers keeping theirs, must sum to global.
func BatchSizes(text string, current map[string]int32, global int32) (map[string]int32, error) {
	fields := strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' || r == ';' })
	if len(fields) == 0 {
		return nil, fmt.Errorf("no batch sizes: write worker=size pairs, e.g. worker-0=64")
	}
	out := map[string]int32{}
	for _, f := range fields {
		name, val, ok := strings.Cut(f, "=")
		if !ok {
			name, val, ok = strings.Cut(f, ":")
		}
		if !ok || name == "" {
			return nil, fmt.Errorf("%q is not worker=size", f)
		}
		if _, known := current[name]; !known {
			names := make(map[string]string, len(current))
			for n := range current {
				names[n] = "worker"
			}
			return nil, fmt.Errorf("unknown node %s (the job's workers are %s)", name, listNodes(names, ""))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s is given twice", name)
		}
		n, err := strconv.Atoi(val)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("batch size for %s must be a positive integer, not %q", name, val)
		}
		out[name] = int32(n)
	}
	var sum int64
	for n, b := range current {
		if v, ok := out[n]; ok {
			b = v
		}
		sum += int64(b)
	}
	if sum != int64(global) {
		return nil, fmt.Errorf("batch sizes sum to %d; the global batch is %d", sum, global)
	}
	return out, nil
}

// Mode checks a policy mode.
func Mode(m string) error {
	for _, v := range Modes {
		if m == v {
			return nil
		}
	}
	return fmt.Errorf("mode %q is not one of %s", m, strings.Join(Modes, ", "))
}

// ToggleMode is the mode the console's mode key switches m to: approve ↔ off, and auto back to
// approve. It never returns auto: an action in auto mode goes out without anyone approving it, so
// switching to auto is a choice of its own, confirmed (never a step of a cycle).
func ToggleMode(m string) string {
	if m == "approve" {
		return "off"
	}
	return "approve"
}

// Param parses one policy parameter value.
func Param(name, s string) (float64, error) {
	s = strings.TrimSpace(s)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s must be a number, not %q", name, s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%s must not be negative", name)
	}
	return v, nil
}

// PolicyModes parses "antdt-nd=auto psld=approve" into modes by policy
// (the policies in Policies; Catalog.PolicySettings reads the scheduler's
// declarations and parameters too).
func PolicyModes(text string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == ',' }) {
		name, mode, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not policy=mode", f)
		}
		known := false
		for _, p := range Policies {
			known = known || p == name
		}
		if !known {
			return nil, fmt.Errorf("unknown policy %s (have %s)", name, strings.Join(Policies, ", "))
		}
		if err := Mode(mode); err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		out[name] = mode
	}
	return out, nil
}

func oneOf(field, v string, choices []string) error {
	for _, c := range choices {
		if v == c {
			return nil
		}
	}
	return fmt.Errorf("%s %q is not one of %s", field, v, strings.Join(choices, ", "))
}

// Launch is what the launch form collects.
type Launch struct {
	Name        string
	Model       string
	Data        string
	Servers     int
	Workers     int
	GlobalBatch int
	Sync        string
	Staleness   int // ssp, pssp and dsps only
	Policies    map[string]string
	// PolicyParams are parameters by policy and spec key, checked against
	// the scheduler's declarations (Catalog).
	PolicyParams map[string]map[string]float64
	catalog      Catalog
}

// Launch form field keys, in the form's order.
const (
	FieldName      = "name"
	FieldModel     = "model"
	FieldData      = "data"
	FieldServers   = "servers"
	FieldWorkers   = "workers"
	FieldBatch     = "global_batch"
	FieldSync      = "sync"
	FieldStaleness = "staleness"
	FieldPolicies  = "policies"
	FieldFile      = "file"
)

// ParseLaunch checks the launch form's fields and returns the job, or the errors by field key.
func ParseLaunch(v map[string]string) (Launch, map[string]string) { return ParseLaunchWith(v, nil) }

// ParseLaunchWith is ParseLaunch with the scheduler's declared policies,
// against which the policies field's names and parameters are checked.
func ParseLaunchWith(v map[string]string, cat Catalog) (Launch, map[string]string) {
	errs := map[string]string{}
	get := func(k string) string { return strings.TrimSpace(v[k]) }
	l := Launch{catalog: cat}
	l.Name = get(FieldName)
	if err := JobName(l.Name); err != nil {
		errs[FieldName] = err.Error()
	}
	l.Model, l.Data, l.Sync = get(FieldModel), get(FieldData), get(FieldSync)
	if err := oneOf("model", l.Model, Models); err != nil {
		errs[FieldModel] = err.Error()
	}
	if err := oneOf("data", l.Data, Datasets); err != nil {
		errs[FieldData] = err.Error()
	}
	if err := oneOf("sync", l.Sync, SyncModels); err != nil {
		errs[FieldSync] = err.Error()
	}
	var err error
	if l.Servers, err = Count("servers", get(FieldServers)); err != nil {
		errs[FieldServers] = err.Error()
	}
	if l.Workers, err = Count("workers", get(FieldWorkers)); err != nil {
		errs[FieldWorkers] = err.Error()
	}
	if l.GlobalBatch, err = Count("global batch", get(FieldBatch)); err != nil {
		errs[FieldBatch] = err.Error()
	} else if l.Workers > 0 && l.GlobalBatch < l.Workers {
		errs[FieldBatch] = fmt.Sprintf("global batch %d is smaller than the %d workers", l.GlobalBatch, l.Workers)
	}
	if s := get(FieldStaleness); s != "" && staleSync(l.Sync) {
		if l.Staleness, err = Count("staleness", s); err != nil {
			errs[FieldStaleness] = err.Error()
		}
	}
	if l.Policies, l.PolicyParams, err = cat.PolicySettings(get(FieldPolicies)); err != nil {
		errs[FieldPolicies] = err.Error()
	}
	if len(errs) > 0 {
		return Launch{}, errs
	}
	return l, nil
}

func staleSync(s string) bool { return s == "ssp" || s == "pssp" || s == "dsps" }

// YAML writes the job spec (core/spec's reference of keys) for l.
func (l Launch) YAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\n", l.Name)
	fmt.Fprintf(&b, "model: {kind: %s}\n", l.Model)
	fmt.Fprintf(&b, "data: {kind: %s}\n", l.Data)
	fmt.Fprintf(&b, "train: {global_batch: %d}\n", l.GlobalBatch)
	fmt.Fprintf(&b, "cluster: {servers: %d, workers: %d}\n", l.Servers, l.Workers)
	if staleSync(l.Sync) && l.Staleness > 0 {
		fmt.Fprintf(&b, "sync: {model: %s, staleness: %d}\n", l.Sync, l.Staleness)
	} else {
		fmt.Fprintf(&b, "sync: {model: %s}\n", l.Sync)
	}
	if len(l.Policies) > 0 || len(l.PolicyParams) > 0 {
		b.WriteString("policies:\n")
		for _, p := range l.catalog.Names() { // a fixed order keeps the text stable
			m, ok := l.Policies[p]
			if ps := l.PolicyParams[p]; ok || len(ps) > 0 {
				fmt.Fprintf(&b, "  %s: %s\n", p, policyYAML(l.catalog.Lookup(p), m, ps))
			}
		}
	}
	return b.String()
}
