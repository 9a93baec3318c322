#!/usr/bin/env python3
"""PyTorch on a CUDA GPU: the SDPA and decode peers of psk, and the GPU's ceilings (gpu_run.sh peer).

Runs with nothing but torch installed (no numpy). Writes one JSON object per line to --out as each
measurement ends (flushed, so a run cut off keeps what it measured) and prints one line per
measurement on stdout. Record types, in the order they are measured (--what picks some):

  env       torch, CUDA, cuDNN and Python versions; the GPU's name, capability, multiprocessors,
            memory and L2; which SDPA backends torch says are enabled; nvidia-smi's clocks, power
            and driver when nvidia-smi is there (again as "clocks_after" at the end)
  ceiling   device-to-device copy bandwidth (bytes read + written) and torch.matmul 8192^3 in
            float16, bfloat16 and float32 (TF32 off): the roofline's two ceilings
  sdpa      torch.nn.functional.scaled_dot_product_attention, causal (unless --full), B x H x n x h,
            float16 (--dtype), with the backend torch picks ("default", plus the kernel names the
            profiler saw for it once per head dim) and with each backend pinned through
            torch.nn.attention.sdpa_kernel: flash, cudnn, efficient, math. A backend that cannot run
            a shape is recorded with status "unavailable" (or "oom", "error") and its reason.
            FLOP = 4 B H n^2 h, halved when causal (docs/PERFORMANCE.md, A8)
  decode    one query token against a KV cache of L tokens (B x H x L x h, --decode-dtype, no mask):
            the softmax decode step psk bench --decode compares with. Per backend: the median of
            single calls (CUDA events around each), the mean of a loop of calls, and the mean of a
            CUDA-graph replay of one call (launch overhead out); "default+append" also writes the
            new token's k and v into the cache first. Bytes = the cache read once (2 B H L h size).

Timing: CUDA events; --warmup untimed calls, then --runs timed calls, the median reported (with
min, max and every sample). Inputs are standard normal (never zeros); small shapes rotate over
several input sets so that the L2 (50-60 MB) does not hold them all. Limits: --shape-limit seconds
per shape (the timed runs are reduced to fit, from the first call's time), --time-limit seconds
for the whole run (later measurements are recorded as "skipped: time limit"; jobs are ordered so
the most wanted come first: ceilings, SDPA at the first head dim with default/cudnn/flash, decode,
the other head dims, then efficient and math).

    torch_peer_cuda.py --out peer.jsonl [--what env,ceiling,sdpa,decode] [--n 4k,8k,...,128k]
        [--batch 1] [--heads 16] [--head-dim 64,128] [--dtype f16|bf16] [--full]
        [--backends default,cudnn,flash,efficient,math] [--runs 10] [--warmup 3]
        [--decode-context 4k,32k,128k] [--decode-head-dim 64] [--decode-dtype f16,f32] [--math-max-n 16384]
        [--shape-limit 15] [--time-limit 110]

Exit status 0 when it ran (whatever was unavailable is in the file), 1 when torch or CUDA is
missing (recorded as {"type": "env", "available": false, "reason"}), 2 for a bad command line.
"""
import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

BACKENDS = ("default", "cudnn", "flash", "efficient", "math")


def parse_sizes(text):
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        scale = 1024 if item.endswith("k") else 1
        try:
            out.append(int(item.rstrip("k")) * scale)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad size {item!r}")
    return out


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:400]


class Recorder:
    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8")

    def write(self, record):
        self.f.write(json.dumps(record, sort_keys=False) + "\n")
        self.f.flush()
        try:
            os.fsync(self.f.fileno())
        except OSError:
            pass


def say(text):
    print(text, flush=True)


