package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testlog"
	"github.com/xrealm/xrealm/internal/testnet"
)

// helperEnv, when set, makes TestHelperMain run Main with the arguments
// it holds (separated by newlines) in a process of its own, for a test
// that needs the real process: its exit code, its signals, its pipes.
const helperEnv = "XREALM_CLI_HELPER_ARGS"

// helperCommandsEnv, when set too, makes the helper run testCommands
// instead of xrealm's.
const helperCommandsEnv = "XREALM_CLI_HELPER_TEST_COMMANDS"

func TestHelperMain(t *testing.T) {
	args := os.Getenv(helperEnv)
	if args == "" {
		t.Skip("runs only as a helper process")
	}
	if os.Getenv(helperCommandsEnv) != "" {
		os.Exit(mainWith(testCommands(), strings.Split(args, "\n"), os.Stderr))
	}
	os.Exit(Main(strings.Split(args, "\n"), os.Stderr))
}

// testCommands are commands whose last write is known: "write" writes a
// line to standard output and returns at once, "quiet" writes nothing.
func testCommands() map[string]command {
	return map[string]command{
		"write": {run: func(ctx context.Context, args []string) error {
			fmt.Println("the last line")
			return nil
		}},
		"quiet": {run: func(ctx context.Context, args []string) error { return nil }},
	}
}

// runHelper runs the helper process with args (in testCommands when test
// is set), its standard output (and error too, with stderrClosed) a pipe
// whose reader has gone, and returns its exit code, failing if a signal
// killed it.
func runHelper(t *testing.T, test, stderrClosed bool, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperMain$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(args, "\n"))
	if test {
		cmd.Env = append(cmd.Env, helperCommandsEnv+"=1")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // gone before the command starts
	defer w.Close()
	var stderr testlog.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if stderrClosed {
		cmd.Stderr = w
	}
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ee == nil {
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("xrealm %s: killed by %v; stderr:\n%s", strings.Join(args, " "), ws.Signal(), stderr.String())
	}
	return ee.ExitCode()
}

// A command whose last write found its output closed exits 141, as when
// a broken pipe killed it: the SIGPIPE of that write could reach the
// watch after the command returned, and the process exited 0, so that a
// shell's pipefail saw nothing. A command that wrote nothing there exits
// as it would have (0), its reader's leaving early unnoticed, as for any
// program. With standard error closed too, saying so fails and is lost,
// and kills nothing.
func TestLastWriteToClosedOutput(t *testing.T) {
	tests := []struct {
		command      string
		stderrClosed bool
		want         int
	}{
		{"write", false, exitStdoutClosed},
		{"write", true, exitStdoutClosed},
		{"quiet", false, 0},
		{"quiet", true, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s stderr closed %v", tt.command, tt.stderrClosed), func(t *testing.T) {
			if got := runHelper(t, true, tt.stderrClosed, tt.command); got != tt.want {
				t.Fatalf("exit code %d, want %d", got, tt.want)
			}
		})
	}
}

// A command whose standard output goes away (xrealm bots | head) stops
// as it does on Ctrl-C: the bots disconnect, the summary is attempted, a
// bench stops the servers it started and removes its temporary files;
// then it exits 141 (128 + SIGPIPE, what a shell reports for a process a
// broken pipe killed). It fails if SIGPIPE kills the command at its first
// write after the reader left, with nothing stopped or removed.
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

// A server keeps serving when its standard output and error lose their
// reader (xrealm serve 2>&1 | tee log, and tee is gone; the journal
// restarted): its logs are lost, its clients are not. It stopped at its
// next log line, as a command does. SIGTERM still stops it cleanly, with
// exit code 0.
func TestServeKeepsRunningWhenOutputCloses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := testnet.FreePorts(t, 1)[0]
	args := []string{"serve", "--data", t.TempDir(), "--http-addr", addr, "--https-addr", "", "--mqtt-addr", "",
		"--mqtts-addr", "", "--mqtt-ws-addr", "", "--nats-addr", "", "--nats-ws-addr", "", "--ubiq-addr", "", "--ubiq-wss-addr", ""}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperMain$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(args, "\n"))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer cmd.Process.Kill()
	get := func(method, path string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for { // its start's log lines fit in the pipe, unread
		if code, err := get(http.MethodGet, "/healthz"); err == nil && code == http.StatusOK {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("serve never became healthy")
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.Close()
	// A refused request logs a line (WARN "HTTP request denied"), before
	// the answer: that write fails with EPIPE and raises SIGPIPE.
	if code, err := get(http.MethodPut, "/scenes/lab/room/settings"); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("PUT without a token: %d %v, want 401", code, err)
	}
	if code, err := get(http.MethodGet, "/healthz"); err != nil || code != http.StatusOK {
		t.Fatalf("after its output closed, /healthz: %d %v, want 200", code, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("killed by %v, want a clean stop", ws.Signal())
		}
		t.Fatalf("exit code %d, want 0", ee.ExitCode())
	}
	if err != nil {
		t.Fatal(err)
	}
}
