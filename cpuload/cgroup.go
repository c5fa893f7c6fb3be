package cpuload

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupRoot is where cgroup v2 is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// quota is a CPU limit of the cgroup (v2) the process runs in: a
// container's --cpus, a Kubernetes CPU limit, a systemd CPUQuota. The
// machine may be idle while the process's cgroup uses all it may.
type quota struct {
	cpus float64 // the limit, in CPUs: quota / period
	stat string  // cpu.stat of the limited cgroup, whose usage_usec counts against it
}

// findQuota returns the smallest CPU limit on the way from the process's
// cgroup (v2, from selfCgroup, the contents of /proc/self/cgroup) up to
// root, or nil when there is none: no cgroup v2, no cpu controller, or
// "max" all the way up.
func findQuota(root string, selfCgroup []byte) (*quota, error) {
	var dir string
	found := false
	for _, line := range bytes.Split(selfCgroup, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			dir, found = path.Clean("/"+string(rest)), true
		}
	}
	if !found {
		return nil, nil // cgroup v1 only
	}
	var best *quota
	for {
		p := filepath.Join(root, filepath.FromSlash(dir))
		b, err := os.ReadFile(filepath.Join(p, "cpu.max"))
		if err == nil {
			cpus, limited, err := parseCPUMax(b)
			if err != nil {
				return nil, fmt.Errorf("cpu load: %s: %w", filepath.Join(p, "cpu.max"), err)
			}
			if limited && (best == nil || cpus < best.cpus) {
				best = &quota{cpus: cpus, stat: filepath.Join(p, "cpu.stat")}
			}
		}
		if dir == "/" {
			break
		}
		dir = path.Dir(dir)
	}
	if best != nil {
		if _, err := readUsage(best.stat); err != nil {
			return nil, err
		}
	}
	return best, nil
}

// parseCPUMax parses a cgroup's cpu.max: "max 100000" (no limit) or
// "200000 100000" (200 ms of CPU time per 100 ms: two CPUs).
func parseCPUMax(b []byte) (cpus float64, limited bool, err error) {
	f := strings.Fields(string(b))
	if len(f) < 1 || len(f) > 2 {
		return 0, false, fmt.Errorf("cpu.max %q: want a quota and a period", b)
	}
	if f[0] == "max" {
		return 0, false, nil
	}
	q, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil || q == 0 {
		return 0, false, fmt.Errorf("cpu.max %q: quota is not a positive number of µs", b)
	}
	period := uint64(100000) // the kernel's default when only a quota is given
	if len(f) == 2 {
		if period, err = strconv.ParseUint(f[1], 10, 64); err != nil || period == 0 {
			return 0, false, fmt.Errorf("cpu.max %q: period is not a positive number of µs", b)
		}
	}
	return float64(q) / float64(period), true, nil
}

// readUsage returns the CPU time a cgroup has used, in seconds, from the
// usage_usec line of its cpu.stat.
func readUsage(statFile string) (float64, error) {
	b, err := os.ReadFile(statFile)
	if err != nil {
		return 0, fmt.Errorf("cpu load: %w", err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "usage_usec "); ok {
			us, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpu load: %s: usage_usec %q: %w", statFile, v, err)
			}
			return float64(us) / 1e6, nil
		}
	}
	return 0, fmt.Errorf("cpu load: %s has no usage_usec line", statFile)
}
