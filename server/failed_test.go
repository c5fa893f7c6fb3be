package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// NATS closes a connection for good after a protocol error. When one of
// the node's internal connections closes that way, the node says so: it
// is failed (Failed, Err), and /healthz answers 503 with the reason, so
// that `xrealm serve` exits and a supervisor restarts it, instead of a
// node that accepts clients without its services.
func TestInternalConnectionClosedFailsNode(t *testing.T) {
	n := startNode(t, nil)
	if n.Err() != nil {
		t.Fatalf("a fresh node is failed: %v", n.Err())
	}
	nc := n.ncs[0]
	// A subject longer than the server's control line (4 KiB) is a
	// protocol error: the server answers -ERR and closes the connection.
	if err := nc.Publish(strings.Repeat("a", 8<<10), nil); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	select {
	case <-n.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not notice that its internal connection closed")
	}
	if err := n.Err(); err == nil || !strings.Contains(err.Error(), "xrealm-services") {
		t.Errorf("Err() = %v, want one that names the connection", err)
	}
	resp, err := http.Get(n.httpURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct{ Status, Error string }
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || h.Status != "failed" || h.Error == "" {
		t.Errorf("/healthz: %d %+v, want 503 failed with the reason", resp.StatusCode, h)
	}
}

// Closing the node closes its internal connections without failing it.
func TestCloseDoesNotFailNode(t *testing.T) {
	n := startNode(t, nil)
	n.Close()
	if err := n.Err(); err != nil {
		t.Errorf("a closed node is failed: %v", err)
	}
}

// Close stops everything at once, the front ends' connections included.
// It fails if an MQTT client connected to a closed node is left connected
// to a node without a bus, its connection never closed.
func TestCloseClosesClientConnections(t *testing.T) {
	n := startNode(t, func(c *Config) { c.Insecure = true })
	nc := rawConnect(t, n.mqttURL, "c1", "u1", "", 0, "", "")
	if p, err := packets.ReadPacket(nc); err != nil {
		t.Fatalf("no CONNACK: %v", err)
	} else if _, ok := p.(*packets.ConnackPacket); !ok {
		t.Fatalf("got %v, want a CONNACK", p)
	}
	n.Close()
	nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadAll(nc); err != nil {
		t.Fatalf("the client's connection stayed open after Close: %v", err)
	}
}
