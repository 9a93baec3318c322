#!/usr/bin/env python3
"""Where a wrong cooperative feature map's S entries come from, read off the arrays a failing
FeatureMap16 case leaves in $PSK_TEST_ARTIFACTS (tests/polysketch_units_test.cpp; the GPU check
sets it to tests/artifacts/ of its tarball). Standard library only, so it runs anywhere.

    python3 tools/gpu_run/feature_map_forensics.py DIR [--case SUBSTRING]

For each case and side (q, k) it prints:
  - how many entries are wrong (threshold of the test: 1e-4 of the largest |want|), zero, infinite
    or NaN, and the wrong ones by row and column within a 16 x 16 fragment;
  - provenance: for each wrong entry, whether its value is, bit for bit as float32, another entry
    of the reference (an S entry moved) or an input value x (the diagnostics that return x, where
    a value moved by a layout error is found exactly), with the most common displacements
    (row offset, source column -> column);
  - the first fragment (rows 0-15, columns 0-15 of the first sequence) as a map: '.' right, 'T'
    the value of the transposed position in the same fragment, 'x' a value of the rows at row
    offset 0, a letter for another displacement, '?' no source;
  - for the random sketch, hypotheses about the cooperative operands recomputed in float64 and
    held against what the kernel wrote: the A operand (x) or the B operand (the weights)
    transposed inside each 16 x 16 fragment, or both, or the accumulators stored transposed, for
    the first product (diagnostic "product") and for S itself.
"""
import argparse
import glob
import math
import os
import re
import struct
import sys
from collections import Counter

FRAG = 16


