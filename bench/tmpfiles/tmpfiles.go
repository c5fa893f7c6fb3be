// Package tmpfiles makes the benches' temporary files and directories
// with the pid of the process that made them in their names, and removes
// those of processes that are gone: a bench that a second Ctrl-C or a
// crash ended leaves its temporary copies behind, and the next run of the
// same bench cleans them up.
package tmpfiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// pattern is the pattern of a temporary name: prefix, "pid", the pid of the
// process that made it, "-", and os.MkdirTemp's random part.
func pattern(prefix string) string {
	return fmt.Sprintf("%spid%d-*", prefix, os.Getpid())
}

// MkdirTemp makes a directory in os.TempDir() named prefix + "pid" + the
// pid + "-" + random, after removing the ones of processes gone
// (RemoveStale).
func MkdirTemp(prefix string) (string, error) {
	RemoveStale(prefix)
	return os.MkdirTemp("", pattern(prefix))
}

// CreateTemp is MkdirTemp for a file.
func CreateTemp(prefix string) (*os.File, error) {
	RemoveStale(prefix)
	return os.CreateTemp("", pattern(prefix))
}

// RemoveStale removes the files and directories of os.TempDir() that
// MkdirTemp or CreateTemp made with prefix for a process that no longer
// runs, and returns their paths. Names without a pid are left alone, and
// so are those of a live process (or one this process may not signal).
func RemoveStale(prefix string) []string {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"pid*-*"))
	var removed []string
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), prefix+"pid")
		i := strings.IndexByte(rest, '-')
		if i < 1 {
			continue
		}
		pid, err := strconv.Atoi(rest[:i])
		if err != nil || pid <= 0 || alive(pid) {
			continue
		}
		if os.RemoveAll(m) == nil {
			removed = append(removed, m)
		}
	}
	return removed
}

// alive reports whether process pid runs (a zombie counts: its parent
// may still be using its files).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
