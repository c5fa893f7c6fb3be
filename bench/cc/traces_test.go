package benchcc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/hera"
)

// TestFindTraces lays out directories as a clone might be placed and
// checks where FindTraces finds the traces, or that its error names every
// place it looked.
func TestFindTraces(t *testing.T) {
	const gomod = "module " + Module + "\n\ngo 1.26\n"
	tests := []struct {
		name  string
		dirs  []string          // created under the temporary root
		files map[string]string // created under the root
		wd    string            // relative to the root
		env   string            // $XREALM_TRACES, relative to the root ("" = unset)
		want  string            // relative to the root; "" = an error
		// the error mentions these (relative to the root)
		errHas []string
	}{
		{name: "beside the current directory", dirs: []string{"shared/traces", "main"}, files: map[string]string{"main/go.mod": gomod},
			wd: "main", want: "shared/traces"},
		{name: "beside the repository, from a subdirectory", dirs: []string{"shared/traces", "main/bench/cc"}, files: map[string]string{"main/go.mod": gomod},
			wd: "main/bench/cc", want: "shared/traces"},
		{name: "relative to the current directory first", dirs: []string{"shared/traces", "main/bench/shared/traces", "main/bench/cc"}, files: map[string]string{"main/go.mod": gomod},
			wd: "main/bench/cc", want: "main/bench/shared/traces"},
		{name: "environment overrides", dirs: []string{"shared/traces", "mine", "main"}, files: map[string]string{"main/go.mod": gomod},
			wd: "main", env: "mine", want: "mine"},
		{name: "environment names a missing directory", dirs: []string{"shared/traces", "main"}, files: map[string]string{"main/go.mod": gomod},
			wd: "main", env: "nowhere", errHas: []string{"nowhere", TracesEnv}},
		{name: "another module's go.mod is not the root", dirs: []string{"shared/traces", "work/other/sub"}, files: map[string]string{"work/other/go.mod": "module example.com/other\n"},
			wd: "work/other/sub", errHas: []string{"work/other/shared/traces", "no repository root", TracesEnv}},
		{name: "a clone without traces beside it", dirs: []string{"elsewhere/xrealm/cc"}, files: map[string]string{"elsewhere/xrealm/go.mod": gomod},
			wd: "elsewhere/xrealm/cc", errHas: []string{"elsewhere/xrealm/shared/traces", "elsewhere/shared/traces", TracesEnv}},
		{name: "module line with a comment", dirs: []string{"shared/traces", "main/x/y"}, files: map[string]string{"main/go.mod": "module " + Module + " // the backend\n"},
			wd: "main/x/y", want: "shared/traces"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for f, body := range tc.files {
				if err := os.WriteFile(filepath.Join(root, f), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			getenv := func(k string) string {
				if k == TracesEnv && tc.env != "" {
					return filepath.Join(root, tc.env)
				}
				return ""
			}
			got, err := FindTraces(filepath.Join(root, tc.wd), getenv)
			if tc.want != "" {
				if err != nil {
					t.Fatal(err)
				}
				if want := filepath.Join(root, tc.want); got != want {
					t.Fatalf("got %s, want %s", got, want)
				}
				return
			}
			if err == nil {
				t.Fatalf("found %s, want an error", got)
			}
			for _, s := range tc.errHas {
				if strings.Contains(s, "/") { // a path under the root
					s = filepath.Join(root, s)
				}
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %s", err, s)
				}
			}
		})
	}
}

// TestParseSweepSet checks XREALM_SIM_SWEEP's parameter sets: known keys
// set their parameter, unknown keys and bad values are refused with the
// valid keys listed.
func TestParseSweepSet(t *testing.T) {
	def := hera.DefaultParams()
	tests := []struct {
		set    string
		check  func(hera.Params, simOpts) bool
		errHas []string // empty: accepted
	}{
		{set: "", check: func(p hera.Params, o simOpts) bool { return p == def && !o.rto && !o.undo }},
		{set: "B=5ms,X=6,s=3,cap=64,N=2", check: func(p hera.Params, _ simOpts) bool {
			return p.BucketWidth == 5*time.Millisecond && p.Buckets == 6 && p.DecreaseShift == 3 && p.HistCap == 64 && p.Backlog == 2
		}},
		{set: "bp=8,fg=8,bw=500ms", check: func(p hera.Params, _ simOpts) bool {
			return p.BucketPackets == 8 && p.FloorGainEighths == 8 && p.BDPWindow == 500*time.Millisecond
		}},
		{set: "rto=1,undo=1", check: func(_ hera.Params, o simOpts) bool { return o.rto && o.undo }},
		{set: "ob=150,ok=4,gate=2,minc=4,maxc=5000,dmax=3,beta=700", check: func(p hera.Params, _ simOpts) bool {
			return p.OutageBoostPercent == 150 && p.OutageRTTs == 4 && p.GateRTTs == 2 && p.MinCwnd == 4 && p.MaxCwnd == 5000 && p.DeltaMax == 3 && p.LossBetaPermille == 700
		}},
		{set: "B=5ms,bucket=4", errHas: []string{`unknown key "bucket"`, "valid keys: B, N, X, beta, bp, bw, cap"}},
		{set: "b=5ms", errHas: []string{`unknown key "b"`}},
		{set: "X=six", errHas: []string{"X", `"six" is not a non-negative integer`}},
		{set: "X=-1", errHas: []string{"X", "not a non-negative integer"}},
		{set: "B=5", errHas: []string{"B", "not a positive duration"}},
		{set: "fg", errHas: []string{"fg has no value"}},
	}
	for _, tc := range tests {
		t.Run(tc.set, func(t *testing.T) {
			p, o, err := parseSweepSet(tc.set)
			if len(tc.errHas) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if !tc.check(p, o) {
					t.Fatalf("%q gave %+v %+v", tc.set, p, o)
				}
				return
			}
			if err == nil {
				t.Fatalf("%q accepted", tc.set)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}
