//go:build unix

package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DataLockFile is the file in the data directory that a running server
// holds an exclusive lock (flock) on.
const DataLockFile = "xrealm.lock"

// lockDataDir takes an exclusive lock on dir for as long as the returned
// file is open, and writes this process's id into the lock file. Two
// servers on one data directory would both open its JetStream files and
// lose each other's writes; the second is refused, naming the holder's
// process id. The kernel releases the lock when its holder exits, however
// it exits, so a lock file left by a killed server does not block.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, DataLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	if err := flock(f); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = "pid " + pid
			}
			return nil, fmt.Errorf("data directory %s is in use by another xrealm serve (%s); give each server its own --data", dir, holder)
		}
		if errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
			// A file system without locks (some network and FUSE mounts)
			// served before the lock existed; it still does, unguarded.
			return nil, &noLockError{dir: dir, err: err}
		}
		return nil, fmt.Errorf("lock data directory %s: lock %s: %w", dir, path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock data directory %s: write %s: %w", dir, path, err)
	}
	return f, nil
}

// flock takes an exclusive lock on f without waiting, retrying when a
// signal interrupts the call.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// noLockError says that the data directory's file system cannot lock: the
// server starts without the guard against a second server.
type noLockError struct {
	dir string
	err error
}

func (e *noLockError) Error() string {
	return fmt.Sprintf("data directory %s cannot be locked (%v): nothing stops a second xrealm serve from sharing it, which loses data; give each server its own --data", e.dir, e.err)
}

func (e *noLockError) Unwrap() error { return e.err }
