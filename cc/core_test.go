package cc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xrealm/xrealm/hera"
)

// hostCore compiles the harness of bpf/hera_core.h (bpf/hera_core_host.c)
// for the host and returns the binary's path; it skips the test when the
// machine has no C compiler.
func hostCore(t *testing.T) string {
	t.Helper()
	compiler := ""
	for _, c := range []string{"clang", "cc", "gcc"} {
		if _, err := exec.LookPath(c); err == nil {
			compiler = c
			break
		}
	}
	if compiler == "" {
		t.Skip("skipping: no C compiler (clang, cc or gcc) to build the BPF core for the host; run scripts/setup-cc.sh")
	}
	bin := filepath.Join(t.TempDir(), "hera_core_host")
	if out, err := exec.Command(compiler, "-O2", "-Wall", "-Werror", "-o", bin, "bpf/hera_core_host.c").CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", compiler, err, out)
	}
	return bin
}

// TestCoreMatchesVectors compiles bpf/hera_core.h for the host and replays
// the shared test vectors on it, so the C rule inside the eBPF program is
// checked against the same hand-computed numbers as the Go specification.
func TestCoreMatchesVectors(t *testing.T) {
	bin := hostCore(t)
	vf, err := hera.LoadVectors("../hera/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range vf.Cases {
		t.Run(c.Name, func(t *testing.T) {
			p, err := c.Params.ToParams()
			if err != nil {
				t.Fatal(err)
			}
			var in strings.Builder
			shared := 0
			if c.SharedPath {
				shared = 1
			}
			in.WriteString(hostParams(p, shared))
			for _, e := range c.Events {
				switch {
				case e.Loss:
					fmt.Fprintf(&in, "L %d\n", e.Flow)
				case e.Undo:
					fmt.Fprintf(&in, "U %d\n", e.Flow)
				default:
					fmt.Fprintf(&in, "A %d %d %d %d\n", e.Flow, e.TUs, e.RTTUs, e.Acked)
				}
			}
			cmd := exec.Command(bin)
			cmd.Stdin = strings.NewReader(in.String())
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("host core: %v", err)
			}
			lines := strings.Fields(string(out))
			if len(lines) != len(c.Events)+1 {
				t.Fatalf("host core printed %d values for %d events", len(lines), len(c.Events)+1)
			}
			for i, e := range c.Events {
				got, _ := strconv.Atoi(lines[i+1])
				if uint32(got) != e.Cwnd {
					t.Fatalf("event %d (%+v): C core cwnd = %d, want %d", i, e, got, e.Cwnd)
				}
			}
		})
	}
}

// TestCoreFiltersMatchVectors replays the vector file's filter sequences
// on the C core's windowed minimum and maximum (see hera.TestFilterVectors).
func TestCoreFiltersMatchVectors(t *testing.T) {
	bin := hostCore(t)
	vf, err := hera.LoadVectors("../hera/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(vf.Filters) == 0 {
		t.Fatal("no filter vectors")
	}
	for _, c := range vf.Filters {
		t.Run(c.Name, func(t *testing.T) {
			cmdc := map[string]string{"min": "m", "max": "x"}[c.Kind]
			if cmdc == "" {
				t.Fatalf("filter kind %q unknown", c.Kind)
			}
			var in strings.Builder
			fmt.Fprintf(&in, "W %d\n", c.WindowUs)
			for _, s := range c.Steps {
				fmt.Fprintf(&in, "%s %d %d\n", cmdc, s.TUs, s.V)
			}
			cmd := exec.Command(bin)
			cmd.Stdin = strings.NewReader(in.String())
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("host core: %v", err)
			}
			got := strings.Fields(string(out))
			if len(got) != len(c.Steps)+1 {
				t.Fatalf("host core printed %d values for %d steps", len(got), len(c.Steps)+1)
			}
			for i, s := range c.Steps {
				if got[i+1] != strconv.FormatUint(uint64(s.Want), 10) {
					t.Fatalf("step %d (%+v): C %s = %s, want %d", i, s, c.Kind, got[i+1], s.Want)
				}
			}
		})
	}
}

// hostParams is the harness's P command for p (see bpf/hera_core_host.c).
func hostParams(p hera.Params, shared int) string {
	return fmt.Sprintf("P %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d\n", p.Variant, p.BucketWidth/time.Microsecond,
		p.Backlog, p.Buckets, p.DeltaMax, p.HistCap, p.MinCwnd, p.MaxCwnd, p.InitCwnd,
		p.DecreaseShift, p.LossBetaPermille, p.MinRTTWindow/time.Microsecond,
		p.FloorGainEighths, p.BDPWindow/time.Microsecond, p.BucketPackets, p.GateRTTs,
		p.OutageRTTs, p.OutageBoostPercent, shared)
}

