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

// mosquittoChildEnv makes the test binary a bench stand-in that starts
// Mosquitto in the directory it names, prints its pid and waits to be
// killed.
const mosquittoChildEnv = "XREALM_BENCH_TEST_MOSQUITTO"

func mosquittoChild(dir string) {
	s, err := benchbus.StartMosquitto(context.Background(), dir, benchbus.LookMosquitto())
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(s.PID())
	select {}
}

// TestKilledBenchTakesMosquitto kills (SIGKILL: no clean-up runs) a
// process that started Mosquitto as the bench does, and checks that
// Mosquitto goes with it. Run as root, Mosquitto switched to the user
// mosquitto, which cleared its parent-death signal, and it was left
// running.
func TestKilledBenchTakesMosquitto(t *testing.T) {
	if benchbus.LookMosquitto() == "" {
		t.Skip("mosquitto is not installed (apt-get install mosquitto, or scripts/setup.sh --test)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), mosquittoChildEnv+"="+t.TempDir())
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
		t.Fatalf("the stand-in did not start Mosquitto: %q %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The kernel signals Mosquitto as its parent dies; give it a while to
	// go (a bound, not a timing assertion).
	for deadline := time.Now().Add(10 * time.Second); ; {
		if !running(pid) {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("mosquitto (pid %d) still runs after the bench that started it was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
