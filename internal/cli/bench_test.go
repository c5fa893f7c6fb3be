package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	benchbus "github.com/xrealm/xrealm/bench/bus"
)

// TestRefusesBadFlags runs commands of the bench, bots, cc and netem
// families with a setting they cannot run and checks that each exits
// non-zero with an error that names the setting (and the valid choices),
// before anything is built or started, and without the command's name
// twice ("xrealm cc: cc: ..."). Each case also points every output at a
// temporary directory, so that a check that let a case through could not
// overwrite the repository's results.
func TestRefusesBadFlags(t *testing.T) {
	tmp := t.TempDir()
	noTraces := filepath.Join(tmp, "traces")
	if err := os.Mkdir(noTraces, 0o755); err != nil {
		t.Fatal(err)
	}
	busOut := []string{"--out", filepath.Join(tmp, "bus"), "--mosquitto", "", "--python", ""}
	sfuOut := []string{"--out", filepath.Join(tmp, "sfu", "r.jsonl"), "--clip-dir", filepath.Join(tmp, "clips"), "--log-dir", filepath.Join(tmp, "logs")}
	ccOut := []string{"--out", filepath.Join(tmp, "cc"), "--traces-dir", noTraces}
	tests := []struct {
		args []string
		env  string // $XREALM_TRACES
		want []string
	}{
		{args: []string{"bench", "bus", "--experiments", "ramp,rampp"}, want: []string{`unknown experiment "rampp"`, "ramp, efficiency, isolation"}},
		{args: []string{"bench", "bus", "--systems", "xrealm,nats"}, want: []string{`unknown system "nats"`}},
		{args: []string{"bench", "bus", "--behaviour", "flock"}, want: []string{`unknown behaviour "flock"`, "static, randomwalk, boids, replay"}},
		{args: []string{"bench", "bus", "--behaviour", "replay"}, want: []string{"replay needs one", "xrealm bots record"}},
		{args: []string{"bench", "bus", "--trace", "walk.trace"}, want: []string{"a trace goes with behaviour replay"}},
		{args: []string{"bench", "bus", "--behaviour", "replay", "--trace", "/nonexistent/walk.trace"}, want: []string{"pose trace", "/nonexistent/walk.trace"}},
		{args: []string{"bench", "bus", "--rate", "0"}, want: []string{"rate 0"}},
		{args: []string{"bots", "pointcloud", "--session", "alice/la.b"}, want: []string{"--session", "scene"}},
		{args: []string{"bots", "pointcloud", "--bus", "nats://127.0.0.1:1", "--session", "a/b", "extra"}, want: []string{"unexpected arguments", "extra"}},
		{args: []string{"bots", "pointcloud", "--bus", "nats://127.0.0.1:1", "--session", "a/b", "--id", "4294967296"}, want: []string{"--id 4294967296"}},
		{args: []string{"bots", "pointcloud", "--bus", "nats://127.0.0.1:1", "--session", "a/b", "--points", "2"}, want: []string{"--points 2", "at least 3"}},
		{args: []string{"bots", "pointcloud", "--bus", "nats://127.0.0.1:1", "--session", "a/b", "--frames", "0"}, want: []string{"--frames 0"}},
		{args: []string{"bots", "pointcloud", "--bus", "nats://127.0.0.1:1", "--session", "a/b", "--fps", "0"}, want: []string{"--fps 0"}},
		{args: []string{"bots", "pointcloud"}, want: []string{"--session is required: the scene as NS/SCENE"}},
		{args: []string{"bench", "bus", "--ramp", "10:5"}, want: []string{`--ramp "10:5": want from:step:to (three numbers)`}},
		{args: []string{"bench", "bus", "--ramp", "10,x"}, want: []string{`"x" is not a non-negative number (want from:step:to`}},
		{args: []string{"bench", "sfu", "--setups", "foo"}, want: []string{`setup "foo" unknown`, "central, 2sfu, 4sfu"}},
		{args: []string{"bench", "sfu", "--scenarios", "3"}, want: []string{"scenario 3 unknown", "1 (everyone sends"}},
		{args: []string{"bench", "sfu", "--scenarios", "1,x"}, want: []string{"--scenarios", `"x" is not an integer`}},
		{args: []string{"bench", "sfu", "--users", "0"}, want: []string{"user count 0"}},
		{args: []string{"bench", "sfu", "--estimator", "bbr"}, want: []string{`estimator "bbr" unknown`, "gcc, hera"}},
		{args: []string{"bench", "sfu", "--phase", "late"}, want: []string{`--phase "late"`}},
		{args: []string{"bench", "rooms", "--mode", "bogus"}, want: []string{`--mode "bogus"`, "all, knn, grid"}},
		{args: []string{"bench", "rooms", "--behaviour", "flock"}, want: []string{`--behaviour "flock"`}},
		{args: []string{"bench", "rooms", "--rate", "-5"}, want: []string{"--rate -5"}},
		{args: []string{"bench", "rooms", "--mode", "grid", "--cell", "0"}, want: []string{"--cell 0"}},
		{args: []string{"bench", "rooms", "--out", filepath.Join(tmp, "none", "r.csv")}, want: []string{"bench rooms: --out: open " + filepath.Join(tmp, "none", "r.csv")}},
		{args: []string{"bench", "rooms", "--addr", "127.0.0.1:1", "--linger", "5ms", "--out", filepath.Join(tmp, "none", "r.csv")}, want: []string{"--linger 5ms", "--addr"}},
		{args: []string{"bench", "rooms", "--addr", "127.0.0.1:1", "--server-cpus", "1", "--out", filepath.Join(tmp, "none", "r.csv")}, want: []string{`--server-cpus "1"`, "--addr"}},
		{args: []string{"bench", "rooms", "--addr", "127.0.0.1:1", "--server-cpuprofile", "s.prof", "--out", filepath.Join(tmp, "none", "r.csv")}, want: []string{`--server-cpuprofile "s.prof"`, "--addr"}},
		{args: []string{"bench", "rooms", "--server-pid", "5", "--out", filepath.Join(tmp, "none", "r.csv")}, want: []string{"--server-pid 5", "--addr"}},
		{args: []string{"bench", "rooms", "--stop-mean", "-1s", "--out", filepath.Join(tmp, "none", "r.csv")}, want: []string{"--stop-mean -1s"}},
		{args: []string{"bench", "rooms", "--hold", "-1", "--out", filepath.Join(tmp, "none", "r.csv")}, want: []string{"--hold -1"}},
		{args: []string{"bench", "cc", "--algos", "cubic,cubc"}, want: []string{`unknown congestion control "cubc"`, "hera, hera-paper"}},
		{args: []string{"bench", "cc", "--algos", ""}, want: []string{"no congestion control"}},
		{args: []string{"bench", "cc", "--algos", "cubic,bbr", "--hera-args", "--bucket 4ms"}, want: []string{`--hera-args "--bucket 4ms"`, "--algos"}},
		{args: []string{"bench", "cc", "--flows", "0"}, want: []string{"--flows 0"}},
		{args: []string{"bench", "cc", "--flows", "300"}, want: []string{"--flows 300", "1 to 255"}},
		{args: []string{"sfu", "--join", "nats://127.0.0.1:1", "--id", "1", "--relay-slots", "-5"}, want: []string{"--relay-slots -5"}},
		{args: []string{"sfu", "--join", "nats://127.0.0.1:1", "--id", "1", "--rtcp-interval", "-1s"}, want: []string{"--rtcp-interval -1s"}},
		{args: []string{"sfu", "--join", "nats://127.0.0.1:1", "--id", "1", "--log-stats", "-1s"}, want: []string{"--log-stats -1s"}},
		{args: []string{"sfu", "--join", "nats://127.0.0.1:1", "--id", "1", "--public-ws", "ws://h/sfu/ws"}, want: []string{"--public-ws", "--http-addr"}},
		{args: []string{"sfu", "--join", "nats://127.0.0.1:1", "--id", "1", "--ice-addrs", "10.0.0.1,,host"}, want: []string{"--ice-addrs", `"" is not an IP address`}},
		{args: []string{"sfu", "--join", "nats://127.0.0.1:1", "--id", "1", "--ice-addrs", "10.0.0.1,host"}, want: []string{"--ice-addrs", `"host" is not an IP address`}},
		{args: []string{"cluster"}, want: []string{"usage: xrealm cluster remove-peer"}},
		{args: []string{"cluster", "remove-peer", "--token", "x"}, want: []string{"want one node name"}},
		{args: []string{"cc", "load", "hera", "--bucket", "4295s"}, want: []string{"load hera", "bucket"}},
		{args: []string{"bench", "cc", "--seeds", "one"}, want: []string{"--seeds", `"one"`}},
		{args: []string{"bench", "cc"}, want: []string{filepath.Join(noTraces, "mmwave", "UMa_a"), "--traces-dir"}},
		{args: []string{"bench", "cc", "--traces-dir", ""}, env: filepath.Join(tmp, "nowhere"), want: []string{"no traces directory at " + filepath.Join(tmp, "nowhere"), "XREALM_TRACES"}},
		{args: []string{"bots", "--no-auth", "--data", tmp, "--addr", "127.0.0.1:1"}, want: []string{"--no-auth", "--data"}},
		{args: []string{"bots", "--no-auth", "--token", "t", "--addr", "127.0.0.1:1"}, want: []string{"--no-auth", "--token"}},
		{args: []string{"bots", "--data", tmp, "--token-url", "http://h:8080", "--addr", "127.0.0.1:1"}, want: []string{"--data", "--token-url"}},
		{args: []string{"bots", "--data", tmp, "--token", "t", "--addr", "127.0.0.1:1"}, want: []string{"--data", "--token"}},
		{args: []string{"bots", "record", "--scene", "a/b", "--out", "-", "--no-auth", "--data", tmp}, want: []string{"--no-auth", "--data"}},
		{args: []string{"bots", "--rate", "0"}, want: []string{"--rate 0", "above 0"}},
		{args: []string{"bots", "--rate", "-5"}, want: []string{"--rate -5"}},
		{args: []string{"bots", "--rate", "NaN"}, want: []string{"--rate NaN"}},
		{args: []string{"bots", "--rate", "Inf"}, want: []string{"--rate +Inf"}},
		{args: []string{"bots", "--speed", "NaN"}, want: []string{"--speed NaN", "at least 0"}},
		{args: []string{"bots", "--speed", "-1"}, want: []string{"--speed -1"}},
		{args: []string{"bots", "--speed", "Inf"}, want: []string{"--speed +Inf"}},
		{args: []string{"bench", "bus", "--ramp", "0:1:9223372036854775807"}, want: []string{"--ramp", "more than 10000 values"}},
		{args: []string{"bench", "bus", "--ramp", "-10:5:20"}, want: []string{"--ramp", "from ≥ 0"}},
		{args: []string{"bench", "bus", "--ramp", "60:30"}, want: []string{`--ramp "60:30"`, "from:step:to"}},
		{args: []string{"bench", "bus", "--ramp", "0:0:0"}, want: []string{`--ramp "0:0:0"`, "step > 0"}},
		{args: []string{"bench", "bus", "--ramp", "360:30:60"}, want: []string{`--ramp "360:30:60"`, "from ≤ to"}},
		{args: []string{"bench", "bus", "--experiments", "interaction", "--python", "/bin/false"}, want: []string{"--python /bin/false cannot import arena-py", "scripts/setup.sh --test", "--python ''"}},
		{args: []string{"bench", "bus", "--experiments", "interaction", "--python", "/nonexistent/python"}, want: []string{"--python /nonexistent/python cannot import arena-py", "no such file"}},
		{args: []string{"bench", "bus", "--systems", "mosquitto"}, want: []string{"--systems mosquitto: Mosquitto is not installed", "scripts/setup.sh --test"}},
		{args: []string{"bench", "bus", "--ramp", "0"}, want: []string{"--ramp has a step of 0 users"}},
		{args: []string{"bench", "bus", "--ramp", "0:30:60"}, want: []string{"--ramp has a step of 0 users"}},
		{args: []string{"bench", "bus", "--isolation-scenes", "0,1"}, want: []string{"--isolation-scenes has a step of 0 scenes"}},
		{args: []string{"bench", "bus", "--step", "0"}, want: []string{"--step 0s"}},
		{args: []string{"bench", "bus", "--warmup", "-1s"}, want: []string{"--warmup -1s"}},
		{args: []string{"bench", "bus", "--size", "-5"}, want: []string{"--size -5"}},
		{args: []string{"bench", "bus", "--clicks", "0"}, want: []string{"--clicks 0"}},
		{args: []string{"bench", "bus", "--efficiency-users", "0"}, want: []string{"--efficiency-users 0"}},
		{args: []string{"bench", "bus", "--min-ratio", "2"}, want: []string{"--min-ratio 2"}},
		{args: []string{"bench", "cc", "--hera-args", "--max-cwnd=4294967297"}, want: []string{"--hera-args", "-max-cwnd", "4294967297"}},
		{args: []string{"cc", "load", "hera", "--delta-max", "4294967296"}, want: []string{"-delta-max", "4294967296"}},
		{args: []string{"cc", "bogus"}, want: []string{`unknown subcommand "bogus"`}},
		{args: []string{"cc", "load"}, want: []string{"name a congestion control"}},
		{args: []string{"cc", "load", "bogus"}, want: []string{`unknown congestion control "bogus"`, "hera, hera-paper"}},
		{args: []string{"cc", "unload", "bogus"}, want: []string{`unknown congestion control "bogus"`, "hera, hera-paper"}},
		{args: []string{"cc", "unload", "hera", "hera-paper"}, want: []string{"unexpected arguments"}},
		{args: []string{"netem", "--up", filepath.Join(tmp, "none"), "--down", filepath.Join(tmp, "none"), "--loss", "1"}, want: []string{"--loss 1", "[0, 1)"}},
		{args: []string{"netem", "--up", filepath.Join(tmp, "none"), "--down", filepath.Join(tmp, "none"), "--loss", "NaN"}, want: []string{"--loss NaN"}},
		{args: []string{"netem", "--up", filepath.Join(tmp, "none"), "--down", filepath.Join(tmp, "none"), "--delay", "-5ms"}, want: []string{"--delay -5ms"}},
		{args: []string{"netem", "--up", filepath.Join(tmp, "none"), "--down", filepath.Join(tmp, "none"), "--queue-packets", "-1"}, want: []string{"--queue-packets -1"}},
		{args: []string{"netem", "--up", filepath.Join(tmp, "none"), "--down", filepath.Join(tmp, "none"), "--queue-bytes", "-1"}, want: []string{"--queue-bytes -1"}},
		{args: []string{"netem", "--up", filepath.Join(tmp, "none"), "--down", filepath.Join(tmp, "none"), "--queue-packets", "10", "--queue-bytes", "15000"}, want: []string{"--queue-packets 10", "--queue-bytes 15000", "not both"}},
		{args: []string{"netem", "--up", filepath.Join(tmp, "none"), "--down", filepath.Join(tmp, "none")}, want: []string{"open trace"}},
	}
	for _, tc := range tests {
		args := tc.args
		switch {
		case len(args) > 1 && args[1] == "bus":
			args = append(append([]string{"bench", "bus"}, busOut...), args[2:]...) // a later --python wins
		case len(args) > 1 && args[1] == "sfu":
			args = append(append([]string(nil), args...), sfuOut...)
		case len(args) > 1 && args[1] == "cc":
			args = append(append([]string(nil), ccOut...), args[2:]...) // a later --traces-dir wins
			args = append([]string{"bench", "cc"}, args...)
		}
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("XREALM_TRACES", tc.env)
			var out bytes.Buffer
			if rc := Main(args, &out); rc == 0 {
				t.Fatalf("exit code 0; output %q", out.String())
			}
			msg := out.String()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not say %q", msg, w)
				}
			}
			if cmd := tc.args[0]; strings.Contains(msg, fmt.Sprintf("xrealm %s: %s:", cmd, cmd)) {
				t.Errorf("%q names the command twice", msg)
			}
			// The error starts with the command's whole name (bench rooms,
			// bots record) once: "xrealm bench rooms: --out: ...", not
			// "xrealm bench: bench rooms: ..." nor "xrealm bench: --out".
			path := commandPath(tc.args)
			if !strings.HasPrefix(msg, "xrealm "+path+": ") {
				t.Errorf("%q does not start with %q", msg, "xrealm "+path+": ")
			}
			rest := strings.TrimPrefix(msg, "xrealm "+path+": ")
			for _, again := range []string{path + ":", path + " ", strings.ReplaceAll(path, " ", "") + ":"} {
				if path != tc.args[0] && strings.HasPrefix(rest, again) {
					t.Errorf("%q names %q twice", msg, path)
				}
			}
		})
	}
}

