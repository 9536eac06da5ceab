package scheduler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/kelpie/kelpie/"

// pureCores import nothing that does I/O (docs/design.md: "The pure cores ... import nothing that
// does I/O"). A new pure package belongs on this list. Of core/, job (its plan carries the
// generated protos, which link gRPC), identity (certificates, files, gRPC credentials), replicas
// (the clients' dialing of several scheduler replicas) and scenario (a test harness that reads and
// rewrites files) are not pure.
var pureCores = []string{
	"core/blocks",
	"core/diverge",
	"core/optim",
	"core/policydecl",
	"core/reduceplan",
	"core/shape",
	"core/spec",
	"core/straggler",
	"core/syncmodel",
	"core/topology",
	"scheduler/change",
	"scheduler/eps",
	"scheduler/gate",
	"scheduler/monitor",
	"scheduler/policy",
	"scheduler/shard",
	"scheduler/textclean",
}

// pkg is what the test reads of `go list -json`.
type pkg struct {
	ImportPath   string
	Imports      []string
	Deps         []string
	TestImports  []string // of the package's _test files, in the package and outside it
	XTestImports []string
}

// listModule runs `go list -deps=false -json ./...` at the module's root.
func listModule(t *testing.T) map[string]pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the module's imports: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-json=ImportPath,Imports,Deps,TestImports,XTestImports", "./...")
	cmd.Dir = ".." // the module root: this package is scheduler/
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, mod)] = p
	}
	for _, must := range append([]string{"scheduler/manager", "tui", "agent"}, pureCores...) {
		if _, ok := pkgs[must]; !ok {
			t.Fatalf("go list ./... did not list %s (%d packages): is the test running at the module root?", must, len(pkgs))
		}
	}
	return pkgs
}

// under says whether path is dir or inside it.
func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// testDeps is what a package's tests link beyond the package itself: their imports and, for
// the module's own, everything those depend on (from pkgs, which lists every package of the
// module).
func testDeps(pkgs map[string]pkg, p pkg) []string {
	seen := map[string]bool{}
	var out []string
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
		if imp == p.ImportPath {
			continue // the external test package imports the package under test
		}
		add(imp)
		if q, ok := pkgs[strings.TrimPrefix(imp, mod)]; ok && strings.HasPrefix(imp, mod) {
			for _, d := range q.Deps {
				add(d)
			}
		}
	}
	return out
}

// rule is one import rule: the packages it covers (by directory) and what they may not import,
// at any depth (deps: the package's code; testDeps: its tests) or directly (imports).
type rule struct {
	name     string
	covers   func(p string) bool
	deps     func(dep string) bool // forbidden at any depth
	testDeps func(dep string) bool // forbidden at any depth in the package's tests
	imports  func(imp string) bool // forbidden as a direct import
}

func rules() []rule {
	inAny := func(dirs ...string) func(string) bool {
		return func(p string) bool {
			return slices.ContainsFunc(dirs, func(d string) bool { return under(p, d) })
		}
	}
	ioStd := func(imp string) bool {
		return imp == "os" || under(imp, "os") || imp == "net" || under(imp, "net") || imp == "syscall" ||
			under(imp, "google.golang.org/grpc") || under(imp, "go.etcd.io/bbolt")
	}
	ioDeep := func(dep string) bool {
		return dep == "net" || under(dep, "net") || under(dep, "google.golang.org/grpc") || under(dep, "go.etcd.io/bbolt")
	}
	return []rule{{
		name:   "scheduler imports nothing under runtime, tui, agent or cmd",
		covers: inAny("scheduler"),
		deps:   inAny(mod+"runtime", mod+"tui", mod+"agent", mod+"cmd"),
		// Its tests neither: the system tests that need a runtime package live in
		// cmd/kelpie/internal/systest. The manager's broadcast tests run real agents against its
		// Agent service (agent imports no scheduler package, so no cycle can form).
		testDeps: inAny(mod+"runtime", mod+"tui", mod+"cmd"),
	}, {
		name:   "the job core links neither the console plane nor a WebSocket library (scheduler/consoleapi is the leaf they share)",
		covers: inAny("scheduler/manager"),
		deps: func(d string) bool {
			return under(d, mod+"scheduler/console") || under(d, "github.com/coder/websocket")
		},
	}, {
		name:   "the console-API client imports no other scheduler package",
		covers: inAny("scheduler/console/client"),
		deps: func(d string) bool {
			return strings.HasPrefix(d, mod) && !under(d, mod+"proto") && !under(d, mod+"scheduler/console/client")
		},
	}, {
		name:   "tui imports only themes, proto, its own packages and the console-API client",
		covers: inAny("tui"),
		deps: func(d string) bool {
			return strings.HasPrefix(d, mod) && !inAny(mod+"tui", mod+"themes", mod+"proto", mod+"scheduler/console/client")(d)
		},
	}, {
		name:   "agent imports no scheduler or tui package",
		covers: inAny("agent"),
		deps:   inAny(mod+"scheduler", mod+"tui", mod+"cmd"),
	}, {
		name:   "core imports no scheduler, runtime, agent or tui package",
		covers: inAny("core"),
		deps:   inAny(mod+"scheduler", mod+"runtime", mod+"agent", mod+"tui", mod+"cmd"),
	}, {
		name:   "the data plane links no console types",
		covers: inAny("runtime/server", "runtime/psclient", "runtime/framing", "runtime/wire"),
		deps:   inAny(mod+"proto/consolepb", mod+"proto/timelinepb"),
	}, {
		name:   "runtime imports no scheduler, agent or tui package",
		covers: inAny("runtime"),
		deps:   inAny(mod+"scheduler", mod+"agent", mod+"tui", mod+"cmd"),
	}, {
		name:    "pure cores import nothing that does I/O",
		covers:  func(p string) bool { return slices.Contains(pureCores, p) },
		deps:    ioDeep,
		imports: ioStd,
	}}
}

