package benchsfu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/bots"
)

// TestConfigValidate checks that a campaign it could not run, with an
// unknown setup, scenario or estimator or an impossible count, is refused
// with the valid choices named, before anything is set up.
func TestConfigValidate(t *testing.T) {
	good := func() Config {
		return Config{Setups: []string{"central", "2sfu", "4sfu"}, Users: []int{8, 16}, Scenarios: []int{1, 2},
			PaperLinkRate: 1e9, CentralDelays: [4]time.Duration{10 * time.Millisecond}, DirectDelay: 5 * time.Millisecond,
			Queue: 200 * time.Millisecond, Warmup: 15 * time.Second, Measure: 20 * time.Second, Estimator: "gcc",
			RelaySlots: 64, RTCPInterval: 5 * time.Second, Clip: bots.ClipConfig{Points: 1000, Frames: 20, FPS: 2}}
	}
	tests := []struct {
		name   string
		change func(*Config)
		errHas string // "": valid
	}{
		{"the defaults", func(*Config) {}, ""},
		{"hera estimator, one setup, scenario 2", func(c *Config) { c.Estimator, c.Setups, c.Scenarios = "hera", []string{"4sfu"}, []int{2} }, ""},
		{"unknown setup", func(c *Config) { c.Setups = []string{"central", "foo"} }, `setup "foo" unknown; want some of central, 2sfu, 4sfu`},
		{"no setup", func(c *Config) { c.Setups = nil }, "no setup"},
		{"empty setup", func(c *Config) { c.Setups = []string{""} }, `setup "" unknown`},
		{"scenario 3", func(c *Config) { c.Scenarios = []int{3} }, "scenario 3 unknown; want some of 1"},
		{"scenario 0", func(c *Config) { c.Scenarios = []int{1, 0} }, "scenario 0 unknown"},
		{"no scenario", func(c *Config) { c.Scenarios = nil }, "no scenario"},
		{"no users", func(c *Config) { c.Users = nil }, "no user count"},
		{"zero users", func(c *Config) { c.Users = []int{8, 0} }, "user count 0"},
		{"unknown estimator", func(c *Config) { c.Estimator = "bbr" }, `estimator "bbr" unknown; want one of gcc, hera`},
		{"no link rate", func(c *Config) { c.PaperLinkRate = 0 }, "link rate"},
		{"no window", func(c *Config) { c.Measure = 0 }, "measurement window"},
		{"negative slots", func(c *Config) { c.RelaySlots = -1 }, "relay slots"},
		{"no RTCP interval", func(c *Config) { c.RTCPInterval = 0 }, "RTCP interval (--rtcp-interval) 0s"},
		// Each duration and clip setting is named alone, with its flag
		// (the four durations, and the clip's three numbers, were listed
		// together).
		{"negative warm-up", func(c *Config) { c.Warmup = -time.Second }, "warm-up (--warmup) -1s: want at least 0"},
		{"no queue", func(c *Config) { c.Queue = 0 }, "queue (--queue) 0s: want a duration above 0"},
		{"negative direct delay", func(c *Config) { c.DirectDelay = -time.Millisecond }, "direct delay (--direct-delay) -1ms"},
		{"two points", func(c *Config) { c.Clip.Points = 2 }, "clip of 2 points (--points): want at least 3"},
		{"no frames", func(c *Config) { c.Clip.Frames = 0 }, "clip of 0 frames (--frames)"},
		{"no fps", func(c *Config) { c.Clip.FPS = 0 }, "clip at 0 fps (--fps)"},
		{"negative delay", func(c *Config) { c.CentralDelays[2] = -time.Millisecond }, "central–site 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			err := c.Validate()
			switch {
			case tc.errHas == "" && err != nil:
				t.Fatal(err)
			case tc.errHas != "" && err == nil:
				t.Fatal("accepted")
			case tc.errHas != "" && !strings.Contains(err.Error(), tc.errHas):
				t.Fatalf("error %q does not say %q", err, tc.errHas)
			}
		})
	}
}

// TestMakeDirs checks that a --clip-dir or --out directory that does not
// exist yet is created.
func TestMakeDirs(t *testing.T) {
	root := t.TempDir()
	c := Config{ClipPath: filepath.Join(root, "clips", "new", "clip.gob"), Out: filepath.Join(root, "out", "results.jsonl")}
	if err := c.makeDirs(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"clips/new", "out"} {
		if st, err := os.Stat(filepath.Join(root, d)); err != nil || !st.IsDir() {
			t.Errorf("%s was not created: %v", d, err)
		}
	}
	if err := c.makeDirs(); err != nil {
		t.Fatalf("existing directories: %v", err)
	}
}
