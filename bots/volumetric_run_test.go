package bots

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/volumetric"
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
	// A byte of payload per fragment and a frame of more bytes than a
	// frame has fragments (65535): the first frame fails to packetize,
	// and Run returns its error.
	clip.Frames[0][0] = make([]byte, 70000)
	b, err := DialVolumetric(ctx, VolumetricConfig{NC: conn("p"), Session: "v", Client: "p", ID: 5, Site: "a", ICEAddresses: loopback, Clip: clip, Publish: []int{0}, MTU: volumetric.HeaderSize + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Run(ctx); err == nil {
		t.Fatal("Run with a frame of 70000 fragments returned no error")
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

// An MTU with no room for payload after the fragment header is refused at
// dial, naming it, rather than a bot that joins and then fails every
// frame in Run.
func TestDialVolumetricRefusesSmallMTU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, clip := volumetricNode(t, ctx)
	for _, mtu := range []int{-1, 5, volumetric.HeaderSize} {
		b, err := DialVolumetric(ctx, VolumetricConfig{NC: conn("p"), Session: "v", Client: "p", ID: 5, Site: "a", ICEAddresses: loopback, Clip: clip, Publish: []int{0}, MTU: mtu})
		if err == nil {
			b.Close()
			t.Errorf("MTU %d: dialled", mtu)
			continue
		}
		if want := fmt.Sprintf("MTU %d", mtu); !strings.Contains(err.Error(), want) {
			t.Errorf("MTU %d: error %q does not name it (%q)", mtu, err, want)
		}
	}
}
