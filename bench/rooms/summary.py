#!/usr/bin/env python3
"""Prints a Markdown table summarising every bench/rooms/*.csv (and the
capacity and load-average lines of the matching .txt)."""
import csv, glob, os

here = os.path.dirname(os.path.abspath(__file__))
print("| run | p99 <= 100 ms up to | mean <= 500 ms up to | peak delivered msg/s (peers) | sent/s there (of 60 or 10 x peers) | deliveries per pose there | MB/s there | server CPU there | bots CPU there | server µs CPU per delivered msg (median) | bots µs CPU per delivered msg (median) | load avg before / after | stolen CPU, median / max of the windows | flock ext m / polar / collisions (last window) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(here, "*.csv"))):
    name = os.path.basename(path)[:-4]
    rows = list(csv.DictReader(open(path)))
    if not rows:
        continue
    txt = path[:-4] + ".txt"
    lines = open(txt).read().splitlines() if os.path.exists(txt) else []
    cap = next((l for l in lines if l.startswith("# capacity")), "")
    load = [l.split(":", 1)[1].split()[0] for l in lines if l.startswith("# load ")]
    rate = 10 if "10hz" in name else 60
    p99 = mean = "?"
    if cap:
        parts = cap.split(";")
        p99 = parts[0].split("up to")[1].split("peers")[0].strip()
        mean = parts[1].split("up to")[1].split("peers")[0].strip()
    best = max(rows, key=lambda r: float(r["recv_per_s"]))
    def med(col):
        v = sorted(float(r[col]) / float(r["recv_per_s"]) * 1e6 for r in rows if float(r["recv_per_s"]) > 1000 and float(r[col]) > 0.05)
        return v[len(v) // 2] if v else 0
    last = rows[-1]
    steal = "not recorded"
    if "steal_cpu" in rows[0]:
        st = sorted(float(r["steal_cpu"]) for r in rows)
        steal = f"{st[len(st) // 2]:.2f} / {st[-1]:.2f}"
    sent, recv = float(best["sent_per_s"]), float(best["recv_per_s"])
    print(f"| {name} | {p99} | {mean} | {recv:,.0f} ({float(best['peers']):.0f}) | {sent:,.0f} ({rate * float(best['peers']):,.0f}) | {recv / sent if sent else 0:.1f} | "
          f"{float(best['recv_bytes_per_s'])/1e6:.0f} | {float(best['server_cpu']):.2f} | {float(best['bench_cpu']):.2f} | {med('server_cpu'):.2f} | {med('bench_cpu'):.2f} | "
          f"{' / '.join(load) if load else '?'} | {steal} | {float(last['extension_m']):.0f} / {float(last['polarisation']):.2f} / {float(last['collisions']):.0f} |")
