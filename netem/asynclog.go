package netem

import (
	"io"
	"sync"
)

// asyncWriter moves log writes off a forwarding thread: Write copies into a
// chunk and hands full chunks to a goroutine that writes them out, so that
// a slow file system (dirty-page throttling) never stalls packet timing.
type asyncWriter struct {
	w     io.Writer
	cur   []byte
	full  chan []byte
	free  chan []byte
	done  chan struct{}
	once  sync.Once
	errMu sync.Mutex
	err   error
}

const asyncChunk = 1 << 20

func newAsyncWriter(w io.Writer) *asyncWriter {
	a := &asyncWriter{w: w, full: make(chan []byte, 64), free: make(chan []byte, 64), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for b := range a.full {
			if _, err := a.w.Write(b); err != nil {
				a.errMu.Lock()
				if a.err == nil {
					a.err = err
				}
				a.errMu.Unlock()
			}
			select {
			case a.free <- b[:0]:
			default:
			}
		}
	}()
	return a
}

// Write never fails; a write error is reported by Close.
func (a *asyncWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if a.cur == nil {
			select {
			case a.cur = <-a.free:
			default:
				a.cur = make([]byte, 0, asyncChunk)
			}
		}
		k := copy(a.cur[len(a.cur):cap(a.cur)], p)
		a.cur = a.cur[:len(a.cur)+k]
		p = p[k:]
		if len(a.cur) == cap(a.cur) {
			a.full <- a.cur
			a.cur = nil
		}
	}
	return n, nil
}

// Close writes what is buffered, waits for the writer goroutine and returns
// the first write error. Call it once the producer has stopped.
func (a *asyncWriter) Close() error {
	a.once.Do(func() {
		if len(a.cur) > 0 {
			a.full <- a.cur
			a.cur = nil
		}
		close(a.full)
		<-a.done
	})
	a.errMu.Lock()
	defer a.errMu.Unlock()
	return a.err
}
