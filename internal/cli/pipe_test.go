package cli

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testlog"
)

// helperEnv, when set, makes TestHelperMain run Main with the arguments
// it holds (separated by newlines) in a process of its own, for a test
// that needs the real process: its exit code, its signals, its pipes.
const helperEnv = "XREALM_CLI_HELPER_ARGS"

func TestHelperMain(t *testing.T) {
	args := os.Getenv(helperEnv)
	if args == "" {
		t.Skip("runs only as a helper process")
	}
	os.Exit(Main(strings.Split(args, "\n"), os.Stderr))
}

// A command whose standard output goes away (xrealm bots | head) stops
// as it does on Ctrl-C: the bots disconnect, the summary is attempted, a
// bench stops the servers it started and removes its temporary files;
// then it exits 141 (128 + SIGPIPE, what a shell reports for a process a
// broken pipe killed). It was killed by SIGPIPE at its first write after
// the reader left, with nothing stopped or removed.
func TestStdoutClosedStopsCleanly(t *testing.T) {
	cfg, _ := startTestServer(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"bots", "--no-auth", "--addr", cfg.MQTTAddr, "--users", "2", "--scene", "pipe", "--progress", "20ms"}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperMain$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(args, "\n"))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testlog.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("no progress line: %v; stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(line, "users 2/2") {
		t.Errorf("progress line %q", line)
	}
	r.Close() // as head does after its lines
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("exit: %v, want exit code 141; stderr:\n%s", err, stderr.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("killed by %v, want a clean stop and exit code 141; stderr:\n%s", ws.Signal(), stderr.String())
	}
	if ee.ExitCode() != exitStdoutClosed {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", ee.ExitCode(), exitStdoutClosed, stderr.String())
	}
	if !strings.Contains(stderr.String(), "standard output was closed") {
		t.Errorf("stderr does not say why it stopped:\n%s", stderr.String())
	}
}
