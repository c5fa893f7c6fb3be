#!/usr/bin/env python3
"""Prints a Markdown table summarising every bench/rooms/*.csv (and the
capacity lines of the matching .txt)."""
import csv, glob, os

here = os.path.dirname(os.path.abspath(__file__))
print("| run | p99 <= 100 ms up to | mean <= 500 ms up to | peak delivered msg/s (peers) | MB/s there | server CPU there | delivered msg per server CPU-s (median) | bots CPU there | flock ext m / polar / collisions (last window) |")
print("|---|---|---|---|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(here, "*.csv"))):
    name = os.path.basename(path)[:-4]
    rows = list(csv.DictReader(open(path)))
    if not rows:
        continue
    cap = open(path[:-4] + ".txt").read().strip().splitlines()[-1] if os.path.exists(path[:-4] + ".txt") else ""
    p99 = mean = "?"
    if cap.startswith("# capacity"):
        parts = cap.split(";")
        p99 = parts[0].split("up to")[1].split("peers")[0].strip()
        mean = parts[1].split("up to")[1].split("peers")[0].strip()
    best = max(rows, key=lambda r: float(r["recv_per_s"]))
    eff = sorted(float(r["recv_per_s"]) / float(r["server_cpu"]) for r in rows if float(r["server_cpu"]) > 0.05)
    med = eff[len(eff) // 2] if eff else 0
    last = rows[-1]
    print(f"| {name} | {p99} | {mean} | {float(best['recv_per_s']):,.0f} ({float(best['peers']):.0f}) | {float(best['recv_bytes_per_s'])/1e6:.0f} | {float(best['server_cpu']):.2f} | {med:,.0f} | {float(best['bench_cpu']):.2f} | {float(last['extension_m']):.0f} / {float(last['polarisation']):.2f} / {float(last['collisions']):.0f} |")
