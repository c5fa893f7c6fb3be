package cpuload

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseCPUMax: a cgroup v2 cpu.max is refused, or means no limit
// ("max"), or a positive, finite number of CPUs: the quota over the
// period (100000 µs when only a quota is given).
func FuzzParseCPUMax(f *testing.F) {
	for _, s := range []string{"max 100000\n", "max\n", "200000 100000\n", "50000\n", "0 100000", "100 0", "-1 100000", "1 2 3", "", "18446744073709551615 1", "1 18446744073709551615"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cpus, limited, err := parseCPUMax(b)
		if err != nil {
			if cpus != 0 || limited {
				t.Fatalf("parseCPUMax(%q) = %v, %v with error %v", b, cpus, limited, err)
			}
			return
		}
		fl := strings.Fields(string(b))
		if !limited {
			if cpus != 0 || len(fl) == 0 || fl[0] != "max" {
				t.Fatalf("parseCPUMax(%q) = %v, no limit", b, cpus)
			}
			return
		}
		if !(cpus > 0) || math.IsInf(cpus, 0) {
			t.Fatalf("parseCPUMax(%q) = %v CPUs", b, cpus)
		}
		q, _ := strconv.ParseUint(fl[0], 10, 64)
		p := uint64(100000)
		if len(fl) == 2 {
			p, _ = strconv.ParseUint(fl[1], 10, 64)
		}
		if want := float64(q) / float64(p); cpus != want {
			t.Fatalf("parseCPUMax(%q) = %v CPUs, want %v", b, cpus, want)
		}
	})
}

// FuzzReadUsage: a cpu.stat file gives the CPU time of its usage_usec line
// in seconds, or an error; never a negative time.
func FuzzReadUsage(f *testing.F) {
	for _, s := range []string{"usage_usec 123456\nuser_usec 1\n", "user_usec 5\nusage_usec 42", "usage_usec -1\n", "usage_usec\n", "usage_usec  7 \n", "", strings.Repeat("x", 70000) + "\nusage_usec 1\n"} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "cpu.stat")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := readUsage(path)
		if err != nil {
			if s != 0 {
				t.Fatalf("readUsage(%q) = %v with error %v", b, s, err)
			}
			return
		}
		if !(s >= 0) || math.IsInf(s, 0) {
			t.Fatalf("readUsage(%q) = %v s", b, s)
		}
		if !strings.Contains(string(b), "usage_usec ") {
			t.Fatalf("readUsage(%q) = %v without a usage_usec line", b, s)
		}
	})
}

// FuzzReadCFSQuota: a cgroup v1 quota and period give no limit (a
// negative quota), a positive finite number of CPUs, or an error.
func FuzzReadCFSQuota(f *testing.F) {
	for _, s := range [][2]string{{"-1\n", "100000\n"}, {"200000\n", "100000\n"}, {"0\n", "100000\n"}, {"100\n", "0\n"}, {"x", "1"}, {"9223372036854775807", "1"}} {
		f.Add(s[0], s[1])
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, quota, period string) {
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(quota), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(period), 0o600); err != nil {
			t.Fatal(err)
		}
		cpus, limited, err := readCFSQuota(dir)
		if err != nil || !limited {
			if cpus != 0 || (err != nil && limited) {
				t.Fatalf("readCFSQuota(%q, %q) = %v, %v, %v", quota, period, cpus, limited, err)
			}
			return
		}
		if !(cpus > 0) || math.IsInf(cpus, 0) {
			t.Fatalf("readCFSQuota(%q, %q) = %v CPUs", quota, period, cpus)
		}
	})
}
