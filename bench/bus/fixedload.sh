#!/usr/bin/env bash
# fixedload.sh XREALM USERS SCENES [SERVE FLAGS...]
#
# One fixed load for the notes (NOTES.md): a fresh `xrealm serve --insecure`
# on the default ports, `xrealm bots --no-auth` for 22 s, and from second 8
# to 18 the CPU of both processes (from /proc), the server's write and
# message counters (from /metrics) and its write budget's state; p50 and p99
# are the medians of the bots' per-second progress lines over that window.
# BOTS, if set, is the binary that runs the bots (to compare servers with
# one generator). The full benchmark is `xrealm bench bus`; this is for
# quick A/B checks.
set -euo pipefail
X=$1 U=$2 S=$3
B=${BOTS:-$1}
shift 3
if ss -ltn | grep -q ':1883 '; then
	echo "port 1883 is taken: stop the server that listens there first" >&2
	exit 1
fi
data=$(mktemp -d)
SP=
trap 'if [ -n "$SP" ]; then kill -INT "$SP" 2>/dev/null; fi; rm -rf "$data"' EXIT
"$X" serve --insecure --data "$data/srv" "$@" >"$data/serve.log" 2>&1 &
SP=$!
for _ in $(seq 50); do curl -sf localhost:8080/healthz >/dev/null 2>&1 && break; sleep 0.2; done
"$B" bots --no-auth --users "$U" --scenes "$S" --duration 22s >"$data/bots.log" 2>&1 &
BP=$!
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
met() { curl -s localhost:8080/metrics | awk '/^xrealm_mqtt_(lingering_writes|messages_in|messages_out)_total /{printf "%s ", $2}'; }
sleep 8
s0=$(cpu $SP) b0=$(cpu $BP) t0=$(date +%s.%N) m0=$(met)
sleep 10
s1=$(cpu $SP) b1=$(cpu $BP) t1=$(date +%s.%N) m1=$(met)
state=$(curl -s localhost:8080/metrics | awk '/^xrealm_mqtt_write_(linger_stretch|budget_boost) /{printf "%s=%.2f ", $1, $2}')
wait $BP
kill -INT $SP
wait $SP || true
SP=
python3 - "$s0" "$s1" "$b0" "$b1" "$t0" "$t1" "$(getconf CLK_TCK)" "$m0" "$m1" "$data/bots.log" "$state" <<'PY'
import re, statistics, sys
s0, s1, b0, b1, t0, t1, hz, m0, m1, log, state = sys.argv[1:]
dt, hz = float(t1) - float(t0), float(hz)
w, i, o = [(float(b) - float(a)) / dt for a, b in zip(m0.split(), m1.split())]
unit = {"µs": 1e-3, "ms": 1, "s": 1e3}
p50, p99 = [], []
for line in open(log):
    for name, out in (("p50", p50), ("p99", p99)):
        m = re.search(name + r" ([\d.]+)(µs|ms|s)\b", line)
        if m:
            out.append(float(m.group(1)) * unit[m.group(2)])
mid = lambda v: statistics.median(v[7:18]) if len(v) > 18 else float("nan")
print(f"server {(int(s1) - int(s0)) / hz / dt:.2f} cores, bots {(int(b1) - int(b0)) / hz / dt:.2f} cores; "
      f"writes {w:.0f}/s, messages in {i:.0f}/s, out {o:.0f}/s; p50 {mid(p50):.1f} ms, p99 {mid(p99):.1f} ms; {state}")
PY
