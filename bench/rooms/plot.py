#!/usr/bin/env python3
"""Plots p99 and mean latency against peers for every bench/rooms/*.csv
as bench/rooms/latency.svg (plain SVG, no plotting library needed)."""
import csv, glob, math, os, sys

here = os.path.dirname(os.path.abspath(__file__))
runs = []
for path in sorted(glob.glob(os.path.join(here, "*.csv"))):
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if float(r["p99_ms"]) > 0]
    if rows:
        runs.append((os.path.basename(path)[:-4], rows))
if not runs:
    sys.exit("no CSV files")

W, H, L, R, T, B = 960, 520, 70, 290, 30, 50
maxp = max(float(r["peers"]) for _, rows in runs for r in rows)
maxp = math.ceil(maxp / 100) * 100
ylo, yhi = 0.1, 10000.0  # ms, log scale

def x(p): return L + (W - L - R) * p / maxp
def y(ms):
    ms = min(max(ms, ylo), yhi)
    return T + (H - T - B) * (1 - (math.log10(ms) - math.log10(ylo)) / (math.log10(yhi) - math.log10(ylo)))

colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f", "#bcbd22", "#e377c2", "#000000", "#aec7e8"]
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>']
for ms in [0.1, 1, 10, 100, 1000, 10000]:
    out.append(f'<line x1="{L}" x2="{W-R}" y1="{y(ms):.1f}" y2="{y(ms):.1f}" stroke="#ddd"/>')
    out.append(f'<text x="{L-6}" y="{y(ms)+4:.1f}" text-anchor="end">{ms:g}</text>')
for p in range(0, int(maxp) + 1, max(50, int(maxp) // 10 // 50 * 50)):
    out.append(f'<line x1="{x(p):.1f}" x2="{x(p):.1f}" y1="{T}" y2="{H-B}" stroke="#eee"/>')
    out.append(f'<text x="{x(p):.1f}" y="{H-B+16}" text-anchor="middle">{p}</text>')
out.append(f'<line x1="{L}" x2="{W-R}" y1="{y(100):.1f}" y2="{y(100):.1f}" stroke="#000" stroke-dasharray="4 3"/>')
out.append(f'<text x="{W-R-4}" y="{y(100)-4:.1f}" text-anchor="end">p99 limit 100 ms</text>')
out.append(f'<line x1="{L}" x2="{W-R}" y1="{y(500):.1f}" y2="{y(500):.1f}" stroke="#888" stroke-dasharray="2 3"/>')
out.append(f'<text x="{W-R-4}" y="{y(500)-4:.1f}" text-anchor="end">mean limit 500 ms</text>')
out.append(f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">peers</text>')
out.append(f'<text x="16" y="{(T+H-B)/2}" transform="rotate(-90 16 {(T+H-B)/2})" text-anchor="middle">latency, ms (log): p99 solid, mean dashed</text>')
for i, (name, rows) in enumerate(runs):
    c = colours[i % len(colours)]
    for col, dash in (("p99_ms", ""), ("mean_ms", ' stroke-dasharray="5 4"')):
        pts = " ".join(f'{x(float(r["peers"])):.1f},{y(float(r[col])):.1f}' for r in rows)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
    out.append(f'<line x1="{W-R+12}" x2="{W-R+36}" y1="{T+10+i*20}" y2="{T+10+i*20}" stroke="{c}" stroke-width="2"/>')
    out.append(f'<text x="{W-R+42}" y="{T+14+i*20}">{name}</text>')
out.append("</svg>")
with open(os.path.join(here, "latency.svg"), "w") as f:
    f.write("\n".join(out))
print("wrote", os.path.join(here, "latency.svg"))