def read(path, fmt):
    size = struct.calcsize(fmt)
    with open(path, "rb") as f:
        data = f.read()
    return list(struct.unpack("<%d%s" % (len(data) // size, fmt), data))


def f32(v):
    """v rounded to float32, as the bits a GPU writes (NaN and infinities kept)."""
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def shape_of(case, side):
    def field(pattern, default=None):
        m = re.search(pattern, case)
        return int(m.group(1)) if m else default
    heads = field(r"_Hq(\d+)_") if side == "q" else field(r"_Hkv(\d+)_")
    return {"r": field(r"_r(\d+)_"), "h": field(r"_h(\d+)_"), "n": field(r"_n(\d+)_"), "B": field(r"_B(\d+)_", 1), "heads": heads}


def matmul(x, n, k, w, m, transpose_a=False, transpose_b=False):
    """x (n x k, row-major) @ w (k x m), with either operand read transposed inside each 16 x 16
    fragment (row i, column j of a fragment taken from row j, column i of the same fragment)."""
    a = transposed_fragments(x, n, k) if transpose_a else x
    b = transposed_fragments(w, k, m) if transpose_b else w
    out = [0.0] * (n * m)
    for i in range(n):
        row = [0.0] * m
        for kk in range(k):
            v = a[i * k + kk]
            if v != 0.0:
                for j in range(m):
                    row[j] += v * b[kk * m + j]
        out[i * m:(i + 1) * m] = row
    return out


def transposed_fragments(values, n, m):
    """values (n x m, row-major) with each 16 x 16 fragment transposed (entries past the edges 0)."""
    out = [0.0] * (n * m)
    for i in range(n):
        for j in range(m):
            i0, j0 = i - i % FRAG, j - j % FRAG
            si, sj = i0 + j % FRAG, j0 + i % FRAG
            out[i * m + j] = values[si * m + sj] if si < n and sj < m else 0.0
    return out


def relative_error(got, want):
    top = max((abs(w) for w in want), default=0.0) or 1.0
    worst = 0.0
    for g, w in zip(got, want):
        if not math.isfinite(g):
            return math.inf
        worst = max(worst, abs(g - w))
    return worst / top


def analyse(base, side, out):
    case = os.path.basename(base)
    got = read(f"{base}.{side}.got.f32", "f")
    want = read(f"{base}.{side}.want.f64", "d")
    x = read(f"{base}.{side}.x.f64", "d") if os.path.exists(f"{base}.{side}.x.f64") else []
    s = shape_of(case, side)
    r, h, n = s["r"], s["h"], s["n"]
    if not r or not n or len(got) != len(want) or len(got) % (n * r):
        out(f"{case} {side}: shapes not understood (r {r}, n {n}, {len(got)} values)")
        return
    seqs = len(got) // (n * r)
    top = max((abs(w) for w in want), default=0.0) or 1.0
    wrong = [i for i, (g, w) in enumerate(zip(got, want)) if not (math.isfinite(g) and abs(g - w) <= 1e-4 * top)]
    out(f"{case} {side}: {len(wrong)} of {len(got)} wrong ({seqs} sequences x {n} rows x {r}), zero {sum(g == 0.0 for g in got)}, "
        f"infinite {sum(math.isinf(g) for g in got)}, NaN {sum(math.isnan(g) for g in got)}")
    if not wrong:
        return
    by_row = Counter((i // r % n) % FRAG for i in wrong)
    by_col = Counter(i % r % FRAG for i in wrong)
    out("  wrong by row % 16: " + " ".join(f"{k}:{by_row[k]}" for k in range(FRAG)))
    out("  wrong by column % 16: " + " ".join(f"{k}:{by_col[k]}" for k in range(FRAG)))

    # Provenance: float32 bits of each source value -> its (sequence, row, column).
    sources = {}
    for name, values, width in (("S", want, r), ("x", x, h)):
        if not values or not width:
            continue
        index = {}
        for i, v in enumerate(values):
            if v != 0.0:
                index.setdefault(bits(f32(v)), []).append((i // width // n, i // width % n, i % width))
        sources[name] = index
    patterns, found, grid, in_transposed = Counter(), 0, {}, 0
    for i in wrong:
        seq, row, col = i // r // n, i // r % n, i % r
        g = got[i]
        best = None
        if math.isfinite(g) and g != 0.0:
            for name, index in sources.items():
                for (sq, sr, sc) in index.get(bits(g), []):
                    if sq != seq:
                        continue
                    cand = (abs(sr - row), name, sr - row, sc)
                    if best is None or cand < best:
                        best = cand
        if best:
            found += 1
            src_row, src_col = row + best[2], best[3]
            transposed = (src_row - src_row % FRAG == row - row % FRAG and src_col - src_col % FRAG == col - col % FRAG
                          and src_row % FRAG == col % FRAG and src_col % FRAG == row % FRAG)
            in_transposed += transposed
            patterns[(best[1], best[2], best[3], col)] += 1
            if seq == 0 and row < FRAG and col < FRAG:
                grid[(row, col)] = "T" if transposed else (best[1], best[2], best[3])
        elif seq == 0 and row < FRAG and col < FRAG:
            grid[(row, col)] = None
    out(f"  provenance: {found} of {len(wrong)} wrong values are another S entry or an x value of the same sequence, bit for bit")
    if found:
        out(f"  of those, {in_transposed} sit at the transposed position of their fragment (row i, column j from row j, column i)")
        # Displacements summed over the columns: (source, row offset, column offset).
        moves = Counter()
        for (name, dr, sc, col), count in patterns.items():
            moves[(name, dr, sc - col)] += count
        out("  commonest moves (source, row offset, column offset: count): " +
            ", ".join(f"{nm}[{dr:+d}, {dc:+d}]: {c}" for (nm, dr, dc), c in moves.most_common(8)))
    letters, legend = {}, []
    lines = []
    for row in range(min(FRAG, n)):
        line = ""
        for col in range(min(FRAG, r)):
            if (row, col) not in grid:
                line += "."
            elif grid[(row, col)] is None:
                line += "?"
            elif grid[(row, col)] == "T":
                line += "T"
            else:
                name, dr, sc = grid[(row, col)]
                key = (name, dr, sc - col)
                if key == ("x", 0, 0):
                    line += "x"
                    continue
                if key not in letters:
                    letters[key] = chr(ord("a") + len(letters) % 26)
                    legend.append(f"{letters[key]} = {name}[row {dr:+d}, column {sc - col:+d}]")
                line += letters[key]
        lines.append(line)
    if found:
        out("  first fragment (rows 0-15 down, columns 0-15 across; '.' right, 'T' from the transposed position, '?' no source):")
        for line in lines:
            out("    " + line)
        if legend:
            out("    " + "; ".join(legend[:12]))

    # Hypotheses for the random sketch: the operands transposed inside their fragments.
    ga_path, gb_path = f"{base}.G.g1_0a.f32", f"{base}.G.g1_0b.f32"
    if not (x and h and os.path.exists(ga_path)):
        return
    ga = read(ga_path, "f")
    gb = read(gb_path, "f") if os.path.exists(gb_path) else None
    diagnostic = re.search(r"_diag_(\w+)$", case)
    mode = diagnostic.group(1) if diagnostic else "S"
    if mode not in ("S", "product") or len(ga) != h * r:
        return
    x0, got0, want0 = x[:n * h], got[:n * r], want[:n * r]
    scale = 1.0
    if mode == "S" and gb:
        p0, p1 = matmul(x0, n, h, ga, r), matmul(x0, n, h, gb, r)
        ratios = sorted(w / (a * b) for w, a, b in zip(want0, p0, p1) if abs(a * b) > 1e-3)
        scale = ratios[len(ratios) // 2] if ratios else 1.0
    out(f"  hypotheses for {mode} (first sequence; error as the test's, the kernel's is {relative_error(got0, want0):.3g}):")
    for ta, tb, tc in ((False, False, False), (True, False, False), (False, True, False), (True, True, False), (False, False, True)):
        p0 = matmul(x0, n, h, ga, r, ta, tb)
        if mode == "S":
            p1 = matmul(x0, n, h, gb, r, ta, tb)
            model = [scale * a * b for a, b in zip(p0, p1)]
        else:
            model = p0
        if tc:
            model = transposed_fragments(model, n, r)
        label = {(False, False, False): "as written", (True, False, False): "A transposed in its fragments",
                 (False, True, False): "B transposed in its fragments", (True, True, False): "A and B transposed",
                 (False, False, True): "the accumulators stored transposed in their fragments"}[(ta, tb, tc)]
        out(f"    {label}: against the kernel {relative_error(got0, [f32(v) for v in model]):.3g}, against the reference {relative_error(model, want0):.3g}")


def self_test():
    """Arrays of a made-up case whose kernel read the weights transposed in their fragments, and
    another whose accumulators went out transposed: the hypotheses must name each, and the
    provenance must find the transposed entries of a made-up "identity" diagnostic."""
    import random
    import tempfile
    rng = random.Random(7)
    n, h, r = 40, 32, 32
    x = [f32(rng.uniform(-1, 1)) for _ in range(n * h)]
    ga = [f32(rng.gauss(0, 1)) for _ in range(h * r)]
    gb = [f32(rng.gauss(0, 1)) for _ in range(h * r)]
    c = 1 / math.sqrt(r)
    want = [c * a * b for a, b in zip(matmul(x, n, h, ga, r), matmul(x, n, h, gb, r))]
    wrong_b = [f32(c * a * b) for a, b in zip(matmul(x, n, h, ga, r, False, True), matmul(x, n, h, gb, r, False, True))]
    cases = {
        f"random_p4_r{r}_b32_h{h}_dv32_n{n}_causal_Hq1_Hkv1_B1_f16_device": (wrong_b, want, "B transposed in its fragments"),
        f"random_p4_r{r}_b32_h{h}_dv32_n{n}_causal_Hq1_Hkv1_B1_f16_device_tc": (
            [f32(v) for v in transposed_fragments(want, n, r)], want, "the accumulators stored transposed"),
        f"random_p4_r{r}_b32_h{h}_dv32_n{n}_causal_Hq1_Hkv1_B1_f16_device_diag_identity": (
            [f32(v) for v in transposed_fragments(x, n, r)], x, None),
    }
    failures = []
    with tempfile.TemporaryDirectory() as d:
        for case, (got, expect, named) in cases.items():
            base = os.path.join(d, case)
            for suffix, values, fmt in ((".q.got.f32", got, "f"), (".q.want.f64", expect, "d"), (".q.x.f64", x, "d"),
                                        (".G.g1_0a.f32", ga, "f"), (".G.g1_0b.f32", gb, "f")):
                with open(base + suffix, "wb") as f:
                    f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
            lines = []
            analyse(base, "q", lines.append)
            if named:
                best = min((float(l.rsplit("against the kernel ", 1)[1].split(",")[0]), l.strip().split(":")[0])
                           for l in lines if "against the kernel" in l)
                if not best[1].startswith(named) or best[0] > 1e-5:
                    failures.append(f"{case}: best hypothesis {best}, want '{named}'")
            else:
                wrong = int(lines[0].split(": ", 1)[1].split()[0])
                transposed = [l for l in lines if "transposed position of their fragment" in l]
                # All but the entries moved in from rows past n (zeros, no source).
                if not transposed or int(transposed[0].split()[2]) < 0.8 * wrong:
                    failures.append(f"{case}: provenance did not find the transposed fragments: {transposed}")
    for f in failures:
        print("FAIL " + f)
    print("OK feature_map_forensics self-test" if not failures else "FAIL feature_map_forensics self-test")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", nargs="?")
    parser.add_argument("--case", default="")
    parser.add_argument("--self-test", action="store_true", help="check the analysis on made-up arrays")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.dir:
        parser.error("DIR is required")
    bases = sorted({p[:-len(".q.got.f32")] if p.endswith(".q.got.f32") else p[:-len(".k.got.f32")]
                    for p in glob.glob(os.path.join(args.dir, "*.got.f32")) if args.case in os.path.basename(p)})
    if not bases:
        print(f"no *.got.f32 arrays in {args.dir}", file=sys.stderr)
        return 1
    for base in bases:
        for side in ("q", "k"):
            if os.path.exists(f"{base}.{side}.got.f32"):
                analyse(base, side, print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
