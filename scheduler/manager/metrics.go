package manager

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes the manager's figures in Prometheus form. It reads the
// same views the console shows, at scrape time.
type Collector struct {
	m                                            *Manager
	bpt, throughput, speed, superior, dprs, acts *prometheus.Desc
	nodes, jobs                                  *prometheus.Desc
}

// Collector returns the manager's Prometheus collector.
func (m *Manager) Collector() *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("kelpie_"+name, help, labels, nil)
	}
	return &Collector{m: m,
		bpt:        d("node_bpt_seconds", "Mean batch processing time of a worker over the Monitor's window.", "job", "node", "window"),
		throughput: d("node_throughput_samples_per_second", "A worker's throughput v_i = B_i / T_i.", "job", "node"),
		speed:      d("server_speed_bytes_per_second", "A parameter server's speed: bytes per second of worker exchanges (PSLD).", "job", "node"),
		superior:   d("superior_set_size", "Size of PSLD's superior parameter-server set.", "job"),
		dprs:       d("server_dprs", "Delayed pull requests a parameter server has held (FluentPS).", "job", "node"),
		acts:       d("actions", "Actions by kind and state.", "job", "kind", "state"),
		nodes:      d("nodes", "Nodes by role and state.", "job", "role", "state"),
		jobs:       d("jobs", "Jobs by state.", "state"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bpt, c.throughput, c.speed, c.superior, c.dprs, c.acts, c.nodes, c.jobs} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	byState := map[string]int{}
	for _, v := range c.m.View(c.m.JobNames(), 1) {
		byState[v.State]++
		if v.Monitor != nil {
			g(c.superior, float64(len(v.Monitor.Superior)), v.Name)
		}
		nodes := map[[2]string]int{}
		for _, n := range v.Nodes {
			nodes[[2]string{n.Role, n.State}]++
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
		}
		for k, n := range acts {
			g(c.acts, float64(n), v.Name, k[0], k[1])
		}
	}
	c.m.mu.Lock()
	for name, j := range c.m.jobs {
		for node, d := range j.dprs {
			g(c.dprs, float64(d), name, node)
		}
	}
	c.m.mu.Unlock()
	for s, n := range byState {
		g(c.jobs, float64(n), s)
	}
}
