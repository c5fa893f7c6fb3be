package benchbus

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xrealm/xrealm/cpuload"
)

// clockTick is the unit of the CPU times in /proc: USER_HZ, 100 on every
// Linux architecture Go runs on.
const clockTick = 10 * time.Millisecond

// procCPU returns the user plus system CPU time a process has used, from
// /proc/{pid}/stat ("self" for this process).
func procCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu of process %s: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu of process %s: malformed stat %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state(3) ... utime(14) stime(15), so indexes 11, 12.
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of process %s: short stat", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cpu of process %s: malformed utime/stime %q %q", pid, f[11], f[12])
	}
	return time.Duration(u+s) * clockTick, nil
}

// procMem returns a process's resident set and its peak, in bytes, from
// /proc/{pid}/status.
func procMem(pid string) (rss, peak int64, err error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0, fmt.Errorf("memory of process %s: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 1 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("memory of process %s: %s %q", pid, k, v)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, nil
}

// procSyscalls returns how many read and write system calls a process has
// made, from /proc/{pid}/io (syscr, syscw). The kernel counts read(2),
// write(2) and their vector forms, on sockets as on files, but not the
// send and recv family; Go's net package and Mosquitto both use read and
// write on TCP sockets. A broker that writes every delivery
// with a call of its own (Mosquitto) makes one write per delivery; one
// that batches, far fewer.
func procSyscalls(pid string) (reads, writes int64, err error) {
	b, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return 0, 0, fmt.Errorf("system calls of process %s: %w", pid, err)
	}
	reads, writes, err = parseProcIO(b)
	if err != nil {
		return 0, 0, fmt.Errorf("system calls of process %s: %w", pid, err)
	}
	return reads, writes, nil
}

// parseProcIO reads syscr and syscw from the text of /proc/{pid}/io.
func parseProcIO(b []byte) (reads, writes int64, err error) {
	var haveR, haveW bool
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "syscr" && k != "syscw") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("io: %s %q is not a count", k, strings.TrimSpace(v))
		}
		if k == "syscr" {
			reads, haveR = n, true
		} else {
			writes, haveW = n, true
		}
	}
	if !haveR || !haveW {
		return 0, 0, fmt.Errorf("io: no syscr and syscw in %q", b)
	}
	return reads, writes, nil
}

// machineCPU returns, from /proc/stat, the CPU time all cores have spent
// busy (not idle, not stolen) and the time the hypervisor took from this
// virtual machine (steal): the first tells how much else ran on the
// machine, the second how much CPU the machine did not have.
func machineCPU() (busy, steal time.Duration, err error) {
	t, err := cpuload.Read()
	if err != nil {
		return 0, 0, err
	}
	return seconds(t.Busy), seconds(t.Steal), nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// loadAvg returns the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// cpuSample is the CPU counters of interest at one instant.
type cpuSample struct {
	at                           time.Time
	broker, self, machine, steal time.Duration
	// The broker's read and write system calls so far; -1 where
	// /proc/{pid}/io could not be read (it needs the right to trace the
	// process), which leaves the step's call rates unknown, not failed.
	brokerReads, brokerWrites int64
}

func sampleCPU(pid int) (cpuSample, error) {
	s := cpuSample{at: time.Now()}
	var err error
	if s.broker, err = procCPU(strconv.Itoa(pid)); err != nil {
		return s, err
	}
	if s.brokerReads, s.brokerWrites, err = procSyscalls(strconv.Itoa(pid)); err != nil {
		s.brokerReads, s.brokerWrites = -1, -1
	}
	if s.self, err = procCPU("self"); err != nil {
		return s, err
	}
	s.machine, s.steal, err = machineCPU()
	return s, err
}