def nvidia_smi():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"available": False, "reason": "nvidia-smi not found"}
    fields = ("name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,"
              "power.limit,temperature.gpu,utilization.gpu,memory.used,memory.total")
    try:
        r = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=15)
    except (OSError, subprocess.SubprocessError) as e:
        return {"available": False, "reason": first_line(e)}
    if r.returncode != 0:
        return {"available": False, "reason": (r.stderr or r.stdout).strip()[:400]}
    keys = fields.split(",")
    rows = [dict(zip(keys, (v.strip() for v in line.split(",")))) for line in r.stdout.strip().splitlines()]
    return {"available": True, "gpus": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    ap.add_argument("--out", required=True, help="JSON lines, appended")
    ap.add_argument("--what", default="env,ceiling,sdpa,decode")
    ap.add_argument("--n", type=parse_sizes, default=parse_sizes("4k,8k,16k,32k,64k,128k"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=parse_sizes, default=[64, 128])
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--full", action="store_true", help="non-causal SDPA")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--decode-context", type=parse_sizes, default=parse_sizes("4k,32k,128k"))
    ap.add_argument("--decode-head-dim", type=parse_sizes, default=[64])
    ap.add_argument("--decode-dtype", default="f16,f32", help="psk's decode states are float32 today")
    ap.add_argument("--decode-loop", type=int, default=100, help="calls per loop and per graph replay")
    ap.add_argument("--math-max-n", type=int, default=16384, help="the math backend materializes n x n")
    ap.add_argument("--copy-mib", type=int, default=2048, help="bytes of the copy ceiling, MiB")
    ap.add_argument("--matmul", type=int, default=8192, help="m = n = k of the matmul ceiling")
    ap.add_argument("--shape-limit", type=float, default=15.0, help="seconds per shape")
    ap.add_argument("--time-limit", type=float, default=110.0, help="seconds for the whole run")
    args = ap.parse_args()
    what = {w.strip() for w in args.what.split(",") if w.strip()}
    bad = what - {"env", "ceiling", "sdpa", "decode"}
    if bad:
        ap.error(f"--what: unknown {sorted(bad)}")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if set(backends) - set(BACKENDS):
        ap.error(f"--backends: unknown {sorted(set(backends) - set(BACKENDS))}")
    start = time.monotonic()
    deadline = start + args.time_limit
    rec = Recorder(args.out)

    try:
        import warnings
        warnings.filterwarnings("ignore")  # "Failed to initialize NumPy" and the like
        import torch
        import torch.nn.functional as F
    except Exception as e:  # ImportError, or OSError from a missing shared library
        rec.write({"type": "env", "available": False, "reason": f"cannot import torch: {first_line(e)}"})
        say(f"torch peer: cannot import torch: {first_line(e)}")
        return 1
    if not torch.cuda.is_available():
        rec.write({"type": "env", "available": False, "torch": torch.__version__,
                   "reason": "torch.cuda.is_available() is false"})
        say("torch peer: torch.cuda.is_available() is false")
        return 1

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    causal = not args.full

    # --- SDPA backends: torch.nn.attention.sdpa_kernel (torch >= 2.3), else the older context.
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        enum = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                "math": "MATH"}

        def backend_context(name):
            if name == "default":
                return contextlib.nullcontext()
            member = getattr(SDPBackend, enum[name], None)
            if member is None:
                raise RuntimeError(f"this torch has no SDPBackend.{enum[name]}")
            return sdpa_kernel([member])
        backend_api = "torch.nn.attention.sdpa_kernel"
    except Exception:
        def backend_context(name):
            if name == "default":
                return contextlib.nullcontext()
            if name == "cudnn":
                raise RuntimeError("this torch has no torch.nn.attention (cuDNN backend not selectable)")
            return torch.backends.cuda.sdp_kernel(enable_flash=name == "flash", enable_math=name == "math",
                                                  enable_mem_efficient=name == "efficient")
        backend_api = "torch.backends.cuda.sdp_kernel"

    def flag(name):
        fn = getattr(torch.backends.cuda, name, None)
        try:
            return bool(fn()) if fn else None
        except Exception:
            return None

    if "env" in what:
        try:
            cudnn = torch.backends.cudnn.version()
        except Exception as e:
            cudnn = first_line(e)
        env = {"type": "env", "available": True, "torch": torch.__version__, "cuda": torch.version.cuda,
               "cudnn": cudnn, "python": platform.python_version(), "gpu": torch.cuda.get_device_name(0),
               "capability": list(torch.cuda.get_device_capability(0)),
               "multiprocessors": props.multi_processor_count, "memory_bytes": props.total_memory,
               "l2_bytes": l2, "backend_api": backend_api,
               "sdp_enabled": {k: flag(k) for k in ("flash_sdp_enabled", "cudnn_sdp_enabled",
                                                     "mem_efficient_sdp_enabled", "math_sdp_enabled")},
               "flash_attention_available": flag("is_flash_attention_available"),
               "nvidia_smi": nvidia_smi(), "args": vars(args)}
        rec.write(env)
        smi = env["nvidia_smi"]
        clocks = ""
        if smi.get("available"):
            g = smi["gpus"][0]
            clocks = f", driver {g.get('driver_version')}, SM {g.get('clocks.sm')} (max {g.get('clocks.max.sm')}), " \
                     f"mem {g.get('clocks.mem')}, {g.get('power.draw')}, {g.get('temperature.gpu')} C"
        say(f"env: {env['gpu']} (sm_{env['capability'][0]}{env['capability'][1]}, {env['multiprocessors']} SMs, "
            f"{props.total_memory / 2**30:.0f} GiB, L2 {l2 / 2**20:.0f} MiB), torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}, cuDNN {cudnn}{clocks}")

    def left():
        return deadline - time.monotonic()

    def events(n):
        return [torch.cuda.Event(enable_timing=True) for _ in range(n)]

    def timed(fn, runs, warmup):
        """Warm-up calls, then `runs` calls each between two events; the samples in ms."""
        for _ in range(warmup):
            fn()
        starts, stops = events(runs), events(runs)
        for i in range(runs):
            starts[i].record()
            fn()
            stops[i].record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in zip(starts, stops)]

    def first_call_ms(fn):
        a, b = events(2)
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b)

    def fit_runs(first_ms):
        """(warmup, runs) within --shape-limit, from the time of one call."""
        budget_ms = max(0.0, min(args.shape_limit, left() - 1.0)) * 1e3
        per = max(first_ms, 1e-3)
        total = int(budget_ms // per)
        warmup = min(max(args.warmup - 1, 0), max(total - 3, 0))
        runs = min(args.runs, max(total - warmup, 1))
        return warmup, runs

    def stats(samples):
        return {"median_ms": statistics.median(samples), "min_ms": min(samples), "max_ms": max(samples),
                "runs": len(samples), "samples_ms": samples}

    # --- Ceilings.
    if "ceiling" in what:
        jobs = [("copy", None), ("matmul", torch.float16), ("matmul", torch.bfloat16), ("matmul", torch.float32)]
        for kind, mdtype in jobs:
            if left() < 5:
                rec.write({"type": "ceiling", "what": kind, "status": "skipped", "reason": "time limit"})
                continue
            try:
                if kind == "copy":
                    count = args.copy_mib << 20
                    src = torch.empty(count, dtype=torch.uint8, device=dev).random_(0, 255)
                    dst = torch.empty_like(src)
                    s = timed(lambda: dst.copy_(src), 10, 3)
                    med = statistics.median(s)
                    gbs = 2 * count / (med * 1e-3) / 1e9
                    rec.write({"type": "ceiling", "what": "copy", "status": "ok", "bytes_each_way": count,
                               "gb_per_s_read_plus_write": gbs} | stats(s))
                    say(f"ceiling copy {count >> 20} MiB: {med:.3f} ms, {gbs:.0f} GB/s (read + write)")
                    del src, dst
                else:
                    m = args.matmul
                    g = torch.Generator(device=dev).manual_seed(7)
                    a = torch.randn((m, m), device=dev, dtype=mdtype, generator=g)
                    b = torch.randn((m, m), device=dev, dtype=mdtype, generator=g)
                    tf32 = torch.backends.cuda.matmul.allow_tf32
                    torch.backends.cuda.matmul.allow_tf32 = False
                    try:
                        s = timed(lambda: torch.matmul(a, b), 10, 3)
                    finally:
                        torch.backends.cuda.matmul.allow_tf32 = tf32
                    med = statistics.median(s)
                    tflops = 2.0 * m ** 3 / (med * 1e-3) / 1e12
                    name = str(mdtype).replace("torch.", "")
                    rec.write({"type": "ceiling", "what": "matmul", "dtype": name, "m": m, "status": "ok",
                               "tflops": tflops, "tf32": False} | stats(s))
                    say(f"ceiling matmul {name} {m}^3: {med:.3f} ms, {tflops:.1f} TFLOP/s")
                    del a, b
            except Exception as e:
                rec.write({"type": "ceiling", "what": kind, "status": "error", "reason": first_line(e)})
                say(f"ceiling {kind}: error {first_line(e)}")
            torch.cuda.empty_cache()

    # --- SDPA.
    def make_inputs(shape, sets):
        g = torch.Generator(device=dev).manual_seed(2024)
        return [tuple(torch.randn(shape, generator=g, device=dev, dtype=dtype) for _ in range(3)) for _ in range(sets)]

    def input_sets(bytes_per_set):
        if l2 <= 0:
            return 2
        return max(1, min(3, math.ceil(4 * l2 / max(bytes_per_set, 1))))

    seen_kernels = set()

    def kernel_names(fn):
        """CUDA kernel names of one call (torch.profiler), to say which backend "default" is."""
        try:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            names = sorted({e.key for e in prof.key_averages() if getattr(e, "device_type", None) is not None
                            and "cuda" in str(e.device_type).lower()})
            return [n[:160] for n in names][:12]
        except Exception as e:
            return [f"profiler failed: {first_line(e)}"]

    def sdpa_shape(backend, n, h):
        base = {"type": "sdpa", "backend": backend, "batch": args.batch, "heads": args.heads, "n": n,
                "head_dim": h, "causal": causal, "dtype": args.dtype}
        label = f"sdpa {backend:9s} B={args.batch} H={args.heads} n={n:6d} h={h:3d}"
        if left() < 3:
            rec.write(base | {"status": "skipped", "reason": "time limit"})
            say(f"{label}: skipped (time limit)")
            return
        if backend == "math" and n > args.math_max_n:
            rec.write(base | {"status": "skipped", "reason": f"math backend: n > --math-max-n {args.math_max_n}"})
            say(f"{label}: skipped (n > --math-max-n)")
            return
        shape = (args.batch, args.heads, n, h)
        elem = 2
        per_set = 3 * args.batch * args.heads * n * h * elem
        sets = None
        try:
            sets = make_inputs(shape, input_sets(per_set))
            idx = [0]

            def call():
                q, k, v = sets[idx[0] % len(sets)]
                idx[0] += 1
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            with torch.inference_mode(), backend_context(backend):
                first = first_call_ms(call)
                warmup, runs = fit_runs(first)
                samples = timed(call, runs, warmup)
                kernels = None
                if backend == "default" and h not in seen_kernels:
                    seen_kernels.add(h)
                    kernels = kernel_names(call)
            flop = 4.0 * args.batch * args.heads * n * n * h * (0.5 if causal else 1.0)
            st = stats(samples)
            med = st["median_ms"]
            r = base | {"status": "ok", "flop": flop, "tflops": flop / (med * 1e-3) / 1e12,
                        "ms_per_token": med / (args.batch * n), "first_call_ms": first, "input_sets": len(sets)} | st
            if runs < args.runs:
                r["note"] = f"runs reduced to {runs} by --shape-limit {args.shape_limit:g} s"
            if kernels is not None:
                r["kernels"] = kernels
            rec.write(r)
            say(f"{label}: {med:9.3f} ms  {r['tflops']:6.1f} TFLOP/s  ({runs} runs)"
                + (f"  kernels: {', '.join(kernels)[:200]}" if kernels else ""))
        except torch.cuda.OutOfMemoryError as e:
            rec.write(base | {"status": "oom", "reason": first_line(e)})
            say(f"{label}: out of memory")
        except RuntimeError as e:
            text = first_line(e)
            status = "unavailable" if ("No available kernel" in text or "no SDPBackend" in text
                                       or "not selectable" in text or "not supported" in text.lower()) else "error"
            rec.write(base | {"status": status, "reason": text})
            say(f"{label}: {status}: {text[:160]}")
        except Exception as e:
            rec.write(base | {"status": "error", "reason": first_line(e)})
            say(f"{label}: error: {first_line(e)[:160]}")
        finally:
            sets = None
            torch.cuda.empty_cache()

    # --- Decode: one query token against a KV cache of L tokens.
    def decode_shape(backend, L, h, dname):
        ddtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dname]
        esize = 4 if dname == "f32" else 2
        base = {"type": "decode", "backend": backend, "batch": args.batch, "heads": args.heads, "context": L,
                "head_dim": h, "dtype": dname}
        label = f"decode {backend:14s} {dname} B={args.batch} H={args.heads} L={L:6d} h={h:3d}"
        if left() < 3:
            rec.write(base | {"status": "skipped", "reason": "time limit"})
            say(f"{label}: skipped (time limit)")
            return
        append = backend.endswith("+append")
        pinned = backend.split("+")[0]
        try:
            g = torch.Generator(device=dev).manual_seed(11)
            kc = torch.randn((args.batch, args.heads, L, h), generator=g, device=dev, dtype=ddtype)
            vc = torch.randn((args.batch, args.heads, L, h), generator=g, device=dev, dtype=ddtype)
            q = torch.randn((args.batch, args.heads, 1, h), generator=g, device=dev, dtype=ddtype)
            kn = torch.randn((args.batch, args.heads, h), generator=g, device=dev, dtype=ddtype)
            vn = torch.randn((args.batch, args.heads, h), generator=g, device=dev, dtype=ddtype)

            def call():
                if append:
                    kc[:, :, L - 1].copy_(kn)
                    vc[:, :, L - 1].copy_(vn)
                return F.scaled_dot_product_attention(q, kc, vc, is_causal=False)

            with torch.inference_mode(), backend_context(pinned):
                first = first_call_ms(call)
                warmup, runs = fit_runs(first)
                runs = max(runs, min(args.runs * 3, 30)) if first < 1.0 else runs
                samples = timed(call, runs, warmup)
                loops = args.decode_loop
                a, b = events(2)
                a.record()
                for _ in range(loops):
                    call()
                b.record()
                torch.cuda.synchronize()
                loop_ms = a.elapsed_time(b) / loops
                graph_ms, graph_reason = None, None
                try:
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        for _ in range(2):
                            call()
                    torch.cuda.current_stream().wait_stream(s)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        call()
                    graph.replay()
                    torch.cuda.synchronize()
                    a, b = events(2)
                    a.record()
                    for _ in range(loops):
                        graph.replay()
                    b.record()
                    torch.cuda.synchronize()
                    graph_ms = a.elapsed_time(b) / loops
                except Exception as e:
                    graph_reason = first_line(e)
            st = stats(samples)
            cache_bytes = 2 * args.batch * args.heads * L * h * esize
            r = base | {"status": "ok", "cache_bytes": cache_bytes, "loop_mean_ms": loop_ms, "graph_mean_ms": graph_ms,
                        "gb_per_s_median": cache_bytes / (st["median_ms"] * 1e-3) / 1e9,
                        "gb_per_s_graph": cache_bytes / (graph_ms * 1e-3) / 1e9 if graph_ms else None} | st
            if graph_reason:
                r["graph_reason"] = graph_reason
            rec.write(r)
            say(f"{label}: median {st['median_ms'] * 1e3:8.1f} us, loop {loop_ms * 1e3:8.1f} us, graph "
                + (f"{graph_ms * 1e3:8.1f} us" if graph_ms else "n/a") + f"  ({cache_bytes / 2**20:.0f} MiB cache)")
        except torch.cuda.OutOfMemoryError as e:
            rec.write(base | {"status": "oom", "reason": first_line(e)})
            say(f"{label}: out of memory")
        except RuntimeError as e:
            text = first_line(e)
            status = "unavailable" if ("No available kernel" in text or "no SDPBackend" in text
                                       or "not selectable" in text) else "error"
            rec.write(base | {"status": status, "reason": text})
            say(f"{label}: {status}: {text[:160]}")
        except Exception as e:
            rec.write(base | {"status": "error", "reason": first_line(e)})
            say(f"{label}: error: {first_line(e)[:160]}")
        finally:
            torch.cuda.empty_cache()

    # Jobs in priority order (the run may be cut by --time-limit).
    main_backends = [b for b in backends if b in ("default", "cudnn", "flash")]
    late_backends = [b for b in backends if b not in ("default", "cudnn", "flash")]
    head_dims = list(args.head_dim)
    jobs = []
    if "sdpa" in what and head_dims:
        for b in main_backends:
            for n in args.n:
                jobs.append(("sdpa", b, n, head_dims[0]))
    dec_dtypes = [d.strip() for d in args.decode_dtype.split(",") if d.strip()]
    if set(dec_dtypes) - {"f16", "bf16", "f32"}:
        ap.error(f"--decode-dtype: unknown {sorted(set(dec_dtypes) - {'f16', 'bf16', 'f32'})}")
    if "decode" in what:
        dec_backends = [b for b in backends if b != "math"] + (["default+append"] if "default" in backends else [])
        for d in dec_dtypes:
            for h in args.decode_head_dim:
                for b in dec_backends:
                    for L in args.decode_context:
                        jobs.append(("decode", b, L, h, d))
    if "sdpa" in what:
        for h in head_dims[1:]:
            for b in main_backends:
                for n in args.n:
                    jobs.append(("sdpa", b, n, h))
        for h in head_dims:
            for b in late_backends:
                for n in args.n:
                    jobs.append(("sdpa", b, n, h))
    if "decode" in what and "math" in backends:
        for d in dec_dtypes:
            for h in args.decode_head_dim:
                for L in args.decode_context:
                    jobs.append(("decode", "math", L, h, d))
    for job in jobs:
        if job[0] == "sdpa":
            sdpa_shape(*job[1:])
        else:
            decode_shape(*job[1:])

    if "env" in what:
        rec.write({"type": "clocks_after", "nvidia_smi": nvidia_smi(), "elapsed_s": time.monotonic() - start})
    say(f"torch peer done in {time.monotonic() - start:.1f} s ({len(jobs)} shape jobs), {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
