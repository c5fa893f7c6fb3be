#!/usr/bin/env bash
# syscalls.sh XREALM USERS SCENES
#
# The server's read system calls per publish it receives, and its write
# calls a second, counted by the kernel (syscr and syscw of /proc/PID/io)
# over 5 s of a fixed load (`xrealm bots --no-auth`), against the server's
# xrealm_mqtt_messages_in_total. For NOTES.md, session 13.
set -euo pipefail
X=$1 U=$2 S=$3
if ss -ltn | grep -q ':1883 '; then
	echo "port 1883 is taken: stop the server that listens there first" >&2
	exit 1
fi
data=$(mktemp -d)
SP=
trap 'if [ -n "$SP" ]; then kill -INT "$SP" 2>/dev/null; fi; rm -rf "$data"' EXIT
"$X" serve --insecure --data "$data/srv" >"$data/serve.log" 2>&1 &
SP=$!
for _ in $(seq 50); do curl -sf localhost:8080/healthz >/dev/null 2>&1 && break; sleep 0.2; done
"$X" bots --no-auth --users "$U" --scenes "$S" --duration 16s >"$data/bots.log" 2>&1 &
BP=$!
io() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/io"; }
msgs() { curl -s localhost:8080/metrics | awk '/^xrealm_mqtt_messages_in_total /{print $2}'; }
sleep 8
r0=$(io $SP syscr) w0=$(io $SP syscw) m0=$(msgs)
sleep 5
r1=$(io $SP syscr) w1=$(io $SP syscw) m1=$(msgs)
wait $BP
kill -INT $SP
wait $SP || true
SP=
python3 -c "print('server: %.2f reads per publish received, %.0f writes a second' % (($r1 - $r0) / ($m1 - $m0), ($w1 - $w0) / 5))"