// commandPath is the name of the command args run, with its subcommand
// for the commands that have some: "bench rooms", "bots record",
// "cluster remove-peer", "bots".
func commandPath(args []string) string {
	if len(args) > 1 {
		switch {
		case args[0] == "bench",
			args[0] == "bots" && (args[1] == "pointcloud" || args[1] == "record"),
			args[0] == "cluster" && args[1] == "remove-peer":
			return args[0] + " " + args[1]
		}
	}
	return args[0]
}

func TestBusOutNotice(t *testing.T) {
	tests := []struct {
		out, abs  string
		committed bool
		partial   []string
		want      []string
		not       []string
	}{
		{"bench/bus", "/src/xrealm/bench/bus", true, nil,
			[]string{"writing results to bench/bus (/src/xrealm/bench/bus): the committed results, which this run replaces; --out DIR writes elsewhere"}, []string{"WARNING"}},
		{"bench/bus", "/src/xrealm/bench/bus", true, []string{"without the experiments isolation", "--step 2s (the full run's: 10s)"},
			[]string{"writing results to bench/bus", "WARNING: this run is not the full benchmark (without the experiments isolation; --step 2s (the full run's: 10s))",
				"REPLACE the committed results in bench/bus", "--out DIR", "git checkout -- bench/bus"}, nil},
		// the default from outside the repository: nothing committed there
		{"bench/bus", "/tmp/bench/bus", false, []string{"without the system mosquitto"}, []string{"writing results to bench/bus (/tmp/bench/bus)\n"}, []string{"WARNING", "committed"}},
		{"/tmp/trial", "/tmp/trial", false, []string{"without the system mosquitto"}, []string{"writing results to /tmp/trial\n"}, []string{"WARNING", "committed"}},
	}
	for _, tc := range tests {
		got := busOutNotice(tc.out, tc.abs, tc.committed, tc.partial)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("busOutNotice(%q, %v, %q) = %q, does not say %q", tc.out, tc.committed, tc.partial, got, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(got, w) {
				t.Errorf("busOutNotice(%q, %v, %q) = %q, says %q", tc.out, tc.committed, tc.partial, got, w)
			}
		}
	}
}

