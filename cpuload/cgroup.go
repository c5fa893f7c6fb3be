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

// cgroupRoot is where cgroup v2 is mounted, and the cgroup v1 controllers
// under it.
const cgroupRoot = "/sys/fs/cgroup"

// quota is a CPU limit of a cgroup the process runs in: a container's
// --cpus, a Kubernetes CPU limit, a systemd CPUQuota. The machine may be
// idle while the process's cgroup uses all it may.
type quota struct {
	cpus  float64                       // the limit, in CPUs: quota / period
	usage string                        // the file that counts the limited cgroup's CPU time
	read  func(string) (float64, error) // its CPU time in seconds from usage
}

// Usage returns the limited cgroup's CPU time so far, in seconds.
func (q *quota) Usage() (float64, error) { return q.read(q.usage) }

// findQuota returns the smallest CPU limit on the way from the process's
// cgroups (selfCgroup, the contents of /proc/self/cgroup) up to the
// hierarchy's root, or nil when there is none. root is where the
// hierarchies are mounted: cgroup v2 at root itself, v1 controllers at
// root/{controllers} (root/cpu,cpuacct or root/cpu and root/cpuacct). A
// directory missing on the way up is skipped: in a container with cgroup
// v1, /proc/self/cgroup names the host's path while the container's own
// cgroup is mounted at the hierarchy's root.
func findQuota(root string, selfCgroup []byte) (*quota, error) {
	var v2, cpuPath, cpuCtl, acctCtl string
	hasV2, hasCPU := false, false
	for _, line := range strings.Split(string(selfCgroup), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2, hasV2 = path.Clean("/"+f[2]), true
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			switch c {
			case "cpu":
				cpuPath, cpuCtl, hasCPU = path.Clean("/"+f[2]), f[1], true
			case "cpuacct":
				acctCtl = f[1]
			}
		}
	}
	var best *quota
	consider := func(cpus float64, limited bool, usage string, read func(string) (float64, error)) {
		if limited && (best == nil || cpus < best.cpus) {
			best = &quota{cpus: cpus, usage: usage, read: read}
		}
	}
	if hasCPU && acctCtl != "" { // cgroup v1: the cpu controller's limit, cpuacct's count of the same cgroup
		for dir := range upward(cpuPath) {
			p := filepath.Join(root, cpuCtl, filepath.FromSlash(dir))
			cpus, limited, err := readCFSQuota(p)
			if err != nil {
				return nil, err
			}
			// The same cgroup in the cpuacct hierarchy (the same
			// directory when the two controllers share a mount).
			acct := filepath.Join(root, acctCtl, filepath.FromSlash(dir), "cpuacct.usage")
			consider(cpus, limited, acct, readV1Usage)
		}
	}
	if hasV2 {
		for dir := range upward(v2) {
			p := filepath.Join(root, filepath.FromSlash(dir))
			b, err := os.ReadFile(filepath.Join(p, "cpu.max"))
			if err != nil {
				continue
			}
			cpus, limited, err := parseCPUMax(b)
			if err != nil {
				return nil, fmt.Errorf("cpu load: %s: %w", filepath.Join(p, "cpu.max"), err)
			}
			consider(cpus, limited, filepath.Join(p, "cpu.stat"), readUsage)
		}
	}
	if best != nil {
		if _, err := best.Usage(); err != nil {
			return nil, err
		}
	}
	return best, nil
}

// upward yields dir and each of its parents up to "/".
func upward(dir string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for {
			if !yield(dir) || dir == "/" {
				return
			}
			dir = path.Dir(dir)
		}
	}
}

// readCFSQuota reads a cgroup v1 CPU limit from dir's cpu.cfs_quota_us
// (-1: none) and cpu.cfs_period_us; a directory without them has none.
func readCFSQuota(dir string) (cpus float64, limited bool, err error) {
	qb, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		return 0, false, nil
	}
	pb, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, false, nil
	}
	q, err := strconv.ParseInt(strings.TrimSpace(string(qb)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("cpu load: %s: cpu.cfs_quota_us %q: %w", dir, qb, err)
	}
	if q < 0 {
		return 0, false, nil
	}
	p, err := strconv.ParseUint(strings.TrimSpace(string(pb)), 10, 64)
	if err != nil || p == 0 || q == 0 {
		return 0, false, fmt.Errorf("cpu load: %s: quota %q per period %q is not a positive limit", dir, qb, pb)
	}
	return float64(q) / float64(p), true, nil
}

// readV1Usage returns a cgroup v1 CPU time in seconds from cpuacct.usage
// (nanoseconds).
func readV1Usage(file string) (float64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("cpu load: %w", err)
	}
	ns, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cpu load: %s: %q is not a count of nanoseconds", file, b)
	}
	return float64(ns) / 1e9, nil
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
