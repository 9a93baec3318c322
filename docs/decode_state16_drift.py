#!/usr/bin/env python3
"""How far a polysketch decode state z stored in 16 bits (rounded after every step, as a 16-bit
state buffer would be) drifts from a float64 one: sketched local, p = 4, h = 16, r = 8, dv = 8,
random normal q, k, v; the output rows of 8 queries after n tokens against the float64 state's,
relative max error. docs/DECODING.md ("Limits and future work") quotes its output; a few seconds
in plain Python (no numpy)."""
import math, random, struct
random.seed(5)
h, r, dv = 16, 8, 8
Ga = [[random.gauss(0, 1) for _ in range(h)] for _ in range(r)]
Gb = [[random.gauss(0, 1) for _ in range(h)] for _ in range(r)]
pairs = [(a, a, 1.0) for a in range(r)] + [(a, b, math.sqrt(2)) for a in range(r) for b in range(a + 1, r)]
def S(x):
    return [sum(x[d] * Ga[c][d] for d in range(h)) * sum(x[d] * Gb[c][d] for d in range(h)) / math.sqrt(r) for c in range(r)]
def phi(s): return [w * s[a] * s[b] for a, b, w in pairs]
def f16(x):
    try: return struct.unpack('e', struct.pack('e', x))[0]
    except OverflowError: return math.copysign(math.inf, x)
def bf16(x):
    u = struct.unpack('I', struct.pack('f', x))[0]
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return struct.unpack('f', struct.pack('I', u))[0]
f32 = lambda x: struct.unpack('f', struct.pack('f', x))[0]
F = len(pairs)
zs = {name: [0.0] * (F * (dv + 1)) for name in ("f64", "f32", "f16", "bf16")}
rnd = {"f64": lambda x: x, "f32": f32, "f16": f16, "bf16": bf16}
scale = 1 / math.sqrt(h)
checks = {256, 1024, 4096}
for n in range(1, 4097):
    k = [random.gauss(0, 1) for _ in range(h)]
    v = [random.gauss(0, 1) for _ in range(dv)] + [1.0]
    pk = phi(S(k))
    for name, z in zs.items():
        rd = rnd[name]
        for f in range(F):
            pf = pk[f]
            base = f * (dv + 1)
            for c in range(dv + 1): z[base + c] = rd(z[base + c] + pf * v[c])
    if n in checks:
        errs = {}
        qs = [[random.gauss(0, 1) * scale for _ in range(h)] for _ in range(8)]
        outs = {}
        for name, z in zs.items():
            o = []
            for q in qs:
                pq = phi(S(q))
                num = [sum(pq[f] * z[f * (dv + 1) + c] for f in range(F)) for c in range(dv + 1)]
                o += [num[c] / (1 + num[dv]) for c in range(dv)]
            outs[name] = o
        ref = outs["f64"]
        mx = max(abs(x) for x in ref)
        print(n, {name: "%.2e" % (max((abs(a - b) if math.isfinite(a) else math.inf) for a, b in zip(outs[name], ref)) / mx) for name in ("f32", "f16", "bf16")}, flush=True)
