"""What a trace's gaps alone cost a sender that does not react: a constant
bit rate R into the trace (Mahimahi format, 1500-byte opportunities) and a
drop-tail queue of 1000 packets, in 1 ms steps, first 2 s dropped. Prints
throughput and p95 queueing delay per rate (bench/cc/RESULTS.md, "Why the
bursty traces fail").
Usage: [RATES=60,90,100] [DUR=60000] python3 cbr.py TRACE [TRACE...]"""
import collections
import os
import sys


def run(trace, rate_mbps, dur_ms, qlim=1000):
    period, opp, base = trace[-1], collections.Counter(), 0
    while base < dur_ms:
        for t in trace:
            if base + t < dur_ms:
                opp[base + t] += 1
        base += period
    per_ms = rate_mbps * 1e6 / 8 / 1500 / 1000
    q, acc, delivered, delays = collections.deque(), 0.0, 0, []
    for ms in range(dur_ms):
        acc += per_ms
        while acc >= 1:
            acc -= 1
            if len(q) < qlim:
                q.append(ms)
        for _ in range(opp.get(ms, 0)):
            if q:
                enq = q.popleft()
                if ms >= 2000:
                    delays.append(ms - enq)
                    delivered += 1
    delays.sort()
    p95 = delays[int(0.95 * len(delays))] if delays else 0
    return delivered * 1500 * 8 / ((dur_ms - 2000) / 1000) / 1e6, p95


def main():
    rates = [float(x) for x in os.environ.get("RATES", "60,90,100").split(",")]
    dur = int(os.environ.get("DUR", "60000"))
    for path in sys.argv[1:]:
        trace = [int(l) for l in open(path) if l.strip()]
        cells = ["%g: %.0f Mbit/s p95 %d ms" % ((r,) + run(trace, r, dur)) for r in rates]
        print(os.path.basename(path), " | ".join(cells))


if __name__ == "__main__":
    main()
