#!/bin/bash
# Session 19: read system calls of the Ubiq relay and of the bots at a fixed
# rooms load, counted by perf's syscall tracepoints (no ptrace, unlike
# strace, which would slow a 15,000-frames-a-second server down).
#
# usage: syscalls.sh LABEL BINARY PORT OUTDIR
#   e.g. for i in 1 2 3; do syscalls.sh before-$i /tmp/xrealm-A 18021 out
#                           syscalls.sh after-$i  /tmp/xrealm-B 18022 out; done
# Writes OUTDIR/LABEL.{csv,txt} (the bench), LABEL-perf.txt (the server's
# counts over 10 s, from 14 s after the bots started: all 250 have joined by
# then) and LABEL-botsperf.txt (the bots' counts over the same 10 s).
# sys_exit_read filtered on ret == -11 counts the reads that returned EAGAIN.
set -u
label=$1 bin=$2 port=$3 out=$4
N=${N:-250}
$bin bench rooms serve --listen 127.0.0.1:$port --linger 20ms >$out/$label-serve.log 2>&1 &
spid=$!
sleep 1
$bin bench rooms --addr 127.0.0.1:$port --server-pid $spid --mode knn --behaviour randomwalk --rate 60 --size 500 \
  --max $N --ramp 10ms --hold 5 --window 5s --out $out/$label.csv >$out/$label.txt 2>&1 &
bpid=$!
sleep 14
events=(-e 'syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_epoll_pwait' -e 'syscalls:sys_exit_read' --filter 'ret == -11')
perf stat -x, "${events[@]}" -p $spid --timeout 10000 2>$out/$label-perf.txt &
perf stat -x, "${events[@]}" -p $bpid --timeout 10000 2>$out/$label-botsperf.txt
wait %3 2>/dev/null
wait $bpid
kill $spid
wait $spid 2>/dev/null
