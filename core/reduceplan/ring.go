package reduceplan

import "github.com/kelpie/kelpie/core/topology"

// Ring returns ring allreduce of n elements among the nodes of topo (n
// nodes): the vector is cut into one chunk per node; in scatter-reduce step
// s each node sends chunk (k−s) mod N to its successor, which adds it, so
// after N−1 steps position k of the ring holds the full sum of chunk k+1;
// all-gather then passes the finished chunks on for N−1 more steps, the
// receiver copying. The ring visits nodes pod by pod and rack by rack, so it
// crosses each region boundary as few times as a ring can.
func Ring(nodes, n int, topo topology.Topology) *Plan {
	p := &Plan{Kind: "ring", Nodes: nodes, Len: n, Chunks: Split(n, nodes)}
	if nodes < 2 {
		return p
	}
	ring := topo.Order(nodes)
	nc := len(p.Chunks) // fewer chunks than nodes when n < nodes
	for s := range nodes - 1 {
		var step []Transfer
		for k := range nodes {
			c := ((k-s)%nodes + nodes) % nodes
			if c >= nc {
				continue
			}
			step = append(step, Transfer{From: ring[k], To: ring[(k+1)%nodes], Chunk: c, Op: Reduce})
		}
		p.Steps = append(p.Steps, step)
	}
	for s := range nodes - 1 {
		var step []Transfer
		for k := range nodes {
			c := ((k+1-s)%nodes + nodes) % nodes
			if c >= nc {
				continue
			}
			step = append(step, Transfer{From: ring[k], To: ring[(k+1)%nodes], Chunk: c, Op: Copy})
		}
		p.Steps = append(p.Steps, step)
	}
	p.compact()
	return p
}
