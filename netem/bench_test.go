package netem

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"
)

// BenchmarkEmulatorTCP pushes one saturating TCP flow host→client through
// constant-rate links for 5 s per iteration and reports the delivered
// packet rate and the fraction of packets the emulator released more than
// LateThreshold late in each direction. Needs root; run it as
//
//	go test -run '^$' -bench EmulatorTCP -benchtime 1x ./netem/
func BenchmarkEmulatorTCP(b *testing.B) {
	if testing.Short() {
		b.Skip("skipping: 5 s flows")
	}
	for _, perMs := range []int{8, 50} { // 96 and 600 Mbit/s
		b.Run(fmt.Sprintf("%dMbps", perMs*12), func(b *testing.B) {
			requireRoot(b)
			for range b.N {
				rep, dur := runBulk(b, perMs, 5*time.Second)
				d := rep.Down
				b.ReportMetric(float64(d.Delivered)/dur.Seconds(), "datapkts/s")
				b.ReportMetric(float64(rep.Up.Delivered)/dur.Seconds(), "ackpkts/s")
				b.ReportMetric(float64(d.DeliveredBytes)*8/dur.Seconds()/1e6, "Mbit/s")
				b.ReportMetric(100*float64(d.Late)/float64(max(d.Delivered, 1)), "%late-data")
				b.ReportMetric(100*float64(rep.Up.Late)/float64(max(rep.Up.Delivered, 1)), "%late-ack")
				b.ReportMetric(float64(d.MaxLate.Microseconds())/1000, "maxlate-ms")
				b.ReportMetric(float64(d.KernelDrops+rep.Up.KernelDrops), "kerneldrops")
				b.ReportMetric(float64(d.Reads+d.Writes+rep.Up.Reads+rep.Up.Writes)/dur.Seconds(), "tunsyscalls/s")
			}
		})
	}
}

// runBulk runs a bulk TCP flow from the host namespace to the client for d
// over constant links of perMs opportunities per millisecond, 10 ms delay.
func runBulk(tb testing.TB, perMs int, d time.Duration) (Report, time.Duration) {
	tb.Helper()
	e, err := Start(context.Background(), Config{Up: constantTrace(tb, perMs), Down: constantTrace(tb, perMs), Delay: 10 * time.Millisecond, QueuePackets: 1000})
	if err != nil {
		tb.Fatal(err)
	}
	defer e.Close()
	var ln net.Listener
	if err := InNamespace(e.ClientNS, func() (err error) { ln, err = net.Listen("tcp", ClientAddr+":5002"); return err }); err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<16)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}()
	var c net.Conn
	if err := InNamespace(e.HostNS, func() (err error) { c, err = net.Dial("tcp", ClientAddr+":5002"); return err }); err != nil {
		tb.Fatal(err)
	}
	t0 := time.Now()
	stop := t0.Add(d)
	buf := make([]byte, 1<<16)
	c.SetWriteDeadline(stop)
	for time.Now().Before(stop) {
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	c.Close()
	if err := e.Close(); err != nil {
		tb.Fatal(err)
	}
	return e.Report(), time.Since(t0)
}
