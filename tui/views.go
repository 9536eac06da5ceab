package tui

import (
	"github.com/charmbracelet/bubbles/key"

	"github.com/kelpie/kelpie/tui/keys"
)

type viewID int

const (
	viewJobs viewID = iota
	viewJob
	viewActions
	viewPolicies
	viewEvents
	viewLaunch
	viewTriage
)

// scope is what a view subscribes to.
type scope int

const (
	scopeNone    scope = iota // nothing of its own (events come with every subscription; the launch form)
	scopeAllJobs              // every job (the jobs list)
	scopeOpenJob              // the open job, with its nodes, heatmap and charts
)

// viewDef is everything the root knows of one view. Adding a view = its component, one
// constant above and one line in viewDefs; nothing else in the root switches on a view.
type viewDef struct {
	new     func(*shared) component
	command string                          // ":command" opens it
	key     func(g keys.Global) key.Binding // the global key that opens it (nil: none)
	scope   scope
	// ofJob: the view is about one job. ":command JOB" opens it for JOB (which must exist), its
	// key opens it for the job under the cursor, and it shows the job in the crumbs.
	ofJob bool
	// needsJob: it cannot open without a job (":job" alone is an error when none is open).
	needsJob bool
	// inJob: a part of the open job (its actions, policies): esc goes to the job, not the list,
	// and the crumbs read jobs › JOB › title.
	inJob bool
	// aside: hangs off the list but is not about jobs (events, launch): the crumbs are its title.
	aside bool
	// opened runs when its key opened it.
	opened func(component)
}

// viewDefs registers the views, by viewID (the jobs list, the root, first).
var viewDefs = [...]viewDef{
	viewJobs: {new: func(c *shared) component { return newJobsView(c) }, command: "jobs", key: func(g keys.Global) key.Binding { return g.Jobs }, scope: scopeAllJobs},
	viewJob:  {new: func(c *shared) component { return newJobView(c) }, command: "job", scope: scopeOpenJob, ofJob: true, needsJob: true},
	viewActions: {new: func(c *shared) component { return newActionsView(c) }, command: "actions", key: func(g keys.Global) key.Binding { return g.Actions },
		scope: scopeOpenJob, ofJob: true, inJob: true, opened: func(v component) {
			if a, ok := v.(*actionsView); ok {
				a.focusPending()
			}
		}},
	viewPolicies: {new: func(c *shared) component { return newPoliciesView(c) }, command: "policies", key: func(g keys.Global) key.Binding { return g.Policies },
		scope: scopeOpenJob, ofJob: true, inJob: true},
	viewEvents: {new: func(c *shared) component { return newEventsView(c) }, command: "events", key: func(g keys.Global) key.Binding { return g.Events }, aside: true},
	viewLaunch: {new: func(c *shared) component { return newLaunchView(c) }, command: "launch", key: func(g keys.Global) key.Binding { return g.Launch }, aside: true},
	// The stacks and probe view: opened by the job view's keys (S, W, x) or
	// :triage (what was shown last).
	viewTriage: {new: func(c *shared) component { return newTriageView(c) }, command: "triage", scope: scopeOpenJob, ofJob: true, needsJob: true, inJob: true},
}

// viewByCommand is the view ":name" opens.
func viewByCommand(name string) (viewID, viewDef, bool) {
	for id, d := range viewDefs {
		if d.command == name {
			return viewID(id), d, true
		}
	}
	return 0, viewDef{}, false
}
