package manager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// JobLabel is the label that names a kelpie job on every metric. It is not
// "job": Prometheus sets "job" on every scraped series to the scrape job's
// name and would rewrite ours to "exported_job".
const JobLabel = "kelpie_job"

// Collector exposes the manager's figures in Prometheus form. It reads the
// same views the console shows, at scrape time. A job that has ended keeps
// only its job-level series (state, iteration, samples, loss, accuracy,
// actions and their outcomes): its nodes' live figures (BPT, straggler
// class, speed, throughput, delayed pulls) and its waiting actions go at
// the first scrape after it ended, killed or not, so that no alert on them
// outlives it.
type Collector struct {
	m                                            *Manager
	bpt, throughput, speed, superior, dprs, acts *prometheus.Desc
	nodes, jobs, jobState, class, pendingAge     *prometheus.Desc
	predErr, outcomes, regionBytes               *prometheus.Desc
	// The job's progress (kelpie_job_*), and the counters that replace
	// kelpie_server_dprs and kelpie_action_outcomes (kept for one release).
	iteration, samples, loss, accuracy, jobThroughput *prometheus.Desc
	delayedPulls, outcomesTotal                       *prometheus.Desc
	// kelpie_job_phase_seconds_total: the goodput ledger (goodput.go).
	phaseSeconds *prometheus.Desc
}

// Collector returns the manager's Prometheus collector.
func (m *Manager) Collector() *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("kelpie_"+name, help, labels, nil)
	}
	return &Collector{m: m,
		bpt: d("node_bpt_seconds", "Mean batch processing time of a worker over the Monitor's window.", JobLabel, "node", "window"),
		throughput: d("node_throughput_samples_per_second", "A worker's speed v_i = B_i / T_i while it computes (AntDT), "+
			"waiting for the others left out: its sum over workers is not the job's throughput (kelpie_job_throughput_samples_per_second).", JobLabel, "node"),
		speed:    d("server_speed_bytes_per_second", "A parameter server's speed: bytes per second of worker exchanges (PSLD).", JobLabel, "node"),
		superior: d("superior_set_size", "Size of PSLD's superior parameter-server set.", JobLabel),
		dprs: d("server_dprs", "Deprecated (removed in the next release): kelpie_server_delayed_pulls_total. "+
			"Delayed pull requests a parameter server has held (FluentPS).", JobLabel, "node"),
		delayedPulls: d("server_delayed_pulls_total", "Delayed pull requests (DPRs) a parameter server has held so far (FluentPS).", JobLabel, "node"),
		acts:         d("actions", "Actions by kind and state.", JobLabel, "kind", "state"),
		nodes:        d("nodes", "Nodes by role and state.", JobLabel, "role", "state"),
		jobs:         d("jobs", "Jobs by state.", "state"),
		jobState:     d("job_state", "1 for a job's current state (queued, running, completed, failed, killed, diverged, ...).", JobLabel, "state"),
		class:        d("node_straggler", "1 while the Monitor classes a node as a straggler (AntDT: transient or persistent).", JobLabel, "node", "role", "class"),
		pendingAge:   d("action_pending_seconds", "How long an action has waited for an operator's decision.", JobLabel, "id", "kind", "policy", "target"),
		predErr: d("action_prediction_error", "Mean relative error (realized - predicted) / predicted of the job's recent measured actions, by policy and kind.",
			JobLabel, "policy", "kind"),
		regionBytes: d("job_region_bytes_total", "Bytes the job's workers moved from one region (cluster.topology: pod/rack) to another, over their reports so far.",
			JobLabel, "from_region", "to_region"),
		outcomes: d("action_outcomes", "Deprecated (removed in the next release): kelpie_action_outcomes_total. "+
			"The job's recent measured actions by policy, kind and outcome.", JobLabel, "policy", "kind", "outcome"),
		outcomesTotal: d("action_outcomes_total", "The job's actions whose effect was measured, by policy, kind and outcome (hit: at least half the predicted gain; miss).",
			JobLabel, "policy", "kind", "outcome"),
		iteration: d("job_iteration", "The job's iteration (the furthest worker's).", JobLabel),
		samples:   d("job_samples_total", "Samples the job's workers have trained, restarts included.", JobLabel),
		loss:      d("job_loss", "The job's mean training loss lately (NaN once it diverged).", JobLabel),
		accuracy:  d("job_accuracy", "The completed job's test accuracy.", JobLabel),
		jobThroughput: d("job_throughput_samples_per_second", "Samples the job trained per wall-clock second over the last 10 s "+
			"(the console's throughput); only while the job runs.", JobLabel),
		phaseSeconds: d("job_phase_seconds_total", "The job's wall-clock seconds since its submission by phase of its goodput ledger "+
			"(computing, communicating, waiting, recovering, paused, queued, idle); they add up to its age.", JobLabel, "phase"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bpt, c.throughput, c.speed, c.superior, c.dprs, c.acts, c.nodes, c.jobs, c.jobState,
		c.class, c.pendingAge, c.predErr, c.outcomes, c.regionBytes, c.iteration, c.samples, c.loss, c.accuracy,
		c.jobThroughput, c.delayedPulls, c.outcomesTotal, c.phaseSeconds} {
		ch <- d
	}
}

