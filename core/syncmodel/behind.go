package syncmodel

import "slices"

// Behind is the members that have not pushed the version V_train waits
// for (those that owe it: a member that joined for a later version does
// not), in increasing order: the workers the others' held pulls wait for.
func (e *Engine) Behind() []int {
	var out []int
	set := e.pushed[e.vtrain]
	for w := range e.members {
		if e.from[w] <= e.vtrain && !set[w] {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}
