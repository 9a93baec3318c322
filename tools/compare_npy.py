#!/usr/bin/env python3
"""Compare .npy outputs of polysketch runs, and make the fixture's inputs (standard library only).

Used by tools/gpu_prepare.sh (here, on lavapipe) and tools/gpu_run.sh (on the GPU machine), where
nothing but python3 may be installed: no numpy. Reads and writes little-endian float16 ('<f2'),
float32 ('<f4') and float64 ('<f8') arrays in C order, .npy format versions 1 to 3.

    compare_npy.py compare GOT.npy WANT.npy [--tol 2e-3] [--heads-rolled] [--label L] [--json FILE]
        max relative error = max |got - want| / max |want| over every element (and the norm-wise
        ||got - want|| / ||want||, reported only); exit 0 when it is <= --tol and every element of
        GOT is finite, 1 when not, 2 for unreadable files or shapes that do not fit together.
        --heads-rolled: GOT is [B, H, n, d] from inputs made by `tile-heads --roll`, WANT is the
        one-head [B, 1, n, d] answer; head i of GOT must equal WANT with its last axis rolled by i
        (attention is linear in v: rolling v's columns rolls the output's).
        One summary line on stdout; --json appends the same as one JSON object per line.
    compare_npy.py random OUT.npy --shape 1,1,16461,64 [--dtype f16|f32] [--seed S] [--sigma X]
        standard normal values (Python's random.gauss, seeded), rounded to the storage type.
    compare_npy.py tile-heads IN.npy OUT.npy --heads H [--roll]
        [B, 1, n, d] -> [B, H, n, d]: the one head repeated H times; with --roll head i has its
        last axis rolled by i (for v), so that a head mixed up with another shows in the output.
    compare_npy.py perturb IN.npy OUT.npy [--index I] [--delta X]
        a copy with element I (default: the largest in magnitude) moved by X times max |IN|
        (default 0.01): a file compare must reject (the harness' own test).
    compare_npy.py info FILE.npy
        shape, dtype, min, max, max |x|, non-finite count.
"""
import argparse
import ast
import json
import math
import operator
import random
import struct
import sys
from array import array

MAGIC = b"\x93NUMPY"
# descr -> (struct code, bytes per element)
TYPES = {"<f2": ("e", 2), "<f4": ("f", 4), "<f8": ("d", 8)}
NAMES = {"f16": "<f2", "f32": "<f4", "f64": "<f8"}


class NpyError(Exception):
    pass


def read_header(f, path):
    magic = f.read(6)
    if magic != MAGIC:
        raise NpyError(f"{path}: not a .npy file")
    major, _minor = f.read(2)
    if major == 1:
        (hlen,) = struct.unpack("<H", f.read(2))
    elif major in (2, 3):
        (hlen,) = struct.unpack("<I", f.read(4))
    else:
        raise NpyError(f"{path}: .npy version {major} is not supported")
    header = f.read(hlen).decode("latin1" if major < 3 else "utf-8")
    try:
        d = ast.literal_eval(header.strip())
    except (ValueError, SyntaxError) as e:
        raise NpyError(f"{path}: bad header {header!r}: {e}")
    descr, fortran, shape = d.get("descr"), d.get("fortran_order"), d.get("shape")
    if descr == "=f2" or descr == "=f4" or descr == "=f8":
        descr = "<" + descr[1:] if sys.byteorder == "little" else ">" + descr[1:]
    if descr not in TYPES:
        raise NpyError(f"{path}: dtype {descr!r}: only little-endian float16/32/64 are read")
    if fortran:
        raise NpyError(f"{path}: Fortran order is not supported")
    if not isinstance(shape, tuple):
        raise NpyError(f"{path}: bad shape {shape!r}")
    return descr, tuple(int(s) for s in shape)


def read_raw(path):
    """(descr, shape, raw little-endian bytes)."""
    with open(path, "rb") as f:
        descr, shape = read_header(f, path)
        count = 1
        for s in shape:
            count *= s
        size = TYPES[descr][1]
        data = f.read(count * size)
    if len(data) != count * size:
        raise NpyError(f"{path}: {len(data)} bytes of data, the shape {shape} needs {count * size}")
    return descr, shape, data


