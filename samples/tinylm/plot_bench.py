#!/usr/bin/env python3
"""Plots `tinylm bench --json` results: ms per generated token (median, min-max band) and prefill
tokens/s against the context length, one line per JSON file (e.g. polysketch and softmax).

    samples/tinylm/plot_bench.py OUT.png polysketch.json softmax.json

Needs matplotlib (Debian's python3-matplotlib: tools/install_bench_deps.sh --no-torch); exits
with status 3 when it is missing.
"""
import json
import os
import sys


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter
    except ImportError:
        print("plot_bench.py: matplotlib is not installed (tools/install_bench_deps.sh --no-torch)", file=sys.stderr)
        return 3
    out, files = sys.argv[1], sys.argv[2:]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=100)
    contexts = set()
    device = ""
    for i, path in enumerate(files):
        with open(path) as f:
            doc = json.load(f)
        rows = sorted(doc["results"], key=lambda r: r["context"])
        xs = [r["context"] for r in rows]
        contexts.update(xs)
        device = doc.get("device", device)
        label = f"{doc['attention']} ({os.path.basename(doc['model'])})"
        marker = "os^D"[i % 4]
        ax.plot(xs, [r["step_ms_median"] for r in rows], marker=marker, label=label)
        ax.fill_between(xs, [r["step_ms_min"] for r in rows], [r["step_ms_max"] for r in rows], alpha=0.15)
        bx.plot(xs, [r["prefill_tokens_per_s"] for r in rows], marker=marker, label=label)
        tokens = doc.get("tokens", "?")
    ticks = sorted(contexts)
    for axis in (ax, bx):
        axis.set_xscale("log", base=2)
        axis.xaxis.set_major_locator(FixedLocator(ticks))
        axis.xaxis.set_minor_locator(NullLocator())
        axis.set_xticklabels([f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in ticks])
        axis.set_xlabel("context length (prompt tokens)")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms per generated token (median; band: min-max)")
    ax.set_title(f"tinylm generation after the prompt ({tokens} tokens)", fontsize=10)
    bx.set_yscale("log")
    bx.set_ylabel("prefill tokens/s")
    bx.set_title("prompt (prefill) throughput", fontsize=10)
    # Readable log-scale labels: plain numbers at 1-2-5 steps inside each axis's range.
    for axis in (ax, bx):
        low, high = axis.get_ylim()
        steps = [m * 10 ** e for e in range(-2, 7) for m in (1, 2, 5)]
        axis.yaxis.set_major_locator(FixedLocator([v for v in steps if low <= v <= high]))
        axis.yaxis.set_minor_locator(NullLocator())
        axis.yaxis.set_major_formatter(ScalarFormatter())
    fig.suptitle(f"tinylm on {device}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
