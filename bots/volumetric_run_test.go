package bots

import (
	"bytes"
	"context"
	"runtime/pprof"
	"testing"
	"time"
)

// runningGoroutines counts the goroutines whose stack holds fn.
func runningGoroutines(fn string) int {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for _, g := range bytes.Split(b.Bytes(), []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) {
			n++
		}
	}
	return n
}

// Run's helpers (the frame reports and the pose resends) end when Run
// returns, also when it fails: they ran on until the caller's context
// ended, a bench's whole run, reporting for a bot that sent nothing more.
func TestVolumetricRunErrorStopsHelpers(t *testing.T) {
	// The bot's context outlasts the test: only Run's return may end
	// its helpers.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, clip := volumetricNode(t, ctx)
	// An MTU with no room after the header: every frame fails to
	// packetize, and Run returns its error at the first.
	b, err := DialVolumetric(ctx, VolumetricConfig{NC: conn("p"), Session: "v", Client: "p", ID: 5, Site: "a", ICEAddresses: loopback, Clip: clip, Publish: []int{0}, MTU: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Run(ctx); err == nil {
		t.Fatal("Run with an MTU of 5 bytes returned no error")
	}
	giveUp := time.Now().Add(20 * time.Second)
	for _, fn := range []string{"bots.(*VolumetricBot).report", "bots.(*VolumetricBot).keepPose"} {
		for runningGoroutines(fn) > 0 {
			if time.Now().After(giveUp) {
				t.Fatalf("%s still running after Run returned", fn)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
