//go:build unix

package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/internal/testnet"
)

// quietConfig is a node's configuration on dir with an HTTP listener only.
func quietConfig(t *testing.T, dir string) Config {
	cfg := Defaults()
	cfg.DataDir = dir
	cfg.HTTPAddr = testnet.FreePorts(t, 1)[0]
	cfg.HTTPSAddr, cfg.MQTTAddr, cfg.MQTTSAddr, cfg.MQTTWSAddr, cfg.NATSAddr, cfg.NATSWSAddr = "", "", "", "", "", ""
	cfg.UbiqAddr, cfg.UbiqWSSAddr, cfg.UbiqWSAddr = "", "", ""
	return cfg
}

// A second server on the data directory of a running one is refused at
// once, naming the directory and the holder's process id, and starts once
// the first has stopped.
func TestDataDirInUseRefused(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := Start(ctx, quietConfig(t, dir), log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := quietConfig(t, dir)
	second, err := Start(ctx, cfg, log)
	if err == nil {
		second.Close()
		first.Close()
		t.Fatal("a second server started on the data directory of a running one")
	}
	want := fmt.Sprintf("data directory %s is in use by another xrealm serve (pid %d); give each server its own --data", dir, os.Getpid())
	if err.Error() != want {
		t.Errorf("err %q, want %q", err, want)
	}
	first.Close()
	// The refused server bound nothing; the lock went with the first.
	second, err = Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("after the first server stopped: %v", err)
	}
	second.Close()
}

// The lock belongs to a process, not to the lock file: another process
// holding it refuses a server (naming that process), and once that process
// is killed, its lock file left behind does not.
func TestDataDirLockOfKilledProcess(t *testing.T) {
	if dir := os.Getenv("XREALM_TEST_HOLD_LOCK"); dir != "" {
		// The helper process: hold the lock until killed.
		f, err := lockDataDir(dir)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		defer f.Close()
		fmt.Println("locked")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDataDirLockOfKilledProcess$")
	cmd.Env = append(os.Environ(), "XREALM_TEST_HOLD_LOCK="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper process: %q", line)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := quietConfig(t, dir)
	if s, err := Start(ctx, cfg, log); err == nil {
		s.Close()
		t.Fatal("started on a data directory another process holds")
	} else if want := fmt.Sprintf("in use by another xrealm serve (pid %d)", cmd.Process.Pid); !strings.Contains(err.Error(), want) {
		t.Fatalf("err %q, want it to contain %q", err, want)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(dir, DataLockFile)); err != nil {
		t.Fatalf("the killed process left no lock file: %v", err)
	}
	s, err := Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("the lock file of a killed process blocks the start: %v", err)
	}
	s.Close()
}
