package benchbus_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	benchbus "github.com/xrealm/xrealm/bench/bus"
)

// TestProfileRefuses: settings --profile cannot run with are refused
// naming the flag, and the profile file is checked before the server
// starts. --profile-users 0 wrote a profile of an idle server and exited
// 0 (the generator refused to start); an unwritable file failed only after
// the warm-up.
func TestProfileRefuses(t *testing.T) {
	dir := t.TempDir()
	good := func() benchbus.ProfileConfig {
		return benchbus.ProfileConfig{BotsCmd: []string{"xrealm"}, Users: 120, Scenes: 1, Rate: 10, Size: 310, Duration: 20 * time.Second, Out: filepath.Join(dir, "p.out")}
	}
	tests := []struct {
		change func(*benchbus.ProfileConfig)
		want   string
	}{
		{func(c *benchbus.ProfileConfig) { c.Users = 0 }, "--profile-users 0"},
		{func(c *benchbus.ProfileConfig) { c.Scenes = 0 }, "--profile-scenes 0"},
		{func(c *benchbus.ProfileConfig) { c.Duration = 0 }, "--profile-duration 0s"},
		{func(c *benchbus.ProfileConfig) { c.Size = -1 }, "--size -1"},
		{func(c *benchbus.ProfileConfig) { c.Rate = 0 }, "rate 0"},
		{func(c *benchbus.ProfileConfig) { c.Out = filepath.Join(dir, "nodir", "p.out") }, "--profile: open " + filepath.Join(dir, "nodir", "p.out")},
	}
	for _, tc := range tests {
		c := good()
		tc.change(&c)
		err := benchbus.Profile(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Profile(%+v): %v, want an error saying %q", c, err, tc.want)
		}
	}
}

// TestProfileGeneratorEnds: a generator that ends before the profile does
// is an error, not a profile of a server with less load than asked.
func TestProfileGeneratorEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	f, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false:", err)
	}
	err = benchbus.Profile(context.Background(), benchbus.ProfileConfig{BotsCmd: []string{f}, Users: 2, Scenes: 1, Rate: 10, Size: 310,
		Duration: time.Second, Insecure: true, Out: filepath.Join(t.TempDir(), "p.out")})
	if err == nil || !strings.Contains(err.Error(), "the generator (xrealm bots) ended before the profile did") {
		t.Fatalf("Profile with a generator that exits at once: %v", err)
	}
}

// TestProfile profiles a real server under two bots (the test binary as
// xrealm bots) and checks the profile is written.
func TestProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(childEnv, "1")
	out := filepath.Join(t.TempDir(), "p.out")
	if err := benchbus.Profile(context.Background(), benchbus.ProfileConfig{BotsCmd: []string{self}, Users: 2, Scenes: 1, Rate: 10, Size: 310,
		Duration: time.Second, Out: out}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(out); err != nil || st.Size() == 0 {
		t.Errorf("profile %s not written: %v", out, err)
	}
}
