package ubiq

import "github.com/prometheus/client_golang/prometheus"

// metrics are the Ubiq front end's Prometheus metrics. Besides totals, it
// reports each open connection's writer counters (labelled by peer uuid
// and remote address) while the connection lasts.
type metrics struct {
	s           *Server
	connections prometheus.Gauge
	rooms       prometheus.Gauge
	messagesIn  prometheus.Counter
	bytesIn     prometheus.Counter
	messagesOut prometheus.Counter
	dropped     prometheus.Counter
	slow        prometheus.Counter
	coalesced   prometheus.Counter
	malformed   prometheus.Counter
	timeouts    prometheus.Counter
	nodesSwept  prometheus.Counter
	keysSwept   prometheus.Counter
	// retryPending counts departure writes that failed and wait to be
	// retried (retrier).
	retryPending prometheus.Gauge

	throttledFrames  prometheus.Counter
	throttledSeconds prometheus.Counter
	throttleEpisodes prometheus.Counter

	connDropped, connCoalesced, connWritten, connQueued, connThrottled *prometheus.Desc
}

func newMetrics(s *Server) *metrics {
	labels := []string{"peer", "remote", "transport"}
	return &metrics{
		s:            s,
		connections:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "xrealm_ubiq_connections", Help: "Open Ubiq connections."}),
		rooms:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "xrealm_ubiq_active_rooms", Help: "Rooms with local members or observers on this node."}),
		messagesIn:   prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_messages_in_total", Help: "Frames received from Ubiq peers."}),
		bytesIn:      prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_bytes_in_total", Help: "Bytes of frames received from Ubiq peers."}),
		messagesOut:  prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_messages_out_total", Help: "Relayed frames queued to Ubiq peers."}),
		dropped:      prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_dropped_total", Help: "Relayed frames not queued because their receiver's connection was ending: its queue had overflowed (xrealm_ubiq_slow_disconnects_total), or it was closing. A full queue takes frames past its bound; it drops none."}),
		slow:         prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_slow_disconnects_total", Help: "Peers disconnected for falling too far behind: their queue was full past its bound by as much again (frames or bytes), and could not take an event or server message."}),
		coalesced:    prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_coalesced_total", Help: "Stale frames replaced in a full queue by newer ones from the same sender to the same object, one it declared as state (peer property xrealm.coalesce)."}),
		malformed:    prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_malformed_total", Help: "Connections closed for a malformed frame: a length field out of bounds, or a WebSocket message that is not exactly one whole frame."}),
		timeouts:     prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_timeouts_total", Help: "Peers dropped for being silent to the server."}),
		nodesSwept:   prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_dead_nodes_swept_total", Help: "Cluster nodes whose heartbeat stopped and whose room keys this node deleted."}),
		keysSwept:    prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_dead_node_rooms_total", Help: "Rooms that lost members, observers or presence of a dead node in a sweep by this node."}),
		retryPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xrealm_ubiq_room_writes_retrying", Help: "Room departure writes (a member key's deletion, a count-out that may free a join code, a presence key's deletion) that failed and are retried in the background until the store takes them."}),

		throttledFrames:  prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_throttled_frames_total", Help: "Frames from peers that had spent their inbound budget: the server waited before handling each, and read nothing more from that peer meanwhile."}),
		throttledSeconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_throttled_seconds_total", Help: "Time connections' read loops waited for their inbound budget to refill, summed over connections."}),
		throttleEpisodes: prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_ubiq_throttle_episodes_total", Help: "Times a peer went over its inbound budget after having had its whole burst (each is logged at INFO, at most once a minute per connection)."}),

		connDropped:   prometheus.NewDesc("xrealm_ubiq_connection_dropped_total", "Frames this connection's queue refused once it had overflowed (the peer is then disconnected) or while it closed.", labels, nil),
		connCoalesced: prometheus.NewDesc("xrealm_ubiq_connection_coalesced_total", "Stale frames replaced in this connection's full queue.", labels, nil),
		connWritten:   prometheus.NewDesc("xrealm_ubiq_connection_written_total", "Frames written to this connection.", labels, nil),
		connQueued:    prometheus.NewDesc("xrealm_ubiq_connection_queued", "Frames waiting in this connection's queue.", labels, nil),
		connThrottled: prometheus.NewDesc("xrealm_ubiq_connection_throttled_seconds_total", "Time this connection's read loop waited for its inbound budget to refill.", labels, nil),
	}
}

func (m *metrics) plain() []prometheus.Collector {
	return []prometheus.Collector{m.connections, m.rooms, m.messagesIn, m.bytesIn, m.messagesOut, m.dropped, m.slow, m.coalesced, m.malformed, m.timeouts, m.nodesSwept, m.keysSwept, m.retryPending,
		m.throttledFrames, m.throttledSeconds, m.throttleEpisodes}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.plain() {
		c.Describe(ch)
	}
	ch <- m.connDropped
	ch <- m.connCoalesced
	ch <- m.connWritten
	ch <- m.connQueued
	ch <- m.connThrottled
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.plain() {
		c.Collect(ch)
	}
	m.s.mu.Lock()
	conns := make([]*conn, 0, len(m.s.conns))
	for c := range m.s.conns {
		conns = append(conns, c)
	}
	m.s.mu.Unlock()
	seen := map[[3]string]bool{}
	for _, c := range conns {
		l := [3]string{c.uuid(), c.nc.RemoteAddr().String(), c.transport}
		if seen[l] {
			continue
		}
		seen[l] = true
		st := c.w.Stats()
		ch <- prometheus.MustNewConstMetric(m.connDropped, prometheus.CounterValue, float64(c.lost.Load()), l[:]...)
		ch <- prometheus.MustNewConstMetric(m.connCoalesced, prometheus.CounterValue, float64(st.Coalesced), l[:]...)
		ch <- prometheus.MustNewConstMetric(m.connWritten, prometheus.CounterValue, float64(st.Written), l[:]...)
		ch <- prometheus.MustNewConstMetric(m.connQueued, prometheus.GaugeValue, float64(st.Queued), l[:]...)
		ch <- prometheus.MustNewConstMetric(m.connThrottled, prometheus.CounterValue, float64(c.throttle.waited.Load())/1e9, l[:]...)
	}
}
