package mqtt

import "github.com/prometheus/client_golang/prometheus"

var (
	connLabels    = []string{"client", "remote", "transport"}
	descDropped   = prometheus.NewDesc("xrealm_mqtt_connection_dropped_total", "Messages dropped by this connection's full queue (connections that dropped or coalesced any).", connLabels, nil)
	descCoalesced = prometheus.NewDesc("xrealm_mqtt_connection_coalesced_total", "Stale messages replaced in this connection's full queue (connections that dropped or coalesced any).", connLabels, nil)
	descQueued    = prometheus.NewDesc("xrealm_mqtt_connection_queued", "Messages waiting in this connection's queue (connections that dropped or coalesced any).", connLabels, nil)
)

// connCollector reports the queue counters of every open connection that
// has dropped or coalesced messages: the slow consumers. A healthy
// connection has neither, so a node with thousands of them still scrapes
// small.
type connCollector struct{ s *Server }

// ConnectionCollector returns a collector of the per-connection metrics of
// the slow consumers among the server's connections, to register with the
// node's registry.
func (s *Server) ConnectionCollector() prometheus.Collector { return connCollector{s} }

func (c connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDropped
	ch <- descCoalesced
	ch <- descQueued
}

func (c connCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	conns := make([]*conn, 0, len(c.s.conns))
	for k := range c.s.conns {
		conns = append(conns, k)
	}
	c.s.mu.Unlock()
	seen := map[[3]string]bool{}
	for _, k := range conns {
		st := k.w.Stats()
		if st.Dropped == 0 && st.Coalesced == 0 {
			continue
		}
		l := [3]string{k.clientID, k.nc.RemoteAddr().String(), k.transport}
		if seen[l] {
			continue
		}
		seen[l] = true
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Dropped), l[:]...)
		ch <- prometheus.MustNewConstMetric(descCoalesced, prometheus.CounterValue, float64(st.Coalesced), l[:]...)
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(st.Queued), l[:]...)
	}
}
