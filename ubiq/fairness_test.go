package ubiq

import (
	"slices"
	"sync"
	"testing"
)

// A hostile peer churns its observed rooms while the store is slow (the
// cleanups are held back): it has its bound of 64 cleanups queued. An
// honest peer then drops two rooms. The queue is served round-robin by
// connection: once the store is fast again, the honest peer's cleanups run
// among the first, and its answer came before any cleanup ran (a
// connection below its bound does not wait). With one first-in first-out
// queue the honest peer's cleanups would come after all of the hostile
// peer's, and once at its own bound it would wait for them.
func TestCleanupsServedRoundRobin(t *testing.T) {
	ts := startServer(t, nil, func(c *Config) {
		c.Inbound = Budget{FramesPerSecond: -1, BytesPerSecond: -1}
	})
	open := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(open) }) }
	t.Cleanup(release)
	var mu sync.Mutex
	var order []string
	ts.s.cleanups.before = func(id string) {
		<-open
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
	}
	fresh := func(n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = newUUID()
		}
		return ids
	}
	hostile, honest := dialPeer(t, ts.tcp), dialPeer(t, ts.tcp)
	hostile.request("SetObserved", SetObservedArgs{ClientID: hostile.clientID, Rooms: fresh(maxObserved)})
	hostile.expect("Observed")
	hostile.request("SetObserved", SetObservedArgs{ClientID: hostile.clientID, Rooms: fresh(maxObserved)})
	hostile.expect("Observed")
	eventually(t, "the hostile peer's cleanups queued", func() bool { return ts.s.cleanups.queued() >= maxConnCleanups })

	mine := fresh(2)
	honest.request("SetObserved", SetObservedArgs{ClientID: honest.clientID, Rooms: mine})
	honest.expect("Observed")
	honest.request("SetObserved", SetObservedArgs{ClientID: honest.clientID, Rooms: []string{}})
	honest.expect("Observed") // while no cleanup has run
	eventually(t, "the honest peer's cleanups queued", func() bool { return ts.s.cleanups.queued() >= maxConnCleanups+2 })
	release()
	eventually(t, "every cleanup done", ts.s.cleanups.idle)

	mu.Lock()
	defer mu.Unlock()
	// maxCleanupWorkers of the hostile peer's were taken before the
	// honest peer asked; then the turns alternate.
	limit := maxCleanupWorkers + 2*len(mine)
	for _, id := range mine {
		if i := slices.Index(order, id); i < 0 || i >= limit {
			t.Errorf("the honest peer's room %s cleaned up %dth of %d, want among the first %d", id, i+1, len(order), limit)
		}
	}
}
