package tmpfiles

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRemoveStale makes temporary names for a process that has ended, for
// this one and without a pid, and checks that the next MkdirTemp and
// CreateTemp remove only the first, and name theirs with this pid.
func TestRemoveStale(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(cmd.Process.Pid)
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		prefix string
		make   func(string) (string, error)
	}{
		{"xrsfu-bus-", MkdirTemp},
		{"xrsfu-xrealm-", func(p string) (string, error) {
			f, err := CreateTemp(p)
			if err != nil {
				return "", err
			}
			f.Close()
			return f.Name(), nil
		}},
	} {
		deadDir := filepath.Join(tmp, tc.prefix+"pid"+dead+"-123")
		deadFile := filepath.Join(tmp, tc.prefix+"pid"+dead+"-456")
		mine := filepath.Join(tmp, tc.prefix+"pid"+self+"-789")
		old := filepath.Join(tmp, tc.prefix+"123456") // os.MkdirTemp's name: no pid
		other := filepath.Join(tmp, "other-pid"+dead+"-1")
		for _, d := range []string{deadDir, mine, old, other} {
			if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(deadFile, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		made, err := tc.make(tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(filepath.Base(made), tc.prefix+"pid"+self+"-") {
			t.Errorf("made %s, want it named %spid%s-...", made, tc.prefix, self)
		}
		for _, p := range []string{deadDir, deadFile} {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("%s of ended process %s is still there (%v)", p, dead, err)
			}
		}
		for _, p := range []string{mine, old, other, made} {
			if _, err := os.Lstat(p); err != nil {
				t.Errorf("%s was removed: %v", p, err)
			}
		}
	}
	if got := RemoveStale("xrsfu-bus-"); !slices.Equal(got, []string(nil)) {
		t.Errorf("RemoveStale again removed %q", got)
	}
}
