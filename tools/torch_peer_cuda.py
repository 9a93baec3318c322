#!/usr/bin/env python3
"""PyTorch SDPA on a CUDA GPU, the peer of `psk bench` on the same GPU (tools/gpu_run.sh).

Times torch.nn.functional.scaled_dot_product_attention (causal unless --full, float16 or
bfloat16, whatever backend PyTorch picks: flash attention on recent NVIDIA GPUs) with CUDA
events, at every n of --n, with batch = max(1, tokens // (heads * n)) so that every call
processes about the same number of tokens (batch x heads x n). Writes one JSON document:

    {"available": true, "name": "torch-cuda", "version", "device", "dtype", "results": [
      {"batch", "heads", "n", "head_dim", "causal", "status": "ok", "median_ms", "min_ms",
       "max_ms", "ms_per_token", "tflops", "samples_ms"} or {..., "status": "skipped", "reason"}]}

TFLOP/s counts 4 n^2 h multiply-adds-as-two-FLOPs per (batch, head), halved when causal (the
softmax convention of docs/PERFORMANCE.md). tools/torch_peer.py is the CPU peer that psk bench
drives; this one runs on its own.

    torch_peer_cuda.py --out sdpa.json [--n 1k,2k,...] [--tokens 1048576] [--heads 8]
                       [--head-dim 64,128] [--dtype f16|bf16] [--runs 10] [--warmup 3] [--full]
"""
import argparse
import json
import statistics
import sys


def parse_sizes(text):
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        scale = 1024 if item.endswith("k") else 1
        out.append(int(item.rstrip("k")) * scale)
    return out


def write(path, doc):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", default="1k,2k,4k,8k,16k,32k,64k,128k")
    ap.add_argument("--tokens", type=int, default=1 << 20, help="batch x heads x n per call")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", default="64,128")
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="non-causal")
    args = ap.parse_args()

    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # ImportError, or OSError from a missing shared library
        write(args.out, {"available": False, "reason": f"cannot import torch: {str(e).splitlines()[0]}"})
        return 0
    if not torch.cuda.is_available():
        write(args.out, {"available": False, "reason": "torch.cuda.is_available() is false"})
        return 0

    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    causal = not args.full
    results = []
    for h in parse_sizes(args.head_dim):
        for n in parse_sizes(args.n):
            batch = max(1, args.tokens // (args.heads * n))
            entry = {"batch": batch, "heads": args.heads, "n": n, "head_dim": h, "causal": causal}
            print(f"sdpa B={batch} H={args.heads} n={n} h={h}", file=sys.stderr, flush=True)
            try:
                g = torch.Generator(device="cuda").manual_seed(2024)
                shape = (batch, args.heads, n, h)
                q = torch.randn(shape, generator=g, device="cuda", dtype=dtype)
                k = torch.randn(shape, generator=g, device="cuda", dtype=dtype)
                v = torch.randn(shape, generator=g, device="cuda", dtype=dtype)
                times = []
                with torch.inference_mode():
                    for _ in range(args.warmup):
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    torch.cuda.synchronize()
                    for _ in range(args.runs):
                        start = torch.cuda.Event(enable_timing=True)
                        stop = torch.cuda.Event(enable_timing=True)
                        start.record()
                        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        stop.record()
                        stop.synchronize()
                        times.append(start.elapsed_time(stop))
                median = statistics.median(times)
                flops = 4.0 * batch * args.heads * n * n * h * (0.5 if causal else 1.0)
                entry.update(status="ok", median_ms=median, min_ms=min(times), max_ms=max(times),
                             ms_per_token=median / (batch * n), tflops=flops / (median * 1e-3) / 1e12,
                             samples_ms=times)
                del q, k, v
            except (RuntimeError, MemoryError) as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
                entry.update(status="skipped", reason=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            torch.cuda.empty_cache()
            results.append(entry)

    write(args.out, {"available": True, "name": "torch-cuda", "version": torch.__version__,
                     "device": torch.cuda.get_device_name(0), "dtype": args.dtype, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