def to_floats(descr, data):
    """A sequence of Python floats (array('f'/'d') or a list for float16)."""
    code, size = TYPES[descr]
    if code == "e":
        out = array("f")
        step = 1 << 20  # unpack in slices: one huge struct call needs a huge tuple
        for i in range(0, len(data) // 2, step):
            chunk = data[2 * i:2 * min(len(data) // 2, i + step)]
            out.extend(struct.unpack(f"<{len(chunk) // 2}e", chunk))
        return out
    out = array(code)
    out.frombytes(data)
    if sys.byteorder != "little":
        out.byteswap()
    return out


def read(path):
    descr, shape, data = read_raw(path)
    return descr, shape, to_floats(descr, data)


def write_raw(path, descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (descr, tuple(shape))
    # Pad so that the data starts at a multiple of 64 bytes, header ending in a newline (format 1.0).
    total = len(MAGIC) + 2 + 2 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(MAGIC + bytes([1, 0]) + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(data)


def pack(descr, values):
    code, _ = TYPES[descr]
    if code == "e":
        out = bytearray()
        step = 1 << 20
        for i in range(0, len(values), step):
            chunk = values[i:i + step]
            out += struct.pack(f"<{len(chunk)}e", *chunk)
        return bytes(out)
    a = array(code, values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def parse_shape(text):
    try:
        shape = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise NpyError(f"bad --shape {text!r}")
    if not shape or any(s <= 0 for s in shape):
        raise NpyError(f"bad --shape {text!r}")
    return shape


# ------------------------------------------------------------------------------------------------


def rolled_rows(want, d, shift):
    """want (rows of d values) with every row rolled right by shift: out[j] = want[(j - shift) % d]."""
    shift %= d
    if shift == 0:
        return want
    out = array(want.typecode) if isinstance(want, array) else []
    for r in range(0, len(want), d):
        row = want[r:r + d]
        out.extend(row[d - shift:])
        out.extend(row[:d - shift])
    return out


def cmd_compare(args):
    gd, gshape, got = read(args.got)
    wd, wshape, want = read(args.want)
    pairs = []  # (got slice, want values) to compare
    if args.heads_rolled:
        if len(gshape) != 4 or len(wshape) != 4 or wshape[1] != 1 or gshape[0] != wshape[0] or gshape[2:] != wshape[2:]:
            raise NpyError(f"--heads-rolled needs GOT [B, H, n, d] and WANT [B, 1, n, d]; got {gshape} and {wshape}")
        B, H, n, d = gshape
        per = n * d
        for b in range(B):
            w = want[b * per:(b + 1) * per]
            for h in range(H):
                start = (b * H + h) * per
                pairs.append((got[start:start + per], rolled_rows(w, d, h)))
    else:
        if gshape != wshape:
            raise NpyError(f"shapes differ: {args.got} {gshape}, {args.want} {wshape}")
        pairs.append((got, want))

    # C-level loops (map, sum, max) rather than a Python loop: 17 M elements in seconds.
    max_diff, max_at, max_want, sum_d2, sum_w2, nonfinite, offset = 0.0, -1, 0.0, 0.0, 0.0, 0, 0
    for g, w in pairs:
        count = len(g)
        if not math.isfinite(sum(g)):  # a float32 sum cannot overflow a double: exactly "any inf or NaN"
            nonfinite += sum(1 for x in g if not math.isfinite(x))
            keep = [i for i, x in enumerate(g) if math.isfinite(x)]
            g = array("d", (g[i] for i in keep))
            w = array("d", (w[i] for i in keep))
        d = array("d", map(operator.sub, g, w))
        if len(d):
            ad = array("d", map(abs, d))
            m = max(ad)
            if m > max_diff or max_at < 0:
                max_diff, max_at = m, offset + ad.index(m)
            max_want = max(max_want, max(map(abs, w)))
            sum_d2 += sum(map(operator.mul, d, d))
            sum_w2 += sum(map(operator.mul, w, w))
        offset += count
    rel = max_diff / max_want if max_want > 0 else (0.0 if max_diff == 0 else math.inf)
    norm_rel = math.sqrt(sum_d2 / sum_w2) if sum_w2 > 0 else (0.0 if sum_d2 == 0 else math.inf)
    ok = nonfinite == 0 and rel <= args.tol and max_want > 0
    label = args.label or args.got
    where = ""
    if max_at >= 0:
        idx, rest = [], max_at
        for s in reversed(gshape):
            idx.append(rest % s)
            rest //= s
        where = " at [" + ",".join(str(i) for i in reversed(idx)) + "]"
    reason = ""
    if nonfinite:
        reason = f", {nonfinite} non-finite elements"
    elif max_want == 0:
        reason = ", the expected output is all zeros"
    print(f"{'PASS' if ok else 'FAIL'} {label}: max rel. error {rel:.3e}{where} (tol {args.tol:g}), "
          f"norm rel. error {norm_rel:.3e}, max |want| {max_want:.4g}, shape {list(gshape)} {gd}"
          f"{' heads-rolled' if args.heads_rolled else ''}{reason}", flush=True)
    if args.json:
        with open(args.json, "a", encoding="utf-8") as f:
            f.write(json.dumps({"label": label, "status": "pass" if ok else "fail", "max_rel_error": rel,
                                "norm_rel_error": norm_rel, "max_abs_want": max_want, "tol": args.tol,
                                "nonfinite": nonfinite, "max_at": max_at, "shape": list(gshape),
                                "got": args.got, "want": args.want, "heads_rolled": args.heads_rolled}) + "\n")
    return 0 if ok else 1


def cmd_random(args):
    shape = parse_shape(args.shape)
    descr = NAMES[args.dtype]
    count = 1
    for s in shape:
        count *= s
    rng = random.Random(args.seed)
    values = [rng.gauss(0.0, args.sigma) for _ in range(count)]
    write_raw(args.out, descr, shape, pack(descr, values))
    print(f"wrote {args.out}: {list(shape)} {descr}, seed {args.seed}, sigma {args.sigma}")
    return 0


def cmd_tile_heads(args):
    descr, shape, data = read_raw(args.inp)
    if len(shape) != 4 or shape[1] != 1:
        raise NpyError(f"{args.inp}: tile-heads needs [B, 1, n, d], got {shape}")
    B, _, n, d = shape
    size = TYPES[descr][1]
    row = d * size
    per = n * row
    out = bytearray()
    mv = memoryview(data)
    for b in range(B):
        head = mv[b * per:(b + 1) * per]
        for h in range(args.heads):
            shift = (h % d) if args.roll else 0
            if shift == 0:
                out += head
                continue
            cut = (d - shift) * size
            for r in range(0, per, row):
                out += head[r + cut:r + row]
                out += head[r:r + cut]
    write_raw(args.out, descr, (B, args.heads, n, d), bytes(out))
    print(f"wrote {args.out}: {[B, args.heads, n, d]} {descr}{' (head i rolled by i)' if args.roll else ''}")
    return 0


def cmd_perturb(args):
    descr, shape, values = read(args.inp)
    values = array("d", values)
    big = max(range(len(values)), key=lambda i: abs(values[i])) if args.index is None else args.index
    scale = max(abs(x) for x in values)
    values[big] += args.delta * scale
    write_raw(args.out, descr, shape, pack(descr, list(values)))
    print(f"wrote {args.out}: element {big} moved by {args.delta:g} x max |x| = {args.delta * scale:.4g}")
    return 0


def cmd_info(args):
    descr, shape, values = read(args.file)
    finite = [x for x in values if math.isfinite(x)]
    print(f"{args.file}: shape {list(shape)} {descr}, min {min(finite) if finite else 'n/a'}, "
          f"max {max(finite) if finite else 'n/a'}, max |x| {max((abs(x) for x in finite), default=0.0)}, "
          f"non-finite {len(values) - len(finite)}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[4:]))
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("compare", help="GOT against WANT: max |got - want| / max |want| <= --tol")
    p.add_argument("got")
    p.add_argument("want")
    p.add_argument("--tol", type=float, default=2e-3)
    p.add_argument("--heads-rolled", action="store_true")
    p.add_argument("--label")
    p.add_argument("--json")
    p.set_defaults(fn=cmd_compare)
    p = sub.add_parser("random", help="a seeded standard-normal array")
    p.add_argument("out")
    p.add_argument("--shape", required=True)
    p.add_argument("--dtype", choices=sorted(NAMES), default="f16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sigma", type=float, default=1.0)
    p.set_defaults(fn=cmd_random)
    p = sub.add_parser("tile-heads", help="[B, 1, n, d] -> [B, H, n, d]")
    p.add_argument("inp")
    p.add_argument("out")
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--roll", action="store_true")
    p.set_defaults(fn=cmd_tile_heads)
    p = sub.add_parser("perturb", help="a copy with one element moved")
    p.add_argument("inp")
    p.add_argument("out")
    p.add_argument("--index", type=int)
    p.add_argument("--delta", type=float, default=0.01)
    p.set_defaults(fn=cmd_perturb)
    p = sub.add_parser("info", help="shape, dtype and range of a file")
    p.add_argument("file")
    p.set_defaults(fn=cmd_info)
    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except (NpyError, OSError) as e:
        print(f"ERROR {getattr(args, 'label', None) or args.cmd}: {e}", flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
