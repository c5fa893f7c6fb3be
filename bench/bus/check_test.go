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
		// Nothing to measure: it wrote empty results and exited 0.
		{"only a Mosquitto not installed", func(c *Config) { c.Systems, c.Mosquitto = []string{"mosquitto"}, "" }, "--systems mosquitto: Mosquitto is not installed (apt-get install mosquitto"},
		{"no system", func(c *Config) { c.Systems = nil }, "no system to measure (--systems)"},
		{"no system, no experiment that needs one", func(c *Config) { c.Systems, c.Experiments = nil, []string{"security", "generator"} }, ""},
		{"Mosquitto not installed, xrealm too", func(c *Config) { c.Mosquitto = "" }, ""},
		// Counts and durations it cannot run with: each ran before, and was
		// recorded as if measured (a 0 s window failed only when the
		// results were written, at the end).
		{"a ramp step of 0 users", func(c *Config) { c.Ramp = []int{0, 30} }, "--ramp has a step of 0 users"},
		{"no ramp", func(c *Config) { c.Ramp = nil }, "--ramp is empty"},
		{"an isolation step of 0 users", func(c *Config) { c.IsolationRamp = []int{0} }, "--isolation-ramp has a step of 0 users"},
		{"0 scenes", func(c *Config) { c.IsolationScene = []int{1, 0} }, "--isolation-scenes has a step of 0 scenes"},
		{"0 security users", func(c *Config) { c.SecurityUsers = []int{0} }, "--security-users has a step of 0 users"},
		{"negative background", func(c *Config) { c.InteractionBG = []int{-1} }, "--interaction-bg has -1"},
		{"no background at all is 0", func(c *Config) { c.InteractionBG = []int{0} }, ""},
		{"size 0", func(c *Config) { c.Size = 0 }, "--size 0"},
		{"0 efficiency users", func(c *Config) { c.EfficiencyUsers = 0 }, "--efficiency-users 0"},
		{"0 efficiency repeats", func(c *Config) { c.EfficiencyRepeat = 0 }, "--efficiency-repeat 0"},
		{"0 security repeats", func(c *Config) { c.SecurityRepeat = 0 }, "--security-repeat 0"},
		{"0 generator users", func(c *Config) { c.GeneratorUsers = 0 }, "--generator-users 0"},
		{"0 clicks", func(c *Config) { c.Clicks = 0 }, "--clicks 0"},
		{"step 0", func(c *Config) { c.Step = 0 }, "--step 0s"},
		{"negative warm-up", func(c *Config) { c.Warmup = -time.Second }, "--warmup -1s"},
		{"no warm-up", func(c *Config) { c.Warmup = 0 }, ""},
		{"negative drain", func(c *Config) { c.Drain = -time.Second }, "--drain -1s"},
		{"max p99 0", func(c *Config) { c.MaxP99 = 0 }, "--max-p99 0s"},
		{"ratio above 1", func(c *Config) { c.MinRatio = 2 }, "--min-ratio 2"},
		{"ratio NaN", func(c *Config) { c.MinRatio = math.NaN() }, "--min-ratio NaN"},
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
		// A trial's loads replaced the committed results without the
		// warning.
		{"a short ramp", func(c *Config) { c.Ramp = []int{4, 8} }, []string{"--ramp without 60 (the full run's: 60,90,"}},
		{"a longer ramp", func(c *Config) { c.Ramp = seq(60, 30, 600) }, nil},
		{"fewer scenes", func(c *Config) { c.IsolationScene = []int{1, 2} }, []string{"--isolation-scenes without 5"}},
		{"a short isolation ramp", func(c *Config) { c.IsolationRamp = []int{4} }, []string{"--isolation-ramp without 100"}},
		{"other security loads", func(c *Config) { c.SecurityUsers = []int{4} }, []string{"--security-users without 120"}},
		{"no idle interaction", func(c *Config) { c.InteractionBG = []int{50, 100} }, []string{"--interaction-bg without 0"}},
		{"other target loads", func(c *Config) { c.EfficiencyUsers, c.GeneratorUsers = 4, 4 },
			[]string{"--efficiency-users 4 (the full run's: 120)", "--generator-users 4 (the full run's: 80)"}},
		{"other limits", func(c *Config) { c.MaxP99 = time.Hour }, []string{"other ramp limits (--max-p99 1h0m0s"}},
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
