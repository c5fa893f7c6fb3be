#!/bin/sh
# Reproduces bench/rooms/RESULTS.md on one machine (server and bots share it).
# Usage: bench/rooms/run.sh [xrealm binary]   (writes bench/rooms/*.csv and *.txt)
set -e
X=${1:-./xrealm}
D=$(dirname "$0")
run() { name=$1; shift; "$X" bench rooms --out "$D/$name.csv" "$@" | tee "$D/$name.txt"; }
run all-randomwalk-60hz  --mode all  --behaviour randomwalk --rate 60 --size 500 --ramp 500ms --max 200 --window 5s
run knn-randomwalk-60hz  --mode knn  --behaviour randomwalk --rate 60 --size 500 --ramp 200ms --max 400 --window 5s
run knn-boids-60hz       --mode knn  --behaviour boids      --rate 60 --size 500 --ramp 200ms --max 400 --window 5s
run grid-randomwalk-60hz --mode grid --behaviour randomwalk --rate 60 --size 500 --ramp 200ms --max 400 --window 5s
run knn-randomwalk-10hz  --mode knn  --behaviour randomwalk --rate 10 --size 1   --ramp 100ms --max 1100 --window 5s
