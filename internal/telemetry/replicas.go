package telemetry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cove-dev/cove/api"
)

// Replica is what a scrape reads of this replica of the control plane.
type Replica interface {
	// ReplicaID is the replica's ID (rep_…), new at each start.
	ReplicaID() string
	// Leader reports whether it leads now.
	Leader() bool
}

// NodeLister lists the fleet's nodes at each scrape.
type NodeLister func(ctx context.Context) ([]api.Node, error)

var (
	replicaDesc = prometheus.NewDesc("cove_replica_leader",
		"1 while this replica holds the leader lease (runs the singletons), else 0.", []string{"replica"}, nil)
	nodeCapacityDesc = prometheus.NewDesc("cove_node_capacity",
		"A node's capacity by resource (cpus, memory_mib, disk_mib).", []string{"node", "resource"}, nil)
	nodeReservedDesc = prometheus.NewDesc("cove_node_reserved",
		"What the sandboxes placed on a node reserve, by resource (cpus, memory_mib, disk_mib).", []string{"node", "resource"}, nil)
	nodeSandboxesDesc = prometheus.NewDesc("cove_node_sandboxes",
		"Sandboxes placed on a node.", []string{"node"}, nil)
)

// ObserveReplica adds this replica's metrics: whether it leads, and the
// store calls and API requests it has in flight (what queues on it).
func (m *Metrics) ObserveReplica(r Replica) {
	m.reg.MustRegister(replicaCollector{r})
}

// ObserveNodes adds the fleet's metrics per node (capacity, reserved,
// sandboxes), read from list at each scrape. Removed nodes are left out.
func (m *Metrics) ObserveNodes(list NodeLister) {
	m.reg.MustRegister(&nodeCollector{list: list})
}

type replicaCollector struct{ r Replica }

func (c replicaCollector) Describe(ch chan<- *prometheus.Desc) { ch <- replicaDesc }

func (c replicaCollector) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if c.r.Leader() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(replicaDesc, prometheus.GaugeValue, v, c.r.ReplicaID())
}

type nodeCollector struct{ list NodeLister }

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodeCapacityDesc
	ch <- nodeReservedDesc
	ch <- nodeSandboxesDesc
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.list(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(nodeCapacityDesc, err)
		return
	}
	for _, n := range nodes {
		if n.State == api.NodeRemoved {
			continue
		}
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{n.Name}, labels...)...)
		}
		gauge(nodeCapacityDesc, n.Capacity.CPUs, "cpus")
		gauge(nodeCapacityDesc, float64(n.Capacity.MemoryMiB), "memory_mib")
		gauge(nodeCapacityDesc, float64(n.Capacity.DiskMiB), "disk_mib")
		gauge(nodeReservedDesc, n.Reserved.CPUs, "cpus")
		gauge(nodeReservedDesc, float64(n.Reserved.MemoryMiB), "memory_mib")
		gauge(nodeReservedDesc, float64(n.Reserved.DiskMiB), "disk_mib")
		gauge(nodeSandboxesDesc, float64(n.Sandboxes))
	}
}
