package ubiq

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// TestServeDuringShutdown: connections handed to the server while it shuts
// down are closed, never served past it: serve counted them in the wait
// group that Shutdown waits on without the lock that Shutdown's closing
// takes, so a connection could be added while Shutdown already waited (a
// WaitGroup misuse, which panics or is a race).
func TestServeDuringShutdown(t *testing.T) {
	for range 10 {
		ts := startServer(t, nil, nil)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var mu sync.Mutex
		var peers []net.Conn
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					a, b := net.Pipe()
					mu.Lock()
					peers = append(peers, b)
					mu.Unlock()
					ts.s.ServeConn(a)
				}
			}()
		}
		time.Sleep(time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := ts.s.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		cancel()
		close(stop)
		wg.Wait()
		// Every connection, served or refused, is closed.
		mu.Lock()
		for _, b := range peers {
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := b.Read(make([]byte, 1)); err == nil || isTimeout(err) {
				t.Fatalf("a connection handed to the server was not closed: %v", err)
			}
		}
		mu.Unlock()
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
