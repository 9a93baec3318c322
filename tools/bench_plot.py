#!/usr/bin/env python3
"""Draws the plot of `psk bench --plot`: latency per token (ms/token) against context length n, on
log-log axes, one line per configuration of the sweep and one per shape of the peer.

For `psk bench --decode` (the JSON's "mode" is "decode"): two panels against the context length
(log x): the median step time per configuration with its min-max range, and the decode state's
bytes (log y).

    bench_plot.py RESULTS.json OUT.png

RESULTS.json is the file psk bench writes (--json). Needs matplotlib (Debian's python3-matplotlib,
installed by tools/install_bench_deps.sh); exits with status 3 when it is missing.
"""
import json
import sys


def label_of(r, varying):
    kind = r["kind"]
    if kind == "poly":
        text = f"poly p={r['degree']}"
    elif kind == "polysketch":
        text = f"polysketch p={r['degree']} r={r['sketch_size']} b={r['block_size']}"
        if r.get("local_exact"):
            text += " local exact"
    else:
        text = kind
    extras = []
    for field, short in (("dtype", ""), ("batch", "B="), ("heads", "H="), ("head_dim", "h="), ("layout", "")):
        if field in varying:
            extras.append(f"{short}{r[field]}")
    if "causal" in varying:
        extras.append("causal" if r["causal"] else "full")
    return text + (f" ({', '.join(extras)})" if extras else "")


SERIES_FIELDS = ("kind", "dtype", "layout", "batch", "heads", "kv_heads", "head_dim", "value_dim", "causal",
                 "degree", "sketch_size", "block_size", "local_exact")
SHAPE_FIELDS = ("batch", "heads", "kv_heads", "head_dim", "value_dim", "causal")


def n_label(n):
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def plot_decode(doc, out, plt, FixedLocator, NullLocator):
    rows = doc.get("results", [])
    ok = [r for r in rows if r.get("status") == "ok"]
    varying = {f for f in ("dtype", "batch", "heads", "head_dim") if len({r[f] for r in rows}) > 1}
    series = {}
    for r in ok:
        key = tuple(r[f] for f in SERIES_FIELDS if f not in ("layout",))
        series.setdefault(key, (label_of(r, varying), []))[1].append(r)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.6), dpi=100)
    markers = "osD^v<>ph*"
    all_n = set()
    for i, (label, pts) in enumerate(series.values()):
        pts.sort(key=lambda r: r["context"])
        xs = [r["context"] for r in pts]
        all_n.update(xs)
        med = [r["median_ms"] for r in pts]
        lo = [r["median_ms"] - r["min_ms"] for r in pts]
        hi = [r["max_ms"] - r["median_ms"] for r in pts]
        m = markers[i % len(markers)]
        ax.errorbar(xs, med, yerr=[lo, hi], marker=m, capsize=3, label=label)
        bx.plot(xs, [r["state_bytes"] for r in pts], marker=m, label=label)
    if not all_n:
        print("bench_plot.py: no successful result to plot", file=sys.stderr)
    device = doc.get("device", {}).get("name", "?")
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        if all_n:
            ticks = sorted(all_n)
            a.xaxis.set_major_locator(FixedLocator(ticks))
            a.xaxis.set_minor_locator(NullLocator())
            a.set_xticklabels([n_label(n) for n in ticks])
        a.set_xlabel("context length L (tokens before the step)")
        a.grid(True, which="both", alpha=0.3)
        if series:
            a.legend(fontsize=8)
    ax.set_ylabel("decode step time (ms, GPU)")
    ax.set_title(f"decode step on {device}: median (bars: min-max) of {doc.get('steps', '?')} steps", fontsize=10)
    bx.set_ylabel("decode state (bytes)")
    bx.set_title("decode state size (pskGetDecodeStateSize)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return 0


def main():
    if len(sys.argv) != 3:
        print("usage: bench_plot.py RESULTS.json OUT.png", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, NullLocator
    except ImportError:
        print("bench_plot.py: matplotlib is not installed (run tools/install_bench_deps.sh)", file=sys.stderr)
        return 3
    with open(sys.argv[1], encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("mode") == "decode":
        return plot_decode(doc, sys.argv[2], plt, FixedLocator, NullLocator)
    rows = doc.get("results", [])
    ok = [r for r in rows if r.get("status") == "ok"]
    varying = {f for f in ("dtype", "batch", "heads", "head_dim", "layout", "causal") if len({r[f] for r in rows}) > 1}

    series = {}
    for r in ok:
        key = tuple(r[f] for f in SERIES_FIELDS)
        series.setdefault(key, (label_of(r, varying), []))[1].append((r["n"], r["ms_per_token"]))
    peer = doc.get("peer") or {}
    peer_series = {}
    if peer.get("available"):
        for r in rows:
            p = r.get("peer") or {}
            if p.get("status") != "ok":
                continue
            key = tuple(r[f] for f in SHAPE_FIELDS)
            extras = [f"{s}{r[f]}" for f, s in (("batch", "B="), ("heads", "H="), ("head_dim", "h=")) if f in varying]
            if "causal" in varying:
                extras.append("causal" if r["causal"] else "full")
            name = f"torch {peer.get('version', '')} SDPA, CPU f32, {peer.get('threads', '?')} threads"
            name += f" ({', '.join(extras)})" if extras else ""
            points = peer_series.setdefault(key, (name, {}))[1]
            points[r["n"]] = p["ms_per_token"]

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=100)
    markers = "osD^v<>ph*"
    all_n = set()
    for i, (label, pts) in enumerate(series.values()):
        pts.sort()
        all_n.update(n for n, _ in pts)
        ax.plot([n for n, _ in pts], [y for _, y in pts], marker=markers[i % len(markers)], label=label)
    for label, pts in peer_series.values():
        xs = sorted(pts)
        all_n.update(xs)
        ax.plot(xs, [pts[n] for n in xs], marker="x", linestyle="--", color="black", label=label)
    if not all_n:
        print("bench_plot.py: no successful result to plot", file=sys.stderr)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if all_n:
        ticks = sorted(all_n)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in ticks])
    ax.set_xlabel("context length n (tokens)")
    ax.set_ylabel("latency per token (ms / token)")
    device = doc.get("device", {}).get("name", "?")
    mode = "" if "causal" in varying else (" causal" if rows and rows[0]["causal"] else " full")
    ax.set_title(f"psk bench on {device}{mode}: median of {doc.get('runs', '?')} runs", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if series or peer_series:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
