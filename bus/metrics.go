package bus

import (
	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descNATSConns  = prometheus.NewDesc("xrealm_nats_connections", "Connections to the embedded NATS server: NATS clients and xrealm's own in-process connections (front ends, services).", nil, nil)
	descNATSRoutes = prometheus.NewDesc("xrealm_nats_routes", "Cluster routes to other nodes.", nil, nil)
	descNATSLeafs  = prometheus.NewDesc("xrealm_nats_leafnodes", "Connected leaf nodes.", nil, nil)
	descNATSSubs   = prometheus.NewDesc("xrealm_nats_subscriptions", "Subscriptions on the embedded NATS server.", nil, nil)
	descNATSMsgs   = prometheus.NewDesc("xrealm_nats_client_messages_total", "Messages the NATS server received from (dir=in) and sent to (dir=out) its client connections, xrealm's own included.", []string{"dir"}, nil)
	descNATSBytes  = prometheus.NewDesc("xrealm_nats_client_bytes_total", "Bytes of those messages.", []string{"dir"}, nil)
	descNATSSlow   = prometheus.NewDesc("xrealm_nats_slow_consumers_total", "Connections the NATS server dropped for reading too slowly.", nil, nil)
)

// Collector returns a collector of the embedded NATS server's connection and
// traffic counters (its /varz), read at each scrape, for the node's
// registry: what MQTT and Ubiq report for their own clients, for NATS
// clients.
func (b *Bus) Collector() prometheus.Collector { return natsCollector{b.srv} }

type natsCollector struct{ srv *server.Server }

func (c natsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNATSConns, descNATSRoutes, descNATSLeafs, descNATSSubs, descNATSMsgs, descNATSBytes, descNATSSlow} {
		ch <- d
	}
}

func (c natsCollector) Collect(ch chan<- prometheus.Metric) {
	v, err := c.srv.Varz(nil)
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, x float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, l...)
	}
	counter := func(d *prometheus.Desc, x float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, x, l...)
	}
	gauge(descNATSConns, float64(v.Connections))
	gauge(descNATSRoutes, float64(v.Routes))
	gauge(descNATSLeafs, float64(v.Leafs))
	gauge(descNATSSubs, float64(v.Subscriptions))
	counter(descNATSMsgs, float64(v.InClientMsgs), "in")
	counter(descNATSMsgs, float64(v.OutClientMsgs), "out")
	counter(descNATSBytes, float64(v.InClientBytes), "in")
	counter(descNATSBytes, float64(v.OutClientBytes), "out")
	counter(descNATSSlow, float64(v.SlowConsumers))
}
