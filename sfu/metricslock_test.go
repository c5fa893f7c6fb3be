package sfu

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCollectDoesNotHoldNode: a scrape whose reader stops reading (a slow
// or stuck scraper) while the node has a relay link does not hold the
// node's lock. It fails if the links' metrics are sent on the channel
// under the node's lock: the node (joins, signals, allocation) then waits
// on the scraper.
func TestCollectDoesNotHoldNode(t *testing.T) {
	c := startCluster(t, "a", "b")
	n1 := c.nodes[0]
	if _, err := n1.link("2"); err != nil {
		t.Fatal(err)
	}
	ch := make(chan prometheus.Metric) // unbuffered: each send waits for the reader
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&collector{n1}).Collect(ch)
	}()
	// read the rest (before the nodes close, on failure too)
	t.Cleanup(func() {
		go func() {
			for range ch {
			}
		}()
		<-done
		close(ch)
	})
	<-ch // the scrape has begun; its reader now stalls
	waitFor(t, "the node's lock while a scrape waits on its reader", func() bool {
		if !n1.mu.TryLock() {
			return false
		}
		n1.mu.Unlock()
		return true
	})
}
