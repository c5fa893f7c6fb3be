package ubiq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xrealm/xrealm/bus"
)

// TestPresenceKeyWrittenAgain: a node whose presence key in a room was
// deleted by another node (which took it for dead while it was cut off
// from the bus, and swept its keys) writes it again, whether its watch of
// the room saw the deletion or ended and caught up after it (the delete
// marker purged meanwhile): the other node relays the room's frames to it
// again. The test fails if the key stays gone: the other node relays
// nothing to it, and its observer of the room receives none of the room's
// frames.
func TestPresenceKeyWrittenAgain(t *testing.T) {
	for _, watchEnds := range []bool{false, true} {
		t.Run(fmt.Sprintf("watch ends %v", watchEnds), func(t *testing.T) {
			bucket := fmt.Sprintf("ubiq-reannounce-%d", bucketSeq.Add(1))
			mod := func(c *Config) { c.Bucket = bucket }
			s1, s2 := startServer(t, nil, mod), startServer(t, nil, mod)
			entered, hold := make(chan string, 1), make(chan struct{})
			s1.s.beforeRewatch = func(room string) { entered <- room; <-hold }

			id := newUUID()
			o, m := dialPeer(t, s1.tcp), dialPeer(t, s2.tcp)
			o.request("SetObserved", SetObservedArgs{ClientID: o.clientID, Rooms: []string{id}})
			o.expect("Observed")
			m.join(JoinArgs{UUID: id})
			o.expect("PeerAdded")
			m.c.Send(NetworkId{A: 1, B: 2}, []byte("before"))
			if f := o.frame(); string(f.frame[HeaderSize:]) != "before" {
				t.Fatalf("o got %q", f.frame[HeaderSize:])
			}

			s1.s.mu.Lock()
			r := s1.s.rooms[id]
			s1.s.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			key := presenceKey(id, r.self)
			if watchEnds {
				r.do(func() { r.watcher.Stop() })
				select {
				case <-entered:
				case <-ctx.Done():
					t.Fatal("the room did not watch again after its watch ended")
				}
			}
			// Node 2 sweeps node 1's presence key, as it does a dead node's.
			if err := s2.s.kv.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			if watchEnds {
				eventually(t, "node 2 to see node 1's presence go", func() bool {
					s2.s.mu.Lock()
					r2 := s2.s.rooms[id]
					s2.s.mu.Unlock()
					return r2 != nil && r2.others.Load() == 0
				})
				if _, err := bus.PurgeOldDeleteMarkers(ctx, s2.s.store.js, s2.s.kv, 0); err != nil {
					t.Fatal(err)
				}
				close(hold)
			}
			eventually(t, "node 1's presence key written again", func() bool {
				_, err := s2.s.kv.Get(ctx, key)
				return err == nil
			})
			eventually(t, "node 2 to see node 1's presence again", func() bool {
				s2.s.mu.Lock()
				r2 := s2.s.rooms[id]
				s2.s.mu.Unlock()
				return r2 != nil && r2.others.Load() == 1
			})
			m.c.Send(NetworkId{A: 1, B: 2}, []byte("after"))
			if f := o.frame(); string(f.frame[HeaderSize:]) != "after" {
				t.Fatalf("o got %q", f.frame[HeaderSize:])
			}
		})
	}
}