// TestCoreMatchesGoOnRandomInput drives the Go and C implementations with
// the same pseudo-random ACK stream and requires identical windows.
func TestCoreMatchesGoOnRandomInput(t *testing.T) {
	bin := hostCore(t)
	tests := []struct {
		name   string
		p      hera.Params
		shared bool // three flows on one path
		// stepBack gives one ACK in seven a time up to 4 ms before the
		// latest (as a flow's clock read before another flow's update of
		// the shared path is, in the kernel), with 30 ms windows so that
		// the filters expire often.
		stepBack bool
	}{
		{"hera", hera.DefaultParams(), false, false},
		{"hera-paper", hera.PaperParams(), false, false},
		{"hera-shared-path", hera.DefaultParams(), true, false},
		{"hera-no-gate-no-bucket-packets", func() hera.Params {
			p := hera.DefaultParams()
			p.GateRTTs, p.BucketPackets = 0, 0
			return p
		}(), false, false},
		{"hera-bucket-packets-gate", func() hera.Params {
			p := hera.DefaultParams()
			p.GateRTTs, p.BucketPackets = 1, 20
			return p
		}(), true, false},
		{"hera-outage-boost-2rtts", func() hera.Params {
			p := hera.DefaultParams()
			p.OutageRTTs, p.OutageBoostPercent = 2, 150
			return p
		}(), false, false},
		{"hera-outage-boost-15rtts", func() hera.Params {
			p := hera.DefaultParams()
			p.OutageRTTs, p.OutageBoostPercent = 15, 200
			return p
		}(), true, false},
		// The largest values Validate accepts: the C core must hold them
		// (Validate refuses a bucket of 5000 s, which the core's 32 bits
		// would cut to 705 s) and its products must not wrap.
		{"hera-limits", func() hera.Params {
			p := hera.DefaultParams()
			p.DeltaMax, p.HistCap, p.DecreaseShift = hera.MaxDeltaMax, hera.MaxHistCap, hera.MaxDecreaseShift
			p.Buckets, p.Backlog, p.MaxCwnd, p.InitCwnd = hera.MaxBuckets, hera.MaxBacklog, ^uint32(0), ^uint32(0)>>1
			p.BucketWidth = 2 * time.Millisecond
			return p
		}(), true, false},
		{"hera-widest-bucket", func() hera.Params {
			p := hera.DefaultParams()
			p.BucketWidth, p.BucketPackets = hera.MaxValidRTT, 0
			return p
		}(), false, false},
		{"hera-paper-limits", func() hera.Params {
			p := hera.PaperParams()
			p.DeltaMax, p.HistCap, p.BucketWidth = hera.MaxDeltaMax, hera.MaxHistCap, hera.MaxValidRTT
			return p
		}(), false, false},
		{"hera-shared-path-clock-steps-back", func() hera.Params {
			p := hera.DefaultParams()
			p.MinRTTWindow, p.BDPWindow = 30*time.Millisecond, 30*time.Millisecond
			return p
		}(), true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			nflows, shared := 1, 0
			var path *hera.Path
			if tc.shared {
				nflows, shared, path = 3, 1, &hera.Path{}
			}
			fs := make([]*hera.Flow, nflows)
			for i := range fs {
				var err error
				if fs[i], err = hera.NewFlowOnPath(p, path); err != nil {
					t.Fatal(err)
				}
			}
			var in strings.Builder
			in.WriteString(hostParams(p, shared))
			want := []uint32{fs[0].Cwnd()}
			x := uint64(12345)
			var now uint64
			for i := 0; i < 20000; i++ {
				x = x*6364136223846793005 + 1442695040888963407
				now += x >> 54 // up to ~1 ms
				rtt := int64(200 + (x>>20)%80000)
				if (x>>8)%97 == 0 {
					rtt = -1
				}
				fi := int(x>>30) % nflows
				if (x>>12)%503 == 0 {
					fmt.Fprintf(&in, "L %d\n", fi)
					want = append(want, fs[fi].OnLoss())
					continue
				}
				if (x>>12)%503 == 7 {
					fmt.Fprintf(&in, "U %d\n", fi)
					want = append(want, fs[fi].OnUndo())
					continue
				}
				acked := uint32((x >> 40) % 4)
				at := now
				if tc.stepBack && (x>>16)%7 == 0 {
					at -= min(now, (x>>24)%4000)
				}
				fmt.Fprintf(&in, "A %d %d %d %d\n", fi, at, rtt, acked)
				want = append(want, fs[fi].OnAck(at, rtt, acked))
			}
			cmd := exec.Command(bin)
			cmd.Stdin = strings.NewReader(in.String())
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Fields(string(out))
			if len(got) != len(want) {
				t.Fatalf("C printed %d values, Go %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != strconv.Itoa(int(want[i])) {
					t.Fatalf("step %d: C cwnd %s, Go %d", i, got[i], want[i])
				}
			}
		})
	}
}