// ended says whether a job in state is over.
func ended(state string) bool {
	switch state {
	case StateCompleted, StateFailed, StateKilled, StateDiverged:
		return true
	}
	return false
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	now := c.m.now()
	jobs := c.m.jobList()
	byState := map[string]int{}
	for _, v := range c.m.metricsViews() {
		byState[v.State]++
		live := !ended(v.State)
		g(c.jobState, 1, v.Name, v.State)
		g(c.iteration, float64(v.Iteration), v.Name)
		if v.Loss != 0 {
			g(c.loss, v.Loss, v.Name)
		}
		if v.State == StateCompleted {
			g(c.accuracy, v.Accuracy, v.Name)
		}
		if j := jobs[v.Name]; j != nil {
			counter(c.samples, float64(j.coord.WorkerSamples()), v.Name)
			c.collectOutcomeCounts(counter, j)
		}
		if live {
			g(c.jobThroughput, v.Throughput, v.Name)
			if v.Monitor != nil {
				g(c.superior, float64(len(v.Monitor.Superior)), v.Name)
			}
		}
		for phase, s := range v.GetGoodput().GetPhases() {
			counter(c.phaseSeconds, s, v.Name, phase)
		}
		for _, b := range v.RegionBytes {
			counter(c.regionBytes, float64(b.Bytes), v.Name, b.FromRegion, b.ToRegion)
		}
		nodes := map[[2]string]int{}
		for _, n := range v.Nodes {
			nodes[[2]string{n.Role, n.State}]++
			if !live {
				continue
			}
			if n.Class == "transient" || n.Class == "persistent" {
				g(c.class, 1, v.Name, n.Name, n.Role, n.Class)
			}
			if n.Role == "worker" {
				g(c.bpt, n.BptShortS, v.Name, n.Name, "transient")
				g(c.bpt, n.BptLongS, v.Name, n.Name, "persistent")
				g(c.throughput, n.Throughput, v.Name, n.Name)
			} else {
				g(c.speed, n.Speed, v.Name, n.Name)
			}
		}
		for k, n := range nodes {
			g(c.nodes, float64(n), v.Name, k[0], k[1])
		}
		acts := map[[2]string]int{}
		for _, a := range v.Actions {
			acts[[2]string{a.Kind, a.State}]++
			if live && a.State == "proposed" && a.Created != nil {
				g(c.pendingAge, now.Sub(a.Created.AsTime()).Seconds(), v.Name, a.Id, a.Kind, a.Policy, a.Target)
			}
		}
		for k, n := range acts {
			g(c.acts, float64(n), v.Name, k[0], k[1])
		}
		c.collectOutcomes(g, v)
		if j := jobs[v.Name]; j != nil && live {
			if p := j.dprs.Load(); p != nil {
				for node, d := range *p {
					g(c.dprs, float64(d), v.Name, node)
					counter(c.delayedPulls, float64(d), v.Name, node)
				}
			}
		}
	}
	for s, n := range byState {
		g(c.jobs, float64(n), s)
	}
}

// collectOutcomeCounts exports kelpie_action_outcomes_total: every action
// of the job whose effect was measured, by policy, kind and outcome. The
// job keeps all its actions, so the counts only grow.
func (c *Collector) collectOutcomeCounts(counter func(*prometheus.Desc, float64, ...string), j *jobState) {
	count := map[[3]string]int{}
	j.onActor(func() {
		for _, a := range j.actions {
			if r := a.GetRealized(); r != nil {
				outcome := "hit"
				if r.GetMiss() {
					outcome = "miss"
				}
				count[[3]string{a.Policy, a.Kind, outcome}]++
			}
		}
	})
	for k, n := range count {
		counter(c.outcomesTotal, float64(n), j.spec.Name, k[0], k[1], k[2])
	}
}

// collectOutcomes exports the realized effects of a job's recent actions:
// the mean prediction error of those that had a prediction, and the count
// of hits and misses, by policy and kind.
func (c *Collector) collectOutcomes(g func(*prometheus.Desc, float64, ...string), v *consolepb.JobView) {
	type key struct{ policy, kind string }
	errSum, errN := map[key]float64{}, map[key]int{}
	count := map[[3]string]int{}
	for _, a := range v.Actions {
		r := a.GetRealized()
		if r == nil {
			continue
		}
		k := key{a.Policy, a.Kind}
		if r.GetPredictedThroughput() > 0 || r.GetPredictedBptS() > 0 {
			errSum[k] += r.GetPredictionError()
			errN[k]++
		}
		outcome := "hit"
		if r.GetMiss() {
			outcome = "miss"
		}
		count[[3]string{a.Policy, a.Kind, outcome}]++
	}
	for k, n := range errN {
		g(c.predErr, errSum[k]/float64(n), v.Name, k.policy, k.kind)
	}
	for k, n := range count {
		g(c.outcomes, float64(n), v.Name, k[0], k[1], k[2])
	}
}
