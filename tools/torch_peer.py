#!/usr/bin/env python3
"""The PyTorch peer of `psk bench --peer torch`.

Times torch.nn.functional.scaled_dot_product_attention on the CPU (float32, softmax, causal or full
as requested) at every shape psk bench passes in, with the same warm-up and run counts, and writes
the median, min and max wall time of each back as JSON. psk bench runs it once per sweep, after
the GPU runs, so the ratios come from the same sweep.

    torch_peer.py --in shapes.json --out results.json [--progress]

shapes.json: {"runs": R, "warmup": W, "shapes": [{"batch", "heads", "kv_heads", "n", "head_dim",
"value_dim", "causal"}, ...]}. results.json: {"available": true, "version", "threads", "results":
[{...the shape..., "status": "ok", "median_ms", "min_ms", "max_ms", "samples_ms"} or {...,
"status": "skipped", "reason"}]}, or {"available": false, "reason"} when torch cannot be imported.
Runs under the venv that tools/install_bench_deps.sh creates (.venv-bench).
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings


def write(path, doc):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--in", dest="inp", required=True, help="shapes JSON written by psk bench")
    ap.add_argument("--out", required=True, help="results JSON read back by psk bench")
    ap.add_argument("--progress", action="store_true", help="one line per shape on stderr")
    args = ap.parse_args()
    with open(args.inp, encoding="utf-8") as f:
        request = json.load(f)

    warnings.filterwarnings("ignore")  # e.g. "Failed to initialize NumPy" when numpy is absent
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # ImportError, or OSError from a missing shared library
        write(args.out, {"available": False, "reason": f"cannot import torch: {str(e).splitlines()[0]}"})
        return 0

    try:
        threads = len(os.sched_getaffinity(0))
    except AttributeError:
        threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    runs = max(1, int(request.get("runs", 5)))
    warmup = max(0, int(request.get("warmup", 1)))

    results = []
    shapes = request.get("shapes", [])
    for index, s in enumerate(shapes):
        entry = dict(s)
        b, hq, hkv = s["batch"], s["heads"], s.get("kv_heads", s["heads"])
        n, h, dv, causal = s["n"], s["head_dim"], s.get("value_dim", s["head_dim"]), bool(s["causal"])
        if args.progress:
            print(f"torch peer {index + 1}/{len(shapes)}: B={b} H={hq} n={n} h={h} "
                  f"{'causal' if causal else 'full'}", file=sys.stderr, flush=True)
        try:
            g = torch.Generator().manual_seed(2024)
            q = torch.randn(b, hq, n, h, generator=g, dtype=torch.float32)
            k = torch.randn(b, hkv, n, h, generator=g, dtype=torch.float32)
            v = torch.randn(b, hkv, n, dv, generator=g, dtype=torch.float32)
            kwargs = {"is_causal": causal}
            if hq != hkv:
                kwargs["enable_gqa"] = True
            times = []
            with torch.inference_mode():
                for _ in range(warmup):
                    F.scaled_dot_product_attention(q, k, v, **kwargs)
                for _ in range(runs):
                    t0 = time.perf_counter()
                    F.scaled_dot_product_attention(q, k, v, **kwargs)
                    times.append((time.perf_counter() - t0) * 1e3)
            entry.update(status="ok", median_ms=statistics.median(times), min_ms=min(times),
                         max_ms=max(times), samples_ms=times)
        except (RuntimeError, MemoryError, TypeError, ValueError) as e:
            entry.update(status="skipped", reason=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        results.append(entry)

    write(args.out, {"available": True, "name": "torch", "version": torch.__version__,
                     "threads": threads, "device": "cpu", "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
