package manager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// JobLabel is the label that names a kelpie job on every metric. It is not
// "job": Prometheus sets "job" on every scraped series to the scrape job's
// name and would rewrite ours to "exported_job".
const JobLabel = "kelpie_job"

// Collector exposes the manager's figures in Prometheus form. It reads the
// same views the console shows, at scrape time.
type Collector struct {
	m                                            *Manager
	bpt, throughput, speed, superior, dprs, acts *prometheus.Desc
	nodes, jobs, jobState, class, pendingAge     *prometheus.Desc
	predErr, outcomes, regionBytes               *prometheus.Desc
}

// Collector returns the manager's Prometheus collector.
func (m *Manager) Collector() *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("kelpie_"+name, help, labels, nil)
	}
	return &Collector{m: m,
		bpt:        d("node_bpt_seconds", "Mean batch processing time of a worker over the Monitor's window.", JobLabel, "node", "window"),
		throughput: d("node_throughput_samples_per_second", "A worker's throughput v_i = B_i / T_i.", JobLabel, "node"),
		speed:      d("server_speed_bytes_per_second", "A parameter server's speed: bytes per second of worker exchanges (PSLD).", JobLabel, "node"),
		superior:   d("superior_set_size", "Size of PSLD's superior parameter-server set.", JobLabel),
		dprs:       d("server_dprs", "Delayed pull requests a parameter server has held (FluentPS).", JobLabel, "node"),
		acts:       d("actions", "Actions by kind and state.", JobLabel, "kind", "state"),
		nodes:      d("nodes", "Nodes by role and state.", JobLabel, "role", "state"),
		jobs:       d("jobs", "Jobs by state.", "state"),
		jobState:   d("job_state", "1 for a job's current state (queued, running, completed, failed, killed, diverged, ...).", JobLabel, "state"),
		class:      d("node_straggler", "1 while the Monitor classes a node as a straggler (AntDT: transient or persistent).", JobLabel, "node", "role", "class"),
		pendingAge: d("action_pending_seconds", "How long an action has waited for an operator's decision.", JobLabel, "id", "kind", "policy", "target"),
		predErr: d("action_prediction_error", "Mean relative error (realized - predicted) / predicted of the job's recent measured actions, by policy and kind.",
			JobLabel, "policy", "kind"),
		regionBytes: d("job_region_bytes_total", "Bytes the job's workers moved from one region (cluster.topology: pod/rack) to another, over their reports so far.",
			JobLabel, "from_region", "to_region"),
		outcomes: d("action_outcomes", "The job's recent measured actions by policy, kind and outcome (hit: at least half the predicted gain; miss).",
			JobLabel, "policy", "kind", "outcome"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bpt, c.throughput, c.speed, c.superior, c.dprs, c.acts, c.nodes, c.jobs, c.jobState, c.class, c.pendingAge, c.predErr, c.outcomes, c.regionBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	now := c.m.now()
	byState := map[string]int{}
	for _, v := range c.m.View(c.m.JobNames(), 1) {
		byState[v.State]++
		g(c.jobState, 1, v.Name, v.State)
		if v.Monitor != nil {
			g(c.superior, float64(len(v.Monitor.Superior)), v.Name)
		}
		for _, b := range v.RegionBytes {
			ch <- prometheus.MustNewConstMetric(c.regionBytes, prometheus.CounterValue, float64(b.Bytes), v.Name, b.FromRegion, b.ToRegion)
		}
		nodes := map[[2]string]int{}
		for _, n := range v.Nodes {
			nodes[[2]string{n.Role, n.State}]++
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
			if a.State == "proposed" && a.Created != nil {
				g(c.pendingAge, now.Sub(a.Created.AsTime()).Seconds(), v.Name, a.Id, a.Kind, a.Policy, a.Target)
			}
		}
		for k, n := range acts {
			g(c.acts, float64(n), v.Name, k[0], k[1])
		}
		c.collectOutcomes(g, v)
	}
	for name, j := range c.m.jobList() {
		if p := j.dprs.Load(); p != nil {
			for node, d := range *p {
				g(c.dprs, float64(d), name, node)
			}
		}
	}
	for s, n := range byState {
		g(c.jobs, float64(n), s)
	}
}

// collectOutcomes exports the realized effects of a job's recent actions:
// the mean prediction error of those that had a prediction, and the count
// of hits and misses, by policy and kind.
func (c *Collector) collectOutcomes(g func(*prometheus.Desc, float64, ...string), v *kelpiepb.JobView) {
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
