#!/bin/sh
# Reproduces bench/rooms/RESULTS.md on one machine (server and bots share it).
# Usage: bench/rooms/run.sh [xrealm binary] [group...]
#   groups: base (Ubiq's Node relay, if UBIQ_NODE is set, then the xrealm
#   baseline), baseboids (the baseline with boids), knn (kNN randomwalk at 60 Hz), knn5 (the same with a 5 ms
#   linger, for comparison), boids (kNN boids at 60 Hz), grid (hex grid at
#   60 Hz), gridboids (hex grid with boids), grid30 and grid40 (the same with a 30 or 40 ms linger), knn10 (kNN randomwalk
#   at 10 Hz), boids10 (kNN boids at
#   10 Hz), profgrid and profboids10 (profiled runs held near the limit,
#   profiles in $PROF); default: all but knn5 and the profiled ones. Writes
#   bench/rooms/*.csv and *.txt.
# Each group holds /tmp/xrealm-bench.lock while it measures, and every .txt
# records the load average before and after its run.
# RAMP (default 1.5s, as issue #4 asks) is the time between two bots;
# MAX60 (default 350) and MAX10 (default 1050) the fleets of the kNN and
# grid groups at 60 and 10 Hz.
# LINGER (default 20ms) is the relay's write linger (the bench's child
# server's --linger; `xrealm serve --ubiq-write-linger`), LINGER10
# (default 40ms) the one of the 10 Hz group.
# PIN=1 pins the bots to CPU 0 and the server to CPU 1 (taskset), and adds
# -pinned to the run names. NICE=-10 runs bots and server at that
# niceness (as root), in a session of their own whose autogroup gets the
# same nice, so that jobs outside the lock (builds, tests) cannot take
# their cores. UBIQ_NODE is a Ubiq checkout's Node/ directory
# (after npm install) for the side-by-side row.
set -e
D=$(cd "$(dirname "$0")" && pwd)
if [ "$1" = "--locked" ]; then # internal: one group, under the lock
	X=$2 G=$3
