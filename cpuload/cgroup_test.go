package cpuload

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseCPUMax(t *testing.T) {
	for _, tc := range []struct {
		in      string
		cpus    float64
		limited bool
		err     string
	}{
		{in: "max 100000\n"},
		{in: "max"},
		{in: "200000 100000\n", cpus: 2, limited: true},
		{in: "50000 100000", cpus: 0.5, limited: true},
		{in: "150000", cpus: 1.5, limited: true},
		{in: "", err: "want a quota and a period"},
		{in: "1 2 3", err: "want a quota and a period"},
		{in: "-5 100000", err: "quota"},
		{in: "0 100000", err: "quota"},
		{in: "100000 0", err: "period"},
		{in: "100000 x", err: "period"},
	} {
		cpus, limited, err := parseCPUMax([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseCPUMax(%q): error %v, want one saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || cpus != tc.cpus || limited != tc.limited {
			t.Errorf("parseCPUMax(%q) = %v, %v, %v; want %v, %v", tc.in, cpus, limited, err, tc.cpus, tc.limited)
		}
	}
}

// cgroupTree makes a fake cgroup v2 mount: files maps paths under it to
// their contents.
func cgroupTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		p = filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFindQuota(t *testing.T) {
	stat := "usage_usec 5000000\nuser_usec 4000000\nsystem_usec 1000000\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		self  string
		cpus  float64 // 0: no quota
		stat  string  // the file that counts the limited cgroup's CPU time, under the root
		err   string
	}{
		{name: "container", self: "0::/\n", cpus: 2, stat: "cpu.stat",
			files: map[string]string{"cpu.max": "200000 100000\n", "cpu.stat": stat}},
		{name: "no limit", self: "0::/\n",
			files: map[string]string{"cpu.max": "max 100000\n", "cpu.stat": stat}},
		{name: "cgroup v1 only", self: "4:memory:/x\n1:cpu:/\n",
			files: map[string]string{"cpu.max": "200000 100000\n", "cpu.stat": stat}},
		{name: "no cpu controller", self: "0::/a\n", files: map[string]string{"a/cgroup.procs": ""}},
		{name: "the smallest limit above", self: "0::/slice/svc\n", cpus: 0.5, stat: "slice/cpu.stat",
			files: map[string]string{
				"cpu.max": "400000 100000", "cpu.stat": stat,
				"slice/cpu.max": "50000 100000", "slice/cpu.stat": stat,
				"slice/svc/cpu.max": "max 100000", "slice/svc/cpu.stat": stat,
			}},
		{name: "v1, cpu and cpuacct mounted apart", self: "4:memory:/x\n3:cpuacct:/svc\n2:cpu:/svc\n0::/\n", cpus: 1.5, stat: "cpuacct/svc/cpuacct.usage",
			files: map[string]string{
				"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n",
				"cpu/svc/cpu.cfs_quota_us": "150000\n", "cpu/svc/cpu.cfs_period_us": "100000\n",
				"cpuacct/svc/cpuacct.usage": "123456789\n",
			}},
		{name: "v1 in a container: the host's path, the container's cgroup at the mount", self: "3:cpu,cpuacct:/docker/abc\n", cpus: 0.5, stat: "cpu,cpuacct/cpuacct.usage",
			files: map[string]string{
				"cpu,cpuacct/cpu.cfs_quota_us": "50000", "cpu,cpuacct/cpu.cfs_period_us": "100000",
				"cpu,cpuacct/cpuacct.usage": "1",
			}},
		{name: "v1 without a limit", self: "3:cpu,cpuacct:/\n",
			files: map[string]string{
				"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000",
				"cpu,cpuacct/cpuacct.usage": "1",
			}},
		{name: "v1 malformed quota", self: "3:cpu,cpuacct:/\n", err: "cfs_quota_us",
			files: map[string]string{"cpu,cpuacct/cpu.cfs_quota_us": "lots", "cpu,cpuacct/cpu.cfs_period_us": "100000"}},
		{name: "v1 zero period", self: "3:cpu,cpuacct:/\n", err: "not a positive limit",
			files: map[string]string{"cpu,cpuacct/cpu.cfs_quota_us": "5", "cpu,cpuacct/cpu.cfs_period_us": "0"}},
		{name: "v1 usage not a number", self: "3:cpu,cpuacct:/\n", err: "nanoseconds",
			files: map[string]string{"cpu,cpuacct/cpu.cfs_quota_us": "5", "cpu,cpuacct/cpu.cfs_period_us": "10", "cpu,cpuacct/cpuacct.usage": "x"}},
		{name: "malformed cpu.max", self: "0::/\n", err: "cpu.max",
			files: map[string]string{"cpu.max": "lots\tof fields here\n"}},
		{name: "no usage", self: "0::/\n", err: "no usage_usec",
			files: map[string]string{"cpu.max": "100000 100000", "cpu.stat": "user_usec 1\n"}},
		{name: "usage not a number", self: "0::/\n", err: "usage_usec",
			files: map[string]string{"cpu.max": "100000 100000", "cpu.stat": "usage_usec lots\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := cgroupTree(t, tc.files)
			q, err := findQuota(root, []byte(tc.self))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.cpus == 0 {
				if q != nil {
					t.Fatalf("quota %+v, want none", q)
				}
				return
			}
			if q == nil || q.cpus != tc.cpus || q.usage != filepath.Join(root, filepath.FromSlash(tc.stat)) {
				t.Fatalf("quota %+v, want %v CPUs counted in %s", q, tc.cpus, tc.stat)
			}
		})
	}
}

// Under a limit of two CPUs, a cgroup that uses them both is busy while
// the machine is mostly idle; when the machine is the busier, its share
// counts.
func TestGaugeBusyUnderQuota(t *testing.T) {
	dir := t.TempDir()
	statFile, cgStat := filepath.Join(dir, "stat"), filepath.Join(dir, "cpu.stat")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Unix(1000, 0)
	g := &Gauge{path: statFile, quota: &quota{cpus: 2, usage: cgStat, read: readUsage}, now: func() time.Time { return now }}
	if g.Limit() != 2 {
		t.Fatalf("Limit() = %v, want 2", g.Limit())
	}
	write(statFile, "cpu 1000 0 0 9000 0 0 0 0\n")
	write(cgStat, "usage_usec 0\n")
	if _, ok := g.Busy(); ok {
		t.Fatal("first reading: ok")
	}
	for _, step := range []struct {
		name       string
		hostBusy   float64 // ticks of the 32-CPU host's 3200 in the second
		cgroupUsec float64 // µs the cgroup used in the second
		want       float64
	}{
		{name: "cgroup at its limit, host idle", hostBusy: 200, cgroupUsec: 2e6, want: 1},
		{name: "cgroup at half its limit", hostBusy: 100, cgroupUsec: 1e6, want: 0.5},
		{name: "host busier than the cgroup", hostBusy: 2400, cgroupUsec: 0.2e6, want: 0.75},
	} {
		h, _ := readFile(statFile)
		busyTicks := h.Busy*ticksPerSecond + step.hostBusy
		idleTicks := h.Idle*ticksPerSecond + 3200 - step.hostBusy
		write(statFile, "cpu "+ftoa(busyTicks)+" 0 0 "+ftoa(idleTicks)+" 0 0 0 0\n")
		u, _ := readUsage(cgStat)
		write(cgStat, "usage_usec "+ftoa(u*1e6+step.cgroupUsec)+"\n")
		now = now.Add(time.Second)
		got, ok := g.Busy()
		if !ok || math.Abs(got-step.want) > 1e-9 {
			t.Errorf("%s: Busy() = %v, %v; want %v", step.name, got, ok, step.want)
		}
	}
	// A cgroup counter that cannot be read makes the reading not ok.
	write(cgStat, "nothing\n")
	if _, ok := g.Busy(); ok {
		t.Error("unreadable cpu.stat: ok")
	}
}

// ftoa formats a whole number of ticks or µs.
func ftoa(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// TestQuotaOfARealCgroup makes a cgroup v1 with a limit of half a CPU (it
// needs root and the v1 cpu and cpuacct hierarchies, as on the project's
// CI machine; elsewhere it is skipped), runs a busy loop in it, and reads
// the limit and the loop's CPU time through findQuota, as Machine would
// for a process in that cgroup.
func TestQuotaOfARealCgroup(t *testing.T) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip("no /proc/self/cgroup")
	}
	var cpuCtl, acctCtl string
	for _, line := range strings.Split(string(self), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 {
			for _, c := range strings.Split(f[1], ",") {
				switch c {
				case "cpu":
					cpuCtl = f[1]
				case "cpuacct":
					acctCtl = f[1]
				}
			}
		}
	}
	if cpuCtl == "" || acctCtl == "" {
		t.Skip("no cgroup v1 cpu and cpuacct hierarchies")
	}
	name := fmt.Sprintf("xrealm-cpuload-test-%d", os.Getpid())
	ctls := []string{cpuCtl}
	if acctCtl != cpuCtl {
		ctls = append(ctls, acctCtl)
	}
	var dirs []string
	t.Cleanup(func() { // after the loop's end below: a cgroup with a process stays
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	for _, ctl := range ctls {
		d := filepath.Join(cgroupRoot, ctl, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Skipf("cannot make a cgroup (not root?): %v", err)
		}
		dirs = append(dirs, d)
	}
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		busy.Process.Kill()
		busy.Wait()
	})
	cpuDir := filepath.Join(cgroupRoot, cpuCtl, name)
	for file, v := range map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"} {
		if err := os.WriteFile(filepath.Join(cpuDir, file), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(busy.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	q, err := findQuota(cgroupRoot, []byte(fmt.Sprintf("3:%s:/%s\n2:%s:/%s\n", cpuCtl, name, acctCtl, name)))
	if err != nil || q == nil || q.cpus != 0.5 {
		t.Fatalf("findQuota: %+v, %v; want half a CPU", q, err)
	}
	g := &Gauge{path: statPath, quota: q, now: time.Now}
	g.Busy()
	u0, _ := q.Usage()
	t0 := time.Now()
	time.Sleep(time.Second)
	b, ok := g.Busy()
	u1, err := q.Usage()
	if err != nil {
		t.Fatal(err)
	}
	// The kernel holds the loop to half a CPU; it gets less on a machine
	// busy with other tests (at a load of 12 on two cores, less than a
	// quarter), so only the limit is checked, and that the usage counts.
	if used := (u1 - u0) / time.Since(t0).Seconds(); used <= 0 || used > 0.65 {
		t.Errorf("the loop used %.2f CPUs under a limit of 0.5", used)
	}
	if !ok || b < 0.5 {
		t.Errorf("Busy() = %.2f, %v; want at least 0.5 with the cgroup at its limit", b, ok)
	}
	t.Logf("the loop used %.2f CPUs; Busy() = %.2f", (u1-u0)/time.Since(t0).Seconds(), b)
}
