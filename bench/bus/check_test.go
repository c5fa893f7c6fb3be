package benchbus

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// full is the full benchmark's configuration with both systems present.
func full() Config {
	c := Defaults()
	c.Mosquitto, c.Python = "/usr/sbin/mosquitto", "/venv/bin/python"
	return c
}

func TestConfigCheck(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		errHas string // "": accepted
	}{
		{"the defaults", func(*Config) {}, ""},
		{"variants and other builds", func(c *Config) {
			c.Systems = []string{"xrealm:--write-linger=2ms", "xrealm-insecure", "xrealm@/tmp/old/xrealm", "xrealm-insecure:--x"}
		}, ""},
		{"one experiment", func(c *Config) { c.Experiments = []string{"generator"} }, ""},
		{"unknown experiment", func(c *Config) { c.Experiments = []string{"ramp", "rampp"} }, `unknown experiment "rampp"; want some of ramp, efficiency`},
		{"no experiment", func(c *Config) { c.Experiments = nil }, "no experiment"},
		{"unknown system", func(c *Config) { c.Systems = []string{"nats"} }, `unknown system "nats"`},
		{"empty variant", func(c *Config) { c.Systems = []string{"xrealm:"} }, `unknown system "xrealm:"`},
		{"empty build", func(c *Config) { c.Systems = []string{"xrealm@"} }, `unknown system "xrealm@"`},
		{"mosquitto variant", func(c *Config) { c.Systems = []string{"mosquitto:-v"} }, `unknown system "mosquitto:-v"`},
		{"unknown behaviour", func(c *Config) { c.Behaviour = "flock" }, `unknown behaviour "flock"; want one of static, randomwalk, boids, replay`},
		{"replay", func(c *Config) { c.Behaviour, c.Trace = "replay", "walk.trace" }, ""},
		{"replay without a trace", func(c *Config) { c.Behaviour = "replay" }, "replay needs one"},
		{"a trace without replay", func(c *Config) { c.Trace = "walk.trace" }, "a trace goes with behaviour replay"},
		{"rate 0", func(c *Config) { c.Rate = 0 }, "rate 0"},
		{"rate NaN", func(c *Config) { c.Rate = math.NaN() }, "rate NaN"},
		{"no output", func(c *Config) { c.Out = "" }, "no output directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := full()
			tc.change(&c)
			err := c.Check()
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

// TestConfigPartial checks what makes a run fall short of the full
// benchmark, whose results it would replace.
func TestConfigPartial(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   []string // substrings, one per reason, in order; none: full
	}{
		{"the defaults", func(*Config) {}, nil},
		{"the documented command", func(c *Config) {
			c.Ramp, c.IsolationRamp, c.SecurityUsers, c.SecurityRepeat = seq(60, 30, 360), seq(100, 50, 2000), []int{120}, 8
		}, nil},
		{"longer windows", func(c *Config) { c.Step, c.Warmup = time.Minute, time.Minute }, nil},
		{"variants added", func(c *Config) { c.Systems = append(c.Systems, "xrealm:--write-linger=2ms") }, nil},
		{"two experiments", func(c *Config) { c.Experiments = []string{"ramp", "security"} },
			[]string{"without the experiments efficiency, isolation, interaction, generator"}},
		{"xrealm only", func(c *Config) { c.Systems = []string{"xrealm"} }, []string{"without the system mosquitto"}},
		{"no mosquitto installed", func(c *Config) { c.Mosquitto = "" }, []string{"without Mosquitto (not installed)"}},
		{"no arena-py", func(c *Config) { c.Python = "" }, []string{"arena-py"}},
		{"no arena-py, no interaction", func(c *Config) { c.Python, c.Experiments = "", []string{"ramp"} }, []string{"without the experiments"}},
		{"a short trial", func(c *Config) { c.Step, c.Drain, c.SecurityRepeat = 2*time.Second, 0, 1 },
			[]string{"--step 2s (the full run's: 10s)", "--drain 0s", "--security-repeat 1"}},
		{"another rate", func(c *Config) { c.Rate = 20 }, []string{"another workload (20 poses/s"}},
		{"a replayed trace", func(c *Config) { c.Behaviour, c.Trace = "replay", "walk.trace" }, []string{"another workload"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := full()
			tc.change(&c)
			got := c.Partial()
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d reasons like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("reason %q does not say %q", got[i], w)
				}
			}
		})
	}
	if d := Defaults(); !slices.Equal(d.Experiments, Experiments) {
		t.Errorf("the defaults' experiments %q are not all of %q", d.Experiments, Experiments)
	}
}
