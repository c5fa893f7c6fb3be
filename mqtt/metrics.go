package mqtt

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the front end's Prometheus metrics.
type Metrics struct {
	Connections  prometheus.Gauge
	Connects     *prometheus.CounterVec // by result
	MessagesIn   prometheus.Counter
	MessagesOut  prometheus.Counter
	AuthDenials  *prometheus.CounterVec // by action: connect, publish, subscribe
	Dropped      prometheus.Counter     // frames dropped by full queues
	Coalesced    prometheus.Counter     // stale poses replaced in full queues
	Oversized    prometheus.Counter
	PersistAcked prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil = not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Connections:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "xrealm_mqtt_connections", Help: "Open MQTT connections."}),
		Connects:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xrealm_mqtt_connects_total", Help: "MQTT CONNECTs by result."}, []string{"result"}),
		MessagesIn:   prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_mqtt_messages_in_total", Help: "PUBLISH packets received from MQTT clients."}),
		MessagesOut:  prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_mqtt_messages_out_total", Help: "Messages queued to MQTT clients."}),
		AuthDenials:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xrealm_auth_denials_total", Help: "Actions refused by access control, by action: connect, publish, subscribe (MQTT) and http (REST, token and SFU signalling requests)."}, []string{"action"}),
		Dropped:      prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_mqtt_dropped_total", Help: "Messages dropped because a connection's queue was full."}),
		Coalesced:    prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_mqtt_coalesced_total", Help: "Stale pose messages replaced by newer ones in a full queue."}),
		Oversized:    prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_mqtt_oversized_total", Help: "PUBLISH packets refused for exceeding the payload limit."}),
		PersistAcked: prometheus.NewCounter(prometheus.CounterOpts{Name: "xrealm_mqtt_durable_acks_total", Help: "QoS 1 object messages acknowledged after JetStream stored them."}),
	}
	if reg != nil {
		reg.MustRegister(m.Connections, m.Connects, m.MessagesIn, m.MessagesOut, m.AuthDenials, m.Dropped, m.Coalesced, m.Oversized, m.PersistAcked)
	}
	return m
}