else
	X=$(realpath "${1:-./xrealm}")
	[ $# -gt 0 ] && shift
fi
LOCK=/tmp/xrealm-bench.lock
RAMP=${RAMP:-1.5s}
MAX60=${MAX60:-350}
MAX10=${MAX10:-1050}
LINGER=${LINGER:-20ms}
LINGER10=${LINGER10:-40ms}
SUFFIX="" BOTS="" PINSRV=""
if [ "$PIN" = 1 ]; then
	SUFFIX=-pinned BOTS="taskset -c 0" PINSRV="--server-cpus 1"
fi
if [ -n "$NICE" ]; then
	BOTS="nice -n $NICE $BOTS"
fi
UBIQ_PORT=${UBIQ_PORT:-18109}

run() {
	name=$1$SUFFIX
	shift
	{
		echo "# load before: $(cat /proc/loadavg)"
		echo "# binary: $X, built $(date -u -r "$X" +%FT%TZ); pinned: ${PIN:-0}; nice: ${NICE:-0}"
		# A session of its own (setsid), so that NICE can also be given to
		# its autogroup: with autogroups on, nice alone only ranks
		# processes of the same session, and other sessions' jobs got as
		# much CPU as bots and server together (round 4).
		setsid $BOTS "$X" bench rooms --out "$D/$name.csv" $PINSRV "$@" 2>"/tmp/rooms-$name.log" &
		pid=$!
		# setsid may not have made the new session yet: wait for it, or
		# the nice would go to this shell's autogroup.
		i=0
		while [ "$(ps -o sid= -p $pid | tr -d ' ')" != "$pid" ] && [ $i -lt 100 ]; do
			sleep 0.01
			i=$((i + 1))
		done
		if [ -n "$NICE" ] && [ -w /proc/$pid/autogroup ]; then
			echo "$NICE" >/proc/$pid/autogroup 2>/dev/null || true
			echo "# autogroup: $(cat /proc/$pid/autogroup 2>/dev/null)"
		fi
		wait $pid || echo "# bench failed: $(tail -1 "/tmp/rooms-$name.log")"
		echo "# load after: $(cat /proc/loadavg)"
		echo "# server and bench log lines (in /tmp/rooms-$name.log): $(wc -l <"/tmp/rooms-$name.log")"
	} | tee "$D/$name.txt"
}

group_base() {
	if [ -n "$UBIQ_NODE" ]; then
		cfg=$(mktemp /tmp/ubiq-node-XXXXXX.json)
		p=$UBIQ_PORT
		echo "{\"roomserver\":{\"tcp\":{\"port\":$p},\"wss\":{\"port\":$((p + 1)),\"cert\":\"./cert.pem\",\"key\":\"./key.pem\"}},\"status\":{\"port\":$((p + 2)),\"cert\":\"./cert.pem\",\"key\":\"./key.pem\",\"apikeys\":[]}}" >"$cfg"
		cd "$UBIQ_NODE"
		env TS_NODE_TRANSPILE_ONLY=true node --loader ts-node/esm app.ts "$cfg" >/tmp/ubiq-node-relay.log 2>&1 &
		pid=$!
		cd - >/dev/null
		sleep 8
		kill -0 "$pid" # the relay must be up (a busy port stops it)
		run ubiq-node-all-randomwalk-60hz --addr 127.0.0.1:$p --server-pid "$pid" \
			--mode all --behaviour randomwalk --rate 60 --size 500 --ramp "$RAMP" --max 200 --window 5s
		kill "$pid" || true
		rm -f "$cfg"
	fi
	run all-randomwalk-60hz --mode all --behaviour randomwalk --rate 60 --size 500 --ramp "$RAMP" --max 200 --window 5s --linger "$LINGER"
}

group_baseboids() {
	run all-boids-60hz --mode all --behaviour boids --rate 60 --size 500 --ramp "$RAMP" --max 200 --window 5s --linger "$LINGER"
}

group_knn() {
	run knn-randomwalk-60hz --mode knn --behaviour randomwalk --rate 60 --size 500 --ramp "$RAMP" --max "$MAX60" --window 5s --linger "$LINGER"
}

group_knn5() {
	run knn-randomwalk-60hz-linger5ms --mode knn --behaviour randomwalk --rate 60 --size 500 --ramp "$RAMP" --max "$MAX60" --window 5s --linger 5ms
}

group_boids() {
	run knn-boids-60hz --mode knn --behaviour boids --rate 60 --size 500 --ramp "$RAMP" --max "$MAX60" --window 5s --linger "$LINGER"
}

group_grid() {
	run grid-randomwalk-60hz --mode grid --behaviour randomwalk --rate 60 --size 500 --ramp "$RAMP" --max "$MAX60" --window 5s --linger "$LINGER"
}

group_gridboids() {
	run grid-boids-60hz --mode grid --behaviour boids --rate 60 --size 500 --ramp "$RAMP" --max "$MAX60" --window 5s --linger "$LINGER"
}

group_grid30() {
	run grid-randomwalk-60hz-linger30ms --mode grid --behaviour randomwalk --rate 60 --size 500 --ramp "$RAMP" --max "$MAX60" --window 5s --linger 30ms
}

group_grid40() {
	run grid-randomwalk-60hz-linger40ms --mode grid --behaviour randomwalk --rate 60 --size 500 --ramp "$RAMP" --max "$MAX60" --window 5s --linger 40ms
}

group_knn10() {
	run knn-randomwalk-10hz --mode knn --behaviour randomwalk --rate 10 --size 1 --ramp "$RAMP" --max "$MAX10" --window 5s --linger "$LINGER10"
}

group_boids10() {
	run knn-boids-10hz --mode knn --behaviour boids --rate 10 --size 1 --ramp "$RAMP" --max "$MAX10" --window 5s --linger "$LINGER10"
}

# Profiled runs (bots' and server's CPU profiles in $PROF, default /tmp):
# the ramp stops near the failing point and holds there for 30 s.
PROF=${PROF:-/tmp}

group_profgrid() {
	run prof-grid-randomwalk-60hz --mode grid --behaviour randomwalk --rate 60 --size 500 --ramp 200ms --max 280 --hold 6 --window 5s --linger "$LINGER" \
		--cpuprofile "$PROF/grid-bots.prof" --server-cpuprofile "$PROF/grid-srv.prof"
}

group_profboids10() {
	run prof-knn-boids-10hz --mode knn --behaviour boids --rate 10 --size 1 --ramp 100ms --max 1000 --hold 6 --window 5s --linger "$LINGER10" \
		--cpuprofile "$PROF/boids10-bots.prof" --server-cpuprofile "$PROF/boids10-srv.prof"
}

if [ -n "$G" ]; then
	"group_$G"
	exit
fi
for g in ${*:-base baseboids knn boids grid gridboids knn10 boids10}; do
	flock -o "$LOCK" "$0" --locked "$X" "$g"
done
