package benchcc

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// TracesEnv names the environment variable that says where the traces
// are: the directory holding the mmwave/ and cellular/ Mahimahi trace
// folders. It overrides the places FindTraces looks in otherwise.
const TracesEnv = "XREALM_TRACES"

// Module is the module path FindTraces recognises the repository's go.mod
// by.
const Module = "github.com/xrealm/xrealm"

// FindTraces returns the traces directory: $XREALM_TRACES if set (it must
// exist), else ../shared/traces relative to the directory wd, else
// shared/traces beside the repository (in the parent of the directory,
// wd or above, whose go.mod declares module github.com/xrealm/xrealm).
// The error lists every place it looked. getenv is os.Getenv outside
// tests.
func FindTraces(wd string, getenv func(string) string) (string, error) {
	if dir := getenv(TracesEnv); dir != "" {
		if isDir(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("no traces directory at %s ($%s)", dir, TracesEnv)
	}
	var tried []string
	try := func(dir string) bool {
		dir = filepath.Clean(dir)
		if slices.Contains(tried, dir) {
			return false
		}
		tried = append(tried, dir)
		return isDir(dir)
	}
	if dir := filepath.Join(wd, "..", "shared", "traces"); try(dir) {
		return filepath.Clean(dir), nil
	}
	if root, ok := repoRoot(wd); !ok {
		tried = append(tried, fmt.Sprintf("(no repository root, a go.mod of module %s, at or above %s)", Module, wd))
	} else if dir := filepath.Join(filepath.Dir(root), "shared", "traces"); try(dir) {
		return filepath.Clean(dir), nil
	}
	return "", fmt.Errorf("no traces directory: looked in %s; set $%s or --traces-dir to the directory holding mmwave/ and cellular/",
		strings.Join(tried, ", "), TracesEnv)
}

// DefaultTraces is FindTraces from the current directory with the
// process's environment.
func DefaultTraces() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return FindTraces(wd, os.Getenv)
}

// repoRoot walks up from dir to the directory whose go.mod declares
// Module.
func repoRoot(dir string) (string, bool) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	for {
		if modulePath(filepath.Join(dir, "go.mod")) == Module {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// modulePath returns the module path a go.mod declares, "" if none.
func modulePath(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}
