package cli

import "fmt"

// outNotice is the line a bench prints at its start to say where its
// results go, e.g. "appending results to bench/cc/out/results.jsonl (the
// default; --out DIR writes elsewhere)". isDefault says whether the
// path is the flag's default; flag is how to choose another.
func outNotice(action, path string, isDefault bool, flag string) string {
	if !isDefault {
		return action + " " + path
	}
	return fmt.Sprintf("%s %s (the default; %s writes elsewhere)", action, path, flag)
}
