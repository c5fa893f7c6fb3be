package netem

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// seqpacketPair returns a connected pair of non-blocking SOCK_SEQPACKET
// sockets, which keep message boundaries as a TUN device does.
func seqpacketPair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// smallPacket is a read as the TUN device gives it: a virtio header with no
// offload and an IP packet of n bytes (not parsed beyond the header).
func smallPacket(i, n int) []byte {
	b := make([]byte, vnetHdrLen+n)
	ip := b[vnetHdrLen:]
	ip[0] = 0x45
	ip[9] = 17 // UDP: never segmented
	for j := 20; j < n; j++ {
		ip[j] = byte(i + j)
	}
	return b
}

// TestPumpSmallPacketsDoNotHoldReadBuffers queues many small packets behind
// a link that serves nothing for a while (as a slow trace with an unbounded
// or byte-limited queue does) and checks how much memory the queue holds,
// then that every packet leaves unchanged. Each queued packet used to keep
// its 64 KB read buffer: 2000 packets of 100 bytes held 131 MB.
func TestPumpSmallPacketsDoNotHoldReadBuffers(t *testing.T) {
	tr, err := ParseTrace("late", strings.NewReader("1000\n1000\n1000\n1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLink(LinkConfig{Trace: tr})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := seqpacketPair(t)
	outR, outW := seqpacketPair(t)
	p := &pump{name: "test", in: inR, out: outW, link: l, start: time.Now(), stop: new(atomic.Bool), log: slog.Default()}
	emit := func(pk *Packet, at uint64) { p.pending = append(p.pending, departure{pk, at}) }

	const n, size = 2000, 100
	var sent [][]byte
	for i := 0; i < n; {
		// The socket buffer holds a few hundred messages; read in batches.
		for k := 0; k < 100 && i < n; k, i = k+1, i+1 {
			b := smallPacket(i, size)
			if _, err := unix.Write(inW, b); err != nil {
				t.Fatalf("write packet %d: %v", i, err)
			}
			sent = append(sent, b)
		}
		if !p.readAll(emit) {
			t.Fatal("readAll failed")
		}
	}
	if got := l.QueueLen(); got != n {
		t.Fatalf("%d packets queued, want %d (the trace serves none before 1 s)", got, n)
	}
	held := map[*superPacket]bool{}
	var bytesHeld int
	for _, pk := range l.q[l.qh:] {
		if !held[pk.sp] {
			held[pk.sp] = true
			bytesHeld += cap(pk.sp.buf)
		}
	}
	if limit := n * smallBufSize; bytesHeld > limit {
		t.Fatalf("%d queued packets of %d bytes hold %d bytes of buffers, want at most %d", n, size, bytesHeld, limit)
	}

	// Serve everything (4 opportunities of 15 packets each a second, from
	// 1 s on) and check that every packet comes out unchanged, in order.
	buf := make([]byte, readBufSize)
	got := 0
	for now := uint64(0); l.QueueLen() > 0 || len(p.pending) > 0; now += 1000 {
		l.Advance(now, emit)
		p.release(now)
		for {
			m, err := unix.Read(outR, buf)
			if err == unix.EAGAIN {
				break
			}
			if err != nil {
				t.Fatalf("read packet %d: %v", got, err)
			}
			if got >= n || !bytes.Equal(buf[:m], sent[got]) {
				t.Fatalf("packet %d came out as %d bytes %x", got, m, buf[:min(m, 32)])
			}
			got++
		}
		if now > 60_000_000 {
			t.Fatalf("queue not drained: %d queued, %d pending", l.QueueLen(), len(p.pending))
		}
	}
	if got != n {
		t.Fatalf("%d of %d packets came out", got, n)
	}
	if got := len(p.freeSmall); got > maxFreeSmall {
		t.Fatalf("%d free small buffers kept, want at most %d", got, maxFreeSmall)
	}
}
