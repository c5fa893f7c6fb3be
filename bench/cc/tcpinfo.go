package benchcc

import (
	"bufio"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startTCPInfo samples c's TCP_INFO into path (sampleTCPInfo) until the
// returned function is called; that function returns once the file is
// written out and closed, so a run's file is complete when the run
// returns (flushed after it, the last run's file would lose its tail when
// the process exits).
func startTCPInfo(c net.Conn, path string, start time.Time, log *slog.Logger) (stop func()) {
	stopc, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		sampleTCPInfo(c, path, start, stopc, log)
	}()
	return func() {
		close(stopc)
		<-done
	}
}

// sampleTCPInfo writes c's TCP_INFO to path every 10 ms until stop is
// closed (see Config.TCPInfoDir). It is a diagnostic: errors are logged,
// not returned.
func sampleTCPInfo(c net.Conn, path string, start time.Time, stop <-chan struct{}, log *slog.Logger) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		log.Warn("benchcc: tcpinfo", "err", err)
		return
	}
	w := bufio.NewWriter(f)
	defer func() {
		err := w.Flush()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			log.Warn("benchcc: tcpinfo", "file", path, "err", err)
		}
	}()
	fmt.Fprintln(w, "# t_s cwnd srtt_us min_rtt_us pacing_mbps delivery_mbps unacked retrans ca_state")
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var ti *unix.TCPInfo
		var gerr error
		if err := raw.Control(func(fd uintptr) { ti, gerr = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO) }); err != nil || gerr != nil {
			return
		}
		pacing := float64(ti.Pacing_rate) * 8 / 1e6
		if ti.Pacing_rate == math.MaxUint64 {
			pacing = math.Inf(1) // the kernel's "not paced" (~0UL), not 1.5e14 Mbit/s
		}
		fmt.Fprintf(w, "%.3f %d %d %d %.1f %.1f %d %d %d\n", time.Since(start).Seconds(), ti.Snd_cwnd, ti.Rtt, ti.Min_rtt,
			pacing, float64(ti.Delivery_rate)*8/1e6, ti.Unacked, ti.Total_retrans, ti.Ca_state)
	}
}
