package launch

// ClusterEvent is what a launcher that runs nodes on a cluster (the
// Kubernetes launcher, scheduler/kube) says of a job's node: a Pod
// pending, deleted by someone else, relaunched. Launchers deliver them
// through a channel the daemon drains into the job's event log
// (daemon.Config.ClusterEvents); a launcher started before the scheduler's
// manager exists queues them there, so none is lost on the way.
type ClusterEvent struct {
	Job, Node string
	Message   string // one line for the job's event log
}
