package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
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
