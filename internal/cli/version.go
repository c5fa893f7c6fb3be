package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
)

// runVersion implements `xrealm version`: the commit the binary was built
// from, as Go stamps it (go build in a git checkout), so that results name
// the build they measured.
func runVersion(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	short := fs.Bool("short", false, "print only the commit (with -modified for a build from a changed tree), or unknown")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	v := readVersion()
	if *short {
		fmt.Println(v.commit())
		return nil
	}
	fmt.Println(v)
	return nil
}

// buildVersion is what the binary knows of its build.
type buildVersion struct {
	Revision string // full commit hash; "" = not stamped
	Time     string // commit time
	Modified bool   // built from a tree with uncommitted changes
	Go       string
}

func readVersion() buildVersion {
	var v buildVersion
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Go = bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// commit is the short commit, marked -modified for a changed tree, or
// unknown.
func (v buildVersion) commit() string {
	if v.Revision == "" {
		return "unknown"
	}
	c := v.Revision
	if len(c) > 12 {
		c = c[:12]
	}
	if v.Modified {
		c += "-modified"
	}
	return c
}

func (v buildVersion) String() string {
	if v.Revision == "" {
		return fmt.Sprintf("xrealm, commit unknown (built without a VCS stamp: go build -buildvcs=auto in a git checkout adds one), %s", v.Go)
	}
	return fmt.Sprintf("xrealm %s (committed %s), %s", v.commit(), v.Time, v.Go)
}