// violations lists every package's forbidden imports under rules.
func violations(pkgs map[string]pkg, rules []rule) []string {
	var out []string
	for path, p := range pkgs {
		for _, r := range rules {
			if !r.covers(path) {
				continue
			}
			for _, d := range p.Deps {
				if r.deps != nil && r.deps(d) {
					out = append(out, fmt.Sprintf("%s depends on %s (%s)", path, d, r.name))
				}
			}
			if r.testDeps != nil {
				for _, d := range testDeps(pkgs, p) {
					if r.testDeps(d) {
						out = append(out, fmt.Sprintf("%s's tests depend on %s (%s)", path, d, r.name))
					}
				}
			}
			for _, i := range p.Imports {
				if r.imports != nil && r.imports(i) {
					out = append(out, fmt.Sprintf("%s imports %s (%s)", path, i, r.name))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestImportRules(t *testing.T) {
	pkgs := listModule(t)
	for _, v := range violations(pkgs, rules()) {
		t.Error(v)
	}
}

// TestImportRulesCatch checks that the rules see what they must refuse, on made-up packages, so
// a typo in a rule cannot silently let everything through.
func TestImportRulesCatch(t *testing.T) {
	pkgs := map[string]pkg{
		"scheduler/manager":         {Deps: []string{"fmt", mod + "core/job", mod + "runtime/server"}},
		"scheduler/loadtest":        {Deps: []string{mod + "tui/client"}},
		"scheduler/console/client":  {Deps: []string{mod + "proto/consolepb", mod + "scheduler/console"}},
		"tui":                       {Deps: []string{mod + "themes", mod + "scheduler/console/client", mod + "scheduler/manager"}},
		"agent":                     {Deps: []string{mod + "scheduler/policy"}},
		"runtime/worker":            {Deps: []string{mod + "tui/keys"}},
		"core/syncmodel":            {Imports: []string{"os"}, Deps: []string{"os", "google.golang.org/grpc"}},
		"scheduler/shard":           {Imports: []string{"go.etcd.io/bbolt"}, Deps: []string{"go.etcd.io/bbolt"}},
		"scheduler/coordinator":     {Deps: []string{mod + "core/job", mod + "core/blocks", "net"}},
		"scheduler/console/client2": {Deps: []string{mod + "proto/consolepb"}},
		"scheduler/daemon":          {ImportPath: mod + "scheduler/daemon", TestImports: []string{mod + "scheduler/pki"}, XTestImports: []string{mod + "scheduler/daemon"}},
		"scheduler/pki":             {Deps: []string{mod + "core/identity", mod + "runtime/framing"}},
		"scheduler/gate":            {TestImports: []string{mod + "core/scenario", mod + "agent"}},
		"scheduler/eps":             {TestImports: []string{mod + "runtime/scenario"}},
		"core/scenario":             {},
		"core/topology":             {Deps: []string{mod + "runtime/allreduce"}},
	}
	got := violations(pkgs, rules())
	want := []string{
		"agent depends on " + mod + "scheduler/policy",
		"core/syncmodel depends on google.golang.org/grpc",
		"core/syncmodel imports os",
		"core/topology depends on " + mod + "runtime/allreduce",
		"runtime/worker depends on " + mod + "tui/keys",
		"scheduler/console/client depends on " + mod + "scheduler/console",
		"scheduler/daemon's tests depend on " + mod + "runtime/framing",
		"scheduler/eps's tests depend on " + mod + "runtime/scenario",
		"scheduler/loadtest depends on " + mod + "tui/client",
		"scheduler/manager depends on " + mod + "runtime/server",
		"scheduler/pki depends on " + mod + "runtime/framing",
		"scheduler/shard depends on go.etcd.io/bbolt",
		"scheduler/shard imports go.etcd.io/bbolt",
		"tui depends on " + mod + "scheduler/manager",
	}
	var short []string
	for _, g := range got {
		short = append(short, g[:strings.Index(g, " (")])
	}
	if !slices.Equal(short, want) {
		t.Errorf("violations =\n%s\nwant\n%s", strings.Join(short, "\n"), strings.Join(want, "\n"))
	}
}
