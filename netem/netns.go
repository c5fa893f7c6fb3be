package netem

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// nsPrefix starts the name of every namespace this package creates; the
// creating process's id follows, so stale namespaces of dead emulators can
// be found and removed.
const nsPrefix = "xrealm-netem-"

// netnsDir is where iproute2 keeps named network namespaces.
const netnsDir = "/var/run/netns"

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netem: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func addNamespace(ctx context.Context, name string) error { return ipCmd(ctx, "netns", "add", name) }

func deleteNamespace(name string) error {
	// A cancelled context must not stop the cleanup.
	return ipCmd(context.Background(), "netns", "del", name)
}

// RemoveStale deletes namespaces left behind by emulators whose process no
// longer exists (for example after SIGKILL). It returns the names removed.
func RemoveStale() ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netem: list namespaces: %w", err)
	}
	var removed []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || err == syscall.EPERM {
			continue // still alive
		}
		if err := deleteNamespace(e.Name()); err != nil {
			return removed, err
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}

// InNamespace runs fn with the calling goroutine's thread switched into the
// named network namespace. Sockets and TUN devices created by fn belong to
// that namespace for their whole life.
func InNamespace(name string, fn func() error) error {
	target, err := os.Open(filepath.Join(netnsDir, name))
	if err != nil {
		return fmt.Errorf("netem: open namespace %s: %w", name, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netem: open current namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netem: enter namespace %s: %w", name, err)
	}
	back := func() error {
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: it dies with the goroutine instead of
			// running other goroutines in the wrong namespace.
			return fmt.Errorf("netem: return from namespace %s: %w", name, err)
		}
		runtime.UnlockOSThread()
		return nil
	}
	// A panic in fn still returns the thread to its namespace: a caller
	// that recovers goes on in the namespace it was in.
	returned := false
	defer func() {
		if !returned {
			_ = back()
		}
	}()
	ferr := fn()
	returned = true
	if err := back(); err != nil {
		return err
	}
	return ferr
}

// CommandIn returns a command that runs in the named namespace.
func CommandIn(ctx context.Context, ns, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}
