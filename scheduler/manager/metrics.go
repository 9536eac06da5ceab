package manager

import (
	"github.com/prometheus/client_golang/prometheus"
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
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bpt, c.throughput, c.speed, c.superior, c.dprs, c.acts, c.nodes, c.jobs, c.jobState, c.class, c.pendingAge} {
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
