package benchcc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// send connects to ln, writes b and closes.
func send(t *testing.T, ln net.Listener, b []byte) {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// waitOrFail fails the test if recv's goroutines do not end.
func waitOrFail(t *testing.T, recv *receivers) {
	t.Helper()
	done := make(chan struct{})
	go func() { recv.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the receivers' goroutines did not end")
	}
}

// TestReceiversCountEachFlowOnce: flows announce their index in their
// first byte; an index out of range or already taken is refused, so no
// two goroutines count into one flow's bins.
func TestReceiversCountEachFlowOnce(t *testing.T) {
	ln := listenLoopback(t)
	start := time.Now()
	recv := startReceivers(ln, 3, start, time.Hour, 2, start.Add(time.Hour))
	defer recv.close()
	for _, c := range []struct {
		id   byte
		body int
	}{{7, 100}, {2, 3000}, {0, 1000}, {2, 5}, {1, 2000}} {
		send(t, ln, append([]byte{c.id}, make([]byte, c.body)...))
	}
	waitOrFail(t, recv) // three flows accepted, each read to its end
	var got []int64
	for _, bins := range recv.counts {
		got = append(got, bins[0]+bins[1])
	}
	if want := []int64{1000, 2000, 3000}; !slices.Equal(got, want) {
		t.Fatalf("bytes per flow %v, want %v", got, want)
	}
}

// TestReceiversCloseEndsAnnouncingConnection: a connection accepted but
// silent (its index never comes, as when the link went down) used to keep
// the accept goroutine in its read with nothing to close it, and the
// goroutine could start a counter after the run had read the counts.
// close now ends it, and wait returns.
func TestReceiversCloseEndsAnnouncingConnection(t *testing.T) {
	ln := listenLoopback(t)
	start := time.Now()
	recv := startReceivers(ln, 2, start, time.Hour, 2, start.Add(time.Hour))
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for {
		recv.mu.Lock()
		n := len(recv.conns)
		recv.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	recv.close()
	waitOrFail(t, recv)
}

// TestRunRefusesTooManyFlows: the 256th flow's index byte wrapped to 0, so
// two flows counted into one (and --flows 300 failed with "i/o timeout").
func TestRunRefusesTooManyFlows(t *testing.T) {
	_, err := Run(t.Context(), Config{Flows: MaxFlows + 1, Algos: []string{"cubic"}, OutDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "256 flows: at most 255") {
		t.Fatalf("Run with %d flows: %v, want an error naming the limit", MaxFlows+1, err)
	}
}

// TestQoEReceiverEndsOnClose: the QoE receiver records a frame's arrival
// and ends when the stream is closed, though its peer never sends a FIN
// (as when the emulated link is gone).
func TestQoEReceiverEndsOnClose(t *testing.T) {
	ln := listenLoopback(t)
	q := &qoeStream{ln: ln, frame: 100, arrivals: map[uint32]time.Time{}}
	q.wg.Add(1)
	go func() { defer q.wg.Done(); q.receive() }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := make([]byte, 100)
	frame[3], frame[7] = 5, 100-qoeHdr // frame 5, 92 payload bytes
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	for {
		q.mu.Lock()
		_, ok := q.arrivals[5]
		q.mu.Unlock()
		if ok {
			break
		}
		time.Sleep(time.Millisecond)
	}
	q.close()
	done := make(chan struct{})
	go func() { q.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the QoE receiver did not end after close")
	}
}

// TestTCPInfoFileCompleteWhenStopped: the sampler's file is written out
// and closed by the time stop returns, so the last run's file is whole
// when the process exits right after it.
func TestTCPInfoFileCompleteWhenStopped(t *testing.T) {
	ln := listenLoopback(t)
	go func() {
		if c, err := ln.Accept(); err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	path := filepath.Join(t.TempDir(), "flow.tcpinfo")
	stop := startTCPInfo(c, path, time.Now(), slog.Default())
	time.Sleep(50 * time.Millisecond) // a few samples, most likely; none is fine too
	stop()
	// The header and samples sit in a buffer until the sampler flushes:
	// they are in the file only if stop waited for that.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "# t_s cwnd") || !strings.HasSuffix(string(b), "\n") {
		t.Fatalf("after stop the file holds %q, want the header and samples, ending in a newline", b)
	}
	for _, l := range lines[1:] {
		if len(strings.Fields(l)) != 9 {
			t.Fatalf("sample line %q does not have 9 fields", l)
		}
	}
}

// TestRunCreatesTCPInfoDir: a TCP_INFO directory that cannot be created
// stops Run before any run, naming it; it used to cost only a warning per
// run and the diagnostics.
func TestRunCreatesTCPInfoDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(file, "tcpinfo")
	_, err := Run(t.Context(), Config{Algos: []string{"cubic"}, OutDir: t.TempDir(), TCPInfoDir: bad})
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Run with TCPInfoDir %s: %v, want an error naming it", bad, err)
	}
}

// TestRunReadsEveryTraceFirst: a malformed trace after a good one stops
// Run before any run and before anything is loaded or written, naming the
// trace and the line; it stopped the bench only when its turn came, after
// the runs of the traces before it.
func TestRunReadsEveryTraceFirst(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	if err := os.WriteFile(good, []byte("1\n2\n3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("1\n2\nx3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	_, err := Run(t.Context(), Config{Algos: []string{"cubic"}, OutDir: out, Traces: []string{good, bad}, Seeds: []uint64{1}, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("Run with a malformed second trace: %v, want an error naming %s and its line", err, bad)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the output directory was made before the traces were checked: %v", err)
	}
}

// TestRunStopsWhenInterrupted interrupts a run of a minute over a real
// emulated link a moment after it started: Run returns the interruption
// well before the minute is up, with nothing recorded for the cut run,
// and leaves no namespace behind. The senders ignored the interruption,
// and Ctrl-C waited for the run's end.
func TestRunStopsWhenInterrupted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the emulated link needs root (network namespaces, TUN devices)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("skipping: no TUN support: %v", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: iproute2's ip command is not installed")
	}
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	var b strings.Builder
	for ms := 1; ms <= 1000; ms++ {
		fmt.Fprintf(&b, "%d\n", ms) // 12 Mbit/s
	}
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// Interrupt once the link is up (the emulator logs it).
	var progress string
	log := slog.New(&onMessage{msg: "netem: link up", do: func() { time.AfterFunc(time.Second, cancel) },
		seen: func(r slog.Record) {
			if r.Message == "benchcc: starting" {
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "run" {
						progress = a.Value.String()
					}
					return true
				})
			}
		}})
	out := filepath.Join(dir, "out")
	start := time.Now()
	rs, err := Run(ctx, Config{Algos: []string{"cubic"}, OutDir: out, Traces: []string{trace}, Seeds: []uint64{1},
		Duration: time.Minute, Delay: 5 * time.Millisecond, QueuePackets: 100, Logger: log})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want the interruption", err)
	}
	if took := time.Since(start); took > 40*time.Second { // a bound far from both ends, not a timing assertion
		t.Errorf("Run took %v after an interruption at about 1 s of a 1 min run", took)
	}
	if len(rs) != 0 {
		t.Errorf("the cut run was recorded: %+v", rs)
	}
	if progress != "1 of 1" {
		t.Errorf("the run's start logged progress %q, want \"1 of 1\"", progress)
	}
	if b, err := os.ReadFile(filepath.Join(out, "results.jsonl")); err != nil || len(b) != 0 {
		t.Errorf("results.jsonl: %q, %v; want it empty", b, err)
	}
	ns, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if mine := fmt.Sprintf("xrealm-netem-%d-", os.Getpid()); strings.Contains(string(ns), mine) {
		t.Errorf("namespaces left behind: %s", ns)
	}
}

// onMessage is a slog handler that calls do when msg is logged.
type onMessage struct {
	msg  string
	do   func()
	seen func(slog.Record) // every record, if set (called from Run's goroutine)
}

func (h *onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h *onMessage) Handle(_ context.Context, r slog.Record) error {
	if h.seen != nil {
		h.seen(r)
	}
	if r.Message == h.msg {
		h.do()
	}
	return nil
}
func (h *onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *onMessage) WithGroup(string) slog.Handler      { return h }
