"""Plots for bench/cc: throughput against p95 queueing delay per trace (one
point per run, like the Hera paper's figure), and Jain's index over time for
the competing-flow runs, and the frame-latency CDF of the app-level (QoE)
streams. Usage: plot.py OUTDIR results.jsonl [...]"""
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"cubic": "tab:blue", "bbr": "tab:orange", "reno": "tab:green", "hera": "tab:red", "hera-paper": "tab:purple",
          "hera-nopacing": "tab:pink", "hera-5ms": "tab:brown"}


def panels(n, width, height):
    """A figure of n panels of width × height inches, at most three to a row;
    the unused panels of the last row are hidden."""
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, axes


def main():
    out, files = sys.argv[1], sys.argv[2:]
    runs = [json.loads(l) for f in files for l in open(f) if l.strip()]
    qoe = [r for r in runs if r.get("qoe")]
    single = [r for r in runs if r["flows"] == 1 and not r.get("qoe")]
    multi = [r for r in runs if r["flows"] > 1 and not r.get("qoe")]
    traces = sorted({r["trace"] for r in single})
    if traces:
        fig, axes = panels(len(traces), 4.2, 3.4)
        for ax, t in zip(axes.flat, traces):
            for r in single:
                if r["trace"] != t:
                    continue
                marker = "o" if r["valid"] else "x"
                ax.scatter(r["p95_qdelay_ms"], r["throughput_mbps"], color=COLORS.get(r["algo"], "k"), marker=marker, s=40)
            ax.set_title(t)
            ax.set_xlabel("p95 one-way queueing delay (ms)")
            ax.set_ylabel("throughput (Mbit/s)")
            ax.invert_xaxis()  # better is up and to the right, as in the paper
            ax.grid(alpha=0.3)
        handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=a) for a, c in COLORS.items()]
        handles.append(plt.Line2D([], [], marker="x", ls="", color="k", label="invalid run"))
        fig.legend(handles=handles, loc="lower center", ncol=len(handles))
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        fig.savefig(f"{out}/scatter.png", dpi=110)
    if multi:
        traces = sorted({r["trace"] for r in multi})
        fig, axes = panels(len(traces), 6, 3.6)
        for ax, t in zip(axes.flat, traces):
            for r in multi:
                if r["trace"] != t:
                    continue
                style = "-" if r["valid"] else ":"
                # null: a second in which the link delivered nothing (no index).
                js = [float("nan") if v is None else v for v in r["jain_series"]]
                ax.plot(range(1, len(js) + 1), js, style, color=COLORS.get(r["algo"], "k"),
                        label=f'{r["algo"]} ({r["flows"]} flows)')
            ax.axhline(0.95, color="gray", ls="--", lw=1)
            ax.set_title(t)
            ax.set_xlabel("second (after 2 s warm-up)")
            ax.set_ylabel("Jain's fairness index (1 s)")
            ax.set_ylim(0, 1.02)
            ax.legend(fontsize=7, loc="lower right")
            ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(f"{out}/jain.png", dpi=110)
    if qoe:
        traces = sorted({r["trace"] for r in qoe})
        fig, axes = panels(len(traces), 5.2, 3.6)
        for ax, t in zip(axes.flat, traces):
            for r in qoe:
                q = r["qoe"]
                if r["trace"] != t or not q.get("lat_quantiles_ms"):
                    continue
                # The CDF over delivered frames, scaled by the delivered share.
                share = q["frames_delivered"] / max(1, q["frames_scheduled"])
                ys = [share * k / 100 for k in range(1, 101)]
                style = "-" if r["valid"] else ":"
                ax.plot(q["lat_quantiles_ms"], ys, style, color=COLORS.get(r["algo"], "k"),
                        label=f'{r["algo"]} ({q["rate_mbps"]:.1f} of {q["target_mbps"]:.0f} Mbit/s)')
            ax.set_xscale("log")
            ax.set_xlabel("frame latency (ms, log)")
            ax.set_ylabel("fraction of frames")
            ax.set_title(f"{t}: app stream + bulk flow")
            ax.set_ylim(0, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(f"{out}/qoe.png", dpi=110)


if __name__ == "__main__":
    main()