func TestOutNotice(t *testing.T) {
	tests := []struct {
		path      string
		isDefault bool
		want      string
	}{
		{"bench/sfu/results.jsonl", true, "appending results to bench/sfu/results.jsonl (the default; --out FILE writes elsewhere)"},
		{"/tmp/r.jsonl", false, "appending results to /tmp/r.jsonl"},
	}
	for _, tc := range tests {
		if got := outNotice("appending results to", tc.path, tc.isDefault, "--out FILE"); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestNetemShell checks that netem without a command runs the user's
// shell, and that its usage says so.
func TestNetemShell(t *testing.T) {
	tests := []struct {
		args  []string
		shell string
		want  string
	}{
		{[]string{"iperf3", "-c", "10.0.0.1"}, "/bin/zsh", "iperf3 -c 10.0.0.1"},
		{nil, "/bin/zsh", "/bin/zsh"},
		{nil, "", "/bin/sh"},
	}
	for _, tc := range tests {
		got := netemCommand(tc.args, func(k string) string {
			if k == "SHELL" {
				return tc.shell
			}
			return ""
		})
		if strings.Join(got, " ") != tc.want {
			t.Errorf("netemCommand(%q) with SHELL=%q = %q, want %q", tc.args, tc.shell, got, tc.want)
		}
	}
	var b bytes.Buffer
	fs := flag.NewFlagSet("netem", flag.ContinueOnError)
	fs.SetOutput(&b)
	netemUsage(fs)
	for _, w := range []string{"[-- CMD ARGS...]", "Without CMD", "$SHELL"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("usage %q does not say %q", b.String(), w)
		}
	}
}

func TestTrimPrefix(t *testing.T) {
	base := errors.New("cc: unknown congestion control")
	tests := []struct {
		err  error
		want string
	}{
		{base, "unknown congestion control"},
		{errors.New("hera: unknown variant"), "hera: unknown variant"},
		{fmt.Errorf("wrapped: %w", base), "wrapped: cc: unknown congestion control"},
	}
	for _, tc := range tests {
		got := trimPrefix(tc.err, "cc: ")
		if got.Error() != tc.want {
			t.Errorf("trimPrefix(%q) = %q, want %q", tc.err, got, tc.want)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("trimPrefix(%q) no longer wraps it", tc.err)
		}
	}
	if trimPrefix(nil, "cc: ") != nil {
		t.Error("trimPrefix(nil) is not nil")
	}
	if !errors.Is(trimPrefix(flag.ErrHelp, "cc: "), flag.ErrHelp) {
		t.Error("help is no longer help")
	}
}

// The command recorded with results leaves out where they were written.
func TestWithoutOut(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"--out", "/tmp/x", "--ramp", "60:30:360"}, []string{"--ramp", "60:30:360"}},
		{[]string{"--ramp", "60", "-out=/tmp/x"}, []string{"--ramp", "60"}},
		{[]string{"--out"}, nil},
		{[]string{"--outage", "1"}, []string{"--outage", "1"}},
		{nil, nil},
	} {
		if got := withoutOut(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("withoutOut(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// The command recorded with results reruns as it ran: a shell splits it
// back into the same arguments.
func TestShellJoin(t *testing.T) {
	args := []string{"--systems", "mosquitto,xrealm:--write-linger=5ms", "--python", "", "--out", "/tmp/my results", "--xrealm-flags", "--a=1 --b='x' $HOME", "--ramp", "60:30:360"}
	line := shellJoin(args)
	if !strings.HasPrefix(line, "--systems mosquitto,xrealm:--write-linger=5ms --python '' ") {
		t.Errorf("shellJoin quotes what needs no quoting, or not the empty argument: %s", line)
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh:", err)
	}
	got, err := exec.Command("sh", "-c", `set -- `+line+`; for a in "$@"; do printf '[%s]\n' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, a := range args {
		fmt.Fprintf(&want, "[%s]\n", a)
	}
	if string(got) != want.String() {
		t.Errorf("sh reads %s back as\n%s\nwant\n%s", line, got, want.String())
	}
}

// TestFormatInts checks that the flags' defaults, written by formatInts,
// read back as the benchmark's defaults, so that `xrealm bench bus`
// without flags is the committed run.
func TestFormatInts(t *testing.T) {
	d := benchbus.Defaults()
	for _, v := range [][]int{d.Ramp, d.IsolationRamp, d.IsolationScene, d.SecurityUsers, d.InteractionBG,
		{1}, {3, 7}, {5, 5, 5}, {10, 20, 40}, {0, 50, 100}} {
		s := formatInts(v)
		got, err := parseInts("--x", s)
		if err != nil || !slices.Equal(got, v) {
			t.Errorf("formatInts(%v) = %q, which reads back as %v (%v)", v, s, got, err)
		}
	}
	if got := formatInts(d.IsolationRamp); got != "100:50:2000" {
		t.Errorf("the isolation ramp's default reads %q, want 100:50:2000", got)
	}
}

// TestBusRunError checks what bench bus says when a run stops early: on
// Ctrl-C, not only "context canceled" but whether the steps measured were
// written, and where.
func TestBusRunError(t *testing.T) {
	some := &benchbus.Results{Rows: make([]benchbus.Row, 3), Interaction: make([]benchbus.Interaction, 1)}
	tests := []struct {
		err         error
		interrupted bool
		res         *benchbus.Results
		want        string
	}{
		{context.Canceled, true, some, "interrupted: the 4 measurements made until then are in /tmp/o (RESULTS.md, results.json and the plots)"},
		{context.Canceled, true, nil, "interrupted: nothing was measured, and nothing written"},
		{context.Canceled, true, &benchbus.Results{}, "interrupted: nothing was measured, and nothing written"},
		{errors.New("start mosquitto: no such file"), false, some, "start mosquitto: no such file\n(the 4 measurements made until then are in /tmp/o"},
	}
	for _, tc := range tests {
		got := busRunError(tc.err, tc.interrupted, tc.res, "/tmp/o")
		if !strings.Contains(got.Error(), tc.want) {
			t.Errorf("busRunError(%v, %v) = %q, want %q", tc.err, tc.interrupted, got, tc.want)
		}
		if !tc.interrupted && !errors.Is(got, tc.err) {
			t.Errorf("busRunError(%v) no longer wraps it", tc.err)
		}
	}
}

// TestBenchSFUNamesMissingTools: without iproute2, bench sfu names the
// package and how to install it, before anything starts, not "ip netns
// list: exec: "ip": executable file not found" after building its clip.
// (Without root it says it needs root first.)
func TestBenchSFUNamesMissingTools(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("PATH", tmp)
	var out bytes.Buffer
	args := []string{"bench", "sfu", "--users", "2", "--out", filepath.Join(tmp, "r.jsonl"), "--clip-dir", tmp, "--log-dir", tmp}
	if rc := Main(args, &out); rc == 0 {
		t.Fatalf("exit code 0; output %q", out.String())
	}
	want := "ip not found: it needs iproute2's ip and tc (scripts/setup-sfu.sh"
	if os.Geteuid() != 0 {
		want = "needs root"
	}
	if !strings.Contains(out.String(), want) {
		t.Errorf("%q does not say %q", out.String(), want)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		t.Errorf("it wrote %v before refusing", ents)
	}
}

// TestInterruptedError: Main prints these as "xrealm bench cc:
// interrupted: ...", the bench named once, so they do not name it again
// ("bench cc interrupted") after Main's "xrealm bench cc: ".
func TestInterruptedError(t *testing.T) {
	tests := []struct {
		n    int
		want string
	}{
		{0, "cc: interrupted before a run finished; nothing was written to /o/results.jsonl"},
		{1, "cc: interrupted: 1 run finished, in /o/results.jsonl (the run under way is not recorded)"},
		{5, "cc: interrupted: 5 runs finished, in /o/results.jsonl (the run under way is not recorded)"},
	}
	for _, tc := range tests {
		if got := inSubcommand("bench", "cc", interruptedError(tc.n, "run", "/o/results.jsonl")).Error(); got != tc.want {
			t.Errorf("interruptedError(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestBenchRoomsInterrupted interrupts bench rooms against a real room
// server in this process after a few windows: it says it was interrupted,
// how many windows finished and where they are, and the CSV holds them,
// not only "context canceled".
func TestBenchRoomsInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a room server")
	}
	addr, _ := startRoomsServe(t)
	var err error
	csvPath := filepath.Join(t.TempDir(), "rooms.csv")
	ctx, cancel := context.WithCancel(t.Context())
	// The interruption comes after some windows of 200 ms (how many does
	// not matter: the error and the CSV must agree).
	time.AfterFunc(1500*time.Millisecond, cancel)
	err = runBenchRooms(ctx, []string{"--addr", addr, "--server-pid", strconv.Itoa(os.Getpid()), "--max", "3", "--ramp", "50ms", "--window", "200ms", "--hold", "1000", "--rate", "10", "--out", csvPath})
	if err == nil || !strings.HasPrefix(err.Error(), "interrupted: ") || !strings.Contains(err.Error(), csvPath) {
		t.Fatalf("bench rooms: %v, want the interruption and where its windows are", err)
	}
	b, rerr := os.ReadFile(csvPath)
	if rerr != nil {
		t.Fatal(rerr)
	}
	rows := strings.Count(string(b), "\n") - 1 // the header
	if !strings.Contains(err.Error(), fmt.Sprintf(": %d window", rows)) {
		t.Errorf("%q does not count the %d windows of the CSV", err, rows)
	}
}

// TestBenchBusHelpNamesSystems: the help of --systems names every system
// the bench accepts, xrealm-insecure included.
func TestBenchBusHelpNamesSystems(t *testing.T) {
	var out bytes.Buffer
	stderr := os.Stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	os.Stderr = w
	Main([]string{"bench", "bus", "-h"}, &out)
	os.Stderr = stderr
	w.Close()
	var help bytes.Buffer
	help.ReadFrom(r)
	for _, s := range []string{"xrealm,", "mosquitto,", "xrealm-insecure", "xrealm:SERVE-FLAGS", "xrealm@EXECUTABLE"} {
		if !strings.Contains(help.String(), s) {
			t.Errorf("bench bus -h does not name %q:\n%s", s, help.String())
		}
	}
}

// bench rooms with --addr where no room server listens names the flag,
// not only "bot 0: ubiq dial …: connection refused".
func TestBenchRoomsAddrRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	err = runBenchRooms(t.Context(), []string{"--addr", addr, "--server-pid", strconv.Itoa(os.Getpid()), "--max", "2", "--window", "200ms"})
	if err == nil || !strings.Contains(err.Error(), addr+" (--addr)") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("bench rooms against nothing: %v, want the refusal and --addr named", err)
	}
}

// A bench rooms that fails before its first window leaves the --out of an
// earlier run as it was. It fails if the file is truncated at the start:
// a run that then cannot reach its server loses the last one's results.
func TestBenchRoomsKeepsOutOnFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	old := filepath.Join(dir, "old.csv")
	if err := os.WriteFile(old, []byte("t_s,peers\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, "fresh.csv")
	for _, out := range []string{old, fresh} {
		err := runBenchRooms(t.Context(), []string{"--addr", addr, "--max", "2", "--window", "200ms", "--out", out})
		if err == nil || !strings.Contains(err.Error(), "(--addr)") {
			t.Fatalf("bench rooms against nothing: %v", err)
		}
	}
	if b, err := os.ReadFile(old); err != nil || string(b) != "t_s,peers\n1,2\n" {
		t.Errorf("the earlier --out holds %q (%v), want it as it was", b, err)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a new --out with no window in it was left behind: %v", err)
	}
}

// A bench rooms whose room server goes away once every bot has joined
// ends with an error saying so: it went on printing empty windows for
// ever (a window with no latency never counted towards --hold).
func TestBenchRoomsServerGone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a room server")
	}
	addr, stopServer := startRoomsServe(t)
	var err error
	csvPath := filepath.Join(t.TempDir(), "rooms.csv")
	// A guard, not a measure: the bench must end by itself long before.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runBenchRooms(ctx, []string{"--addr", addr, "--max", "2", "--ramp", "50ms", "--window", "100ms", "--hold", "1000000", "--rate", "10", "--out", csvPath})
	}()
	// The server stops once the CSV has a window with both bots.
	for {
		b, _ := os.ReadFile(csvPath)
		if strings.Contains(string(b), "\n") && strings.Contains(string(b)[strings.Index(string(b), "\n"):], ",2.000,") {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("bench rooms ended before the server stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stopServer()
	err = <-done
	if ctx.Err() != nil {
		t.Fatal("bench rooms did not end when its room server went away")
	}
	if err == nil || !strings.Contains(err.Error(), "all 2 bots were disconnected") || !strings.Contains(err.Error(), csvPath) {
		t.Fatalf("bench rooms: %v, want every bot disconnected and where the windows are", err)
	}
	// --addr without --server-pid: the server's CPU is unknown, not 0.
	b, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	col := slices.Index(strings.Split(lines[0], ","), "server_cpu")
	for _, l := range lines[1:] {
		if c := strings.Split(l, ",")[col]; c != "NaN" {
			t.Errorf("server_cpu %q in %q, want NaN (unknown without --server-pid)", c, l)
		}
	}
	if got := cpuCell(math.NaN()); got != "unknown" {
		t.Errorf("cpuCell(NaN) = %q, want unknown", got)
	}
}

// TestSummaryRefusesOtherFlags runs bench cc and bench sfu with --summary
// and a flag that only a run reads: the summary only prints the tables
// of its results file (and bench sfu its plots), so the flag would be
// ignored; it is refused as a usage error naming it, before the results
// file is read (it does not exist here) and nothing is written.
func TestSummaryRefusesOtherFlags(t *testing.T) {
	tmp := t.TempDir()
	results := filepath.Join(tmp, "results.jsonl")
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"bench", "cc", "--summary", results, "--algos", "cubic"}, []string{"--algos", "--summary"}},
		{[]string{"bench", "cc", "--duration", "5s", "--summary", results, "--out", tmp}, []string{"--duration", "--out"}},
		{[]string{"bench", "cc", "--summary", results, "--qoe"}, []string{"--qoe"}},
		{[]string{"bench", "sfu", "--summary", results, "--users", "8"}, []string{"--users", "--summary"}},
		{[]string{"bench", "sfu", "--summary", results, "--setups", "central", "--phase", "aligned"}, []string{"--setups", "--phase"}},
		{[]string{"bench", "sfu", "--summary", results, "--role", "bus"}, []string{"--role"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			if rc := Main(tc.args, &out); rc != 2 {
				t.Fatalf("exit code %d, want 2; output %q", rc, out.String())
			}
			msg := out.String()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not say %q", msg, w)
				}
			}
			if strings.Contains(msg, results) && strings.Contains(msg, "no such file") {
				t.Errorf("%q: the results were read before the flags were checked", msg)
			}
		})
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("%s holds %d entries, want none", tmp, len(entries))
	}
}

// bench sfu's private copy of the binary is named with its pid, and the
// next copy removes the one of a bench that is gone (a second Ctrl-C or a
// crash left it in the temporary directory for ever).
func TestPrivateCopyRemovesStale(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(tmp, fmt.Sprintf("xrsfu-xrealm-pid%d-1", cmd.Process.Pid))
	if err := os.WriteFile(stale, []byte("old binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := privateCopy()
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(exe)
	if want := fmt.Sprintf("xrsfu-xrealm-pid%d-", os.Getpid()); !strings.HasPrefix(filepath.Base(exe), want) {
		t.Errorf("copy %s, want it named %s...", exe, want)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the copy of an ended bench %s is still there (%v)", stale, err)
	}
}

// startRoomsServe runs `bench rooms serve` on a free loopback port in this
// process until the test ends, or until the returned stop is called, and
// returns its address once it listens.
func startRoomsServe(t *testing.T) (addr string, stop context.CancelFunc) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	l.Close()
	sctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- runRoomsServe(sctx, []string{"--listen", addr}) }()
	t.Cleanup(func() { stop(); <-served })
	if err := waitListening(t.Context(), addr); err != nil {
		t.Fatal(err)
	}
	return addr, stop
}
