package cause

import "fmt"

// answers lists, for the action kinds that answer only some causes, the
// causes they answer: a batch cut shortens a straggler's compute and data
// loading (they scale with the batch), not its wire or its waiting; a new
// block table or another server answers a slow server or link, not a slow
// worker's compute.
var answers = map[string][]Kind{
	"ADJUST_BS":     {Compute, Data},
	"REASSIGN":      {Link, Server, Push, Pull},
	"ADD_SERVER":    {Link, Server, Push, Pull},
	"REMOVE_SERVER": {Link, Server},
}

// Mismatch says why an action of kind does not answer node's measured
// cause c, or "" when it does (or the kind answers any cause: a restart,
// backup workers, a learning-rate change, a sync change).
func Mismatch(kind, node string, c Cause) string {
	ok, listed := answers[kind]
	if !listed || c.Kind == "" {
		return ""
	}
	for _, k := range ok {
		if k == c.Kind {
			return ""
		}
	}
	return fmt.Sprintf("%s does not answer the measured cause: %s (%s does not shorten %s)", kind, Describe(node, c), kind, what(c.Kind))
}

// what is a cause's phase in words.
func what(k Kind) string {
	switch k {
	case Compute:
		return "its computing"
	case Data:
		return "its data loading"
	case Push:
		return "its pushes on the wire"
	case Pull:
		return "its pulls on the wire"
	case Wait:
		return "its wait for the others"
	case Link:
		return "a slow link"
	case Server:
		return "a slow server"
	}
	return string(k)
}
