package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
)

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

// interruptedError is the error of a bench that was interrupted (Ctrl-C,
// SIGTERM) after n of its units (runs, windows) finished, saying where
// they are, not only "context canceled"; the unit under way is never
// recorded.
func interruptedError(n int, unit, where string) error {
	if n == 0 {
		return fmt.Errorf("interrupted before a %s finished; nothing was written to %s", unit, where)
	}
	units := unit + "s"
	if n == 1 {
		units = unit
	}
	return fmt.Errorf("interrupted: %d %s finished, in %s (the %s under way is not recorded)", n, units, where, unit)
}

// sayInterrupted prints at once, when ctx ends, that bench heard the
// interruption and what it does before it exits (which takes a moment);
// the returned function stops it.
func sayInterrupted(ctx context.Context, bench, doing string) func() bool {
	return context.AfterFunc(ctx, func() {
		fmt.Fprintf(os.Stderr, "%s: interrupted; %s ...\n", bench, doing)
	})
}

// summaryAlone refuses, as a usage error naming them, the flags of fs set
// next to --summary: a summary only prints the tables of its results file
// (and writes their plots), so a flag of a run would be ignored.
func summaryAlone(fs *flag.FlagSet) error {
	var others []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "summary" {
			others = append(others, "--"+f.Name)
		}
	})
	if len(others) == 0 {
		return nil
	}
	return usagef("%s with --summary: --summary only prints the tables of a results file, and %s would be ignored; leave %s out",
		strings.Join(others, ", "), plural(len(others), "this flag", "these flags"), plural(len(others), "it", "them"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
