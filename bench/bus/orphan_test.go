package benchbus_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	benchbus "github.com/xrealm/xrealm/bench/bus"
)

// standInEnv makes the test binary a bench stand-in that starts a child
// as the bench does, prints its pid and waits to be killed: "mosquitto:DIR"
// starts Mosquitto in DIR, "sleep" a sleep(1) as the bench starts its
// background bots and the arena-py agent.
const standInEnv = "XREALM_BENCH_TEST_STAND_IN"

func standIn(mode string) {
	pid := 0
	if dir, ok := strings.CutPrefix(mode, "mosquitto:"); ok {
		s, err := benchbus.StartMosquitto(context.Background(), dir, benchbus.LookMosquitto())
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		pid = s.PID()
	} else {
		cmd := exec.Command("sleep", "600")
		benchbus.DiesWithBench(cmd)
		if err := cmd.Start(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		pid = cmd.Process.Pid
	}
	fmt.Println(pid)
	select {}
}

// killStandIn runs a stand-in bench in mode, kills it with SIGKILL (no
// clean-up runs) once it started its child, and reports whether the child
// went with it.
func killStandIn(t *testing.T, mode string) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), standInEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the stand-in did not start its child: %q %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The kernel signals the child as its parent dies; give it a while to
	// go (a bound, not a timing assertion).
	for deadline := time.Now().Add(10 * time.Second); ; {
		if !running(pid) {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the child (pid %d) still runs after the bench that started it was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKilledBenchTakesMosquitto: run as root, Mosquitto switched to the
// user mosquitto, which cleared its parent-death signal, and a killed
// bench left it running.
func TestKilledBenchTakesMosquitto(t *testing.T) {
	if benchbus.LookMosquitto() == "" {
		t.Skip("mosquitto is not installed (apt-get install mosquitto, or scripts/setup.sh --test)")
	}
	killStandIn(t, "mosquitto:"+t.TempDir())
}

// TestKilledBenchTakesItsChildren: a killed bench left its background
// bots (xrealm bots) and the arena-py agent running.
func TestKilledBenchTakesItsChildren(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep:", err)
	}
	killStandIn(t, "sleep")
}

// running reports whether pid is a process that has not exited (a zombie
// left to a parent that does not reap it has).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
