#!/usr/bin/env python3
"""Roofline predictions for the polysketch forward on an H100 SXM / H200 (docs/PERFORMANCE.md,
"Predictions for an H100 (before any GPU run)"). Plain Python 3, no dependencies:

    python3 docs/predictions.py            # every table of that section, as Markdown

Everything here is a model with stated assumptions (the constants below), not a measurement.
Data movement follows the generic kernels as planned for a GPU (lib/forward/polysketch_plan.cpp,
shaders/sketch_features.comp, block_states.comp, block_scan.comp, polysketch_output.comp):
  - feature map: one row per invocation, 64 rows per workgroup, every workgroup reads both h x r
    sketch matrices (L1/L2 broadcast);
  - block states: one workgroup per 64 features x all 64 value columns of one block, so the
    block's S(k) and V rows are read ceil(F / 64) times; the last feature tile is padded;
  - scan: every state float read once and written once (in place, vec4 columns);
  - output: 64 query rows per workgroup, so Z_l is read b / 64 = 4 times per block, and the
    local keys/values of a block are read by its 4 tiles for 64, 128, 192, 256 keys (640 rows).
Scenario (b) assumes the same tilings with the products on cooperative matrices (the block-states
kernel, block_states_coopmat.comp, tile of 64 features; the output kernel as planned, 64 query
rows), except the feature map, whose cooperative kernel (sketch_features_coopmat.comp, p = 4,
random and learned sketches) is modelled as written: every operand split into 16-bit hi + lo, three
16-bit products per GEMM step (hi*hi, hi*lo, lo*hi) into float32, the weights staged from the
float32 pack through shared memory by every workgroup, 32 rows per workgroup (random) or 16
(learned) at h = 64, the plan's first tile that fits 32 KiB (lib/forward/polysketch_plan.cpp).
The learned sketch (docs/MATH.md section 4) has two branches of two FF levels, h -> 8r -> r and
r -> 8r -> r (hidden = 8r, lib/sketch/sketch_pack.cpp); the other stages do not depend on the sketch.
The workspace (lib/forward/polysketch_forward.cpp, docs/ARCHITECTURE.md) is packed into several
allocations when it exceeds one, so a call fails only when one region exceeds maxStorageBufferRange.
"""

import math

# ---------------------------------------------------------------- assumptions (labelled)
B, H, h, dv, b, p = 1, 16, 64, 64, 256, 4
STRIDE = 68                 # state row: dv + 1 = 65 floats padded to a multiple of 4 (generic kernels)
IN_BYTES = 2                # float16 storage of q, k, v, o
NS = [4096, 8192, 16384, 32768, 65536, 131072]
RS = [32, 64]
OUT_ROWS = 64               # generic output: query rows per workgroup
FEAT_TILE_STATES = 64       # generic and coopmat block states: features per workgroup
DISPATCHES = 5              # features q, features k, states, scan, output
LAUNCH_S = 5e-6             # per dispatch (the brief's figure; labelled an assumption)
HIDDEN_PER_R = 8            # learned sketch: hidden width 8r (lib/sketch/sketch_pack.cpp, docs/MATH.md section 4)
COOP_PRODUCTS = 3           # sketch_features_coopmat: hi*hi + hi*lo + lo*hi per GEMM step
FEAT_ROWS_GENERIC = 64      # generic feature map: rows per workgroup (one per invocation)
FEAT_ROWS_COOP = {False: 32, True: 32}   # coopmat feature map, rows per workgroup at h = 64, r = 32 and 64 (48 KiB)
                            # (random: tile 2 x 2 subgroups of 16 rows, 30,724 bytes; learned: 2 x 2, 39,940 / 48,132
                            # under the cooperative kernels' 48 KiB, PolysketchTiles::coopSharedBytesCap)
SPLIT_OPS = 3               # FP32 ops to split one staged element into hi + lo (round, subtract, round)
ACT_OPS = 10                # FP32 ops per gelu (tanh form) or per tanh of the combine (assumption)
MAX_RANGE = 2**32 - 1       # maxStorageBufferRange on NVIDIA (4 GiB - 1; docs/GPU_RUN.md)
MAX_ALLOC = 4 * 2**30       # maxMemoryAllocationSize, ~4 GiB on NVIDIA (the cap before the split)

FP32_PEAK = 60e12           # H100 SXM non-tensor FP32 (spec 67 at the 1.98 GHz boost; ~60 at sustained clocks)
TC_PEAK = 989e12            # H100 SXM dense FP16 tensor (same die and clocks in the H200)
EFF_FP32 = 0.35             # generic shared-memory kernels: LDS-bound inner loops (~1 LDS.128 per 4 FMA)
EFF_TC = 0.30               # Vulkan cooperative matrices (mma.sync class, no wgmma/TMA): FA2's level on H100
DEVICES = {"H100 SXM": 3.35e12, "H200": 4.8e12}   # HBM bandwidth, bytes/s

# Published SDPA forward throughput, H100 80GB SXM5, FP16, causal, head dim 64 (FlashAttention-3
# paper, Shah et al. 2024, arXiv:2407.08608, Figure 5, "with causal mask, head dim 64"), TFLOP/s
# with the causal FLOP convention 4 n^2 h H / 2. The paper's shapes have B*n = 16k tokens and
# H*h = 2048; beyond 16k the 16k value is held (a plateau).
SDPA = {
    "FA2": {512: 180, 1024: 229, 2048: 262, 4096: 284, 8192: 295, 16384: 299},
    "cuDNN": {512: 225, 1024: 288, 2048: 334, 4096: 363, 8192: 379, 16384: 388},
    "FA3": {512: 197, 1024: 265, 2048: 371, 4096: 420, 8192: 460, 16384: 473},
}


def sdpa_rate(kind, n):
    pts = sorted(SDPA[kind].items())
    if n <= pts[0][0]:
        return pts[0][1] * 1e12
    if n >= pts[-1][0]:
        return pts[-1][1] * 1e12
    for (n0, r0), (n1, r1) in zip(pts, pts[1:]):
        if n0 <= n <= n1:
            w = math.log(n / n0) / math.log(n1 / n0)
            return (r0 + w * (r1 - r0)) * 1e12


def sdpa_flop(n):
    # QK^T and PV: 2 n^2 h + 2 n^2 dv per head for every pair; causal keeps half: 2 n^2 h per head (h = dv)
    return 4 * n * n * h * H / 2


def sdpa_time(kind, n):
    return sdpa_flop(n) / sdpa_rate(kind, n)


# ---------------------------------------------------------------- the polysketch stages
def stages(n, r, coop, learned=False):
    """Per stage: (bench FLOP, fp32-unit ops, tensor FLOP, compulsory bytes, issued bytes)."""
    F = r * (r + 1) // 2
    t = math.ceil(n / b)
    Fpad = math.ceil(F / FEAT_TILE_STATES) * FEAT_TILE_STATES
    pairs = t * b * (b + 1) // 2                      # causal pairs inside blocks (n a multiple of b)
    out = {}

    # 1. feature map of q and of k: LayerNorm (~8h) + scale (h) + the sketch's products + the rest.
    rows = 2 * n * H
    if learned:
        hid = HIDDEN_PER_R * r
        per_row_w = 2 * (h * hid + hid * r + r * hid + hid * r)   # two branches: D1, D2 of both levels
        per_row_mm = 2 * per_row_w                                # one multiply-add per weight and row
        # per branch: LayerNorms of h and of r (~8 ops per element), gelu of 2 x 8r hidden units;
        # then f1 * f2, tanh and scale per output
        per_row_other = 9 * h + 2 * (8 * (h + r) + 2 * hid * ACT_OPS) + r * (ACT_OPS + 3)
        per_row_a = 2 * ((h + hid) + (r + hid))                   # A operands staged per row (coop)
    else:
        per_row_w = 2 * h * r                                     # G_a, G_b
        per_row_mm = 2 * per_row_w
        per_row_other = 9 * h + 2 * r
        per_row_a = h
    bench = rows * (2 * 2 * h * r + F)                # psk bench: n (S + F), S = 2 m h r (random formula for both)
    if coop:
        wg_rows = FEAT_ROWS_COOP[learned]
        split = per_row_a + per_row_w / wg_rows       # every staged operand element split into hi + lo
        fp32 = rows * (per_row_other + SPLIT_OPS * split)
        tc = rows * per_row_mm * COOP_PRODUCTS
    else:
        wg_rows = FEAT_ROWS_GENERIC
        fp32 = rows * (per_row_other + per_row_mm)
        tc = 0
    comp = H * (2 * n * h * IN_BYTES + 2 * n * r * 4 + 2 * n * h * 4)
    issued = comp + rows * (per_row_w * 4) / wg_rows  # every workgroup reads all the weights (float32)
    out["features"] = (bench, fp32, tc, comp, issued)

    # 2. block states: H_l = psi(S(K_l))^T [V_l | 1], tiles of 64 features (last one padded).
    bench = 2 * H * n * F * (dv + 1)
    if coop:
        tc = 2 * H * n * Fpad * dv                    # GEMM over dv columns
        fp32 = H * n * Fpad * (2 + 1)                 # psi expansion (2 mul) + ones column (1 add)
    else:
        tc = 0
        fp32 = H * n * Fpad * (2 * (dv + 1) + 2)
    comp = H * (n * r * 4 + n * dv * IN_BYTES + t * F * STRIDE * 4)
    issued = H * ((n * r * 4 + n * dv * IN_BYTES) * math.ceil(F / FEAT_TILE_STATES) + t * F * STRIDE * 4)
    out["states"] = (bench, fp32, tc, comp, issued)

    # 3. exclusive Blelloch scan over t blocks, in place: ~2 adds per element (up- and down-sweep).
    bench = H * t * F * (dv + 1)
    fp32 = 2 * H * t * F * STRIDE
    comp = issued = 2 * H * t * F * STRIDE * 4
    out["scan"] = (bench, fp32, 0, comp, issued)

    # 4. output: phi(q)^T Z_l (rows of blocks > 0) + exact local part + normalization.
    rows_inter = H * (n - b)
    bench = 2 * H * n * F * (dv + 1) + H * pairs * (2 * h + 2 * (dv + 1))
    per_pair = 2 * h + 2 * dv + 4                     # score, x^4 (2 mul), weight x [v|1], mask
    if coop:
        slots = t * (b // 16) * (b // 16 + 1) // 2 * 256 * H   # 16 x 16 tiles on/below the diagonal
        # phi(q)^T Z with Z as two 16-bit operands, hi + lo (two products): polysketch_output_coopmat,
        # step 2; each row tile splits the Z chunks it stages.
        tc = rows_inter * 2 * F * dv * 2 + slots * (2 * h + 2 * dv)
        fp32 = rows_inter * 4 * F + slots * 4 + H * n * (dv + 2) + H * (t - 1) * (b // OUT_ROWS) * F * (dv + 1) * SPLIT_OPS
    else:
        warps = b // 32                               # lanes of a warp idle past their own row
        slots = H * t * (b * (b + 1) // 2 + warps * (32 * 32 - 32 * 33 // 2))
        tc = 0
        fp32 = rows_inter * (2 * F + 2 * F * (dv + 1)) + slots * per_pair + H * n * (dv + 2)
    z_once = H * (t - 1) * F * STRIDE * 4
    local_rows = H * n * (h * 4 + dv * IN_BYTES)      # k' (float32) and v rows
    base = H * n * (r * 4 + h * 4 + dv * IN_BYTES)    # S(q), q', o
    comp = base + z_once + local_rows
    tiles = b // OUT_ROWS
    local_factor = sum(range(1, tiles + 1)) / tiles   # 640 / 256 = 2.5
    issued = base + z_once * tiles + local_rows * local_factor + H * n / OUT_ROWS * F * 4
    out["output"] = (bench, fp32, tc, comp, issued)
    return out


def stage_time(s, bw, issued=True):
    bench, fp32, tc, comp, iss = s
    t_flop = fp32 / (EFF_FP32 * FP32_PEAK) + tc / (EFF_TC * TC_PEAK)
    t_byte = (iss if issued else comp) / bw
    return max(t_flop, t_byte), t_flop, t_byte


def total(n, r, coop, bw, issued=True, learned=False):
    st = stages(n, r, coop, learned)
    return sum(stage_time(s, bw, issued)[0] for s in st.values()) + DISPATCHES * LAUNCH_S


def crossover(r, coop, bw, kind, issued=True, learned=False):
    n = 256
    while n < 1 << 22:
        if total(n, r, coop, bw, issued, learned) <= sdpa_time(kind, n):
            return n
        n += 256
    return None


def workspace(n, r):
    """polysketchWorkspace (lib/forward/polysketch_forward.cpp) for p = 4, causal, local exact:
    (total bytes, largest region bytes, its name)."""
    t = math.ceil(n / b)
    regions = {"q sketches": H * n * r * 4, "k sketches": H * n * r * 4, "local q rows": H * n * h * 4,
               "local k rows": H * n * h * 4, "states": H * t * (r * (r + 1) // 2) * STRIDE * 4}
    tot = sum(math.ceil(x / 256) * 256 for x in regions.values())
    name = max(regions, key=regions.get)
    return tot, regions[name], name


def k(n):
    return f"{n // 1024}k"


def ms(x):
    return f"{x * 1e3:.3f}" if x < 0.01 else f"{x * 1e3:.2f}" if x < 0.1 else f"{x * 1e3:.1f}"


def print_crossovers(coop, learned):
    """One line per (r, where the re-reads go): the n at which polysketch overtakes each SDPA kernel."""
    for r in RS:
        for issued in (True, False):
            parts = []
            for dev, bw in DEVICES.items():
                for kind in ("FA2", "cuDNN", "FA3"):
                    c = crossover(r, coop, bw, kind, issued, learned=learned)
                    parts.append(f"{dev} vs {kind}: {c / 1024:.1f}k" if c else f"{dev} vs {kind}: none")
            what = "re-reads at HBM" if issued else "re-reads in L2"
            print(f"- {'learned, ' if learned else ''}crossover r = {r} ({what}): " + "; ".join(parts))


def main():
    print("### Work and traffic per stage (whole forward, B = 1, H = 16)\n")
    for r in RS:
        F = r * (r + 1) // 2
        print(f"r = {r} (F = {F}): GFLOP as psk bench counts it / MB compulsory / MB issued by the generic kernels\n")
        print("| n | features | states | scan | output | total |")
        print("| --- | --- | --- | --- | --- | --- |")
        for n in NS:
            st = stages(n, r, False)
            cells = [f"{s[0] / 1e9:.2f} / {s[3] / 1e6:.0f} / {s[4] / 1e6:.0f}" for s in st.values()]
            tot = [sum(s[i] for s in st.values()) for i in (0, 3, 4)]
            cells.append(f"**{tot[0] / 1e9:.1f} / {tot[1] / 1e6:.0f} / {tot[2] / 1e6:.0f}**")
            print(f"| {k(n)} | " + " | ".join(cells) + " |")
        print()

    print("Learned sketch, feature stage (q and k): GFLOP of products as executed (generic / cooperative, "
          f"x {COOP_PRODUCTS}) / MB compulsory / MB issued (generic, cooperative)\n")
    print("| n | r | GFLOP generic / cooperative | MB compulsory | MB issued generic | MB issued cooperative |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in NS:
        for r in RS:
            a, c = stages(n, r, False, True)["features"], stages(n, r, True, True)["features"]
            print(f"| {k(n)} | {r} | {a[1] / 1e9:.0f} / {c[2] / 1e9:.0f} | {a[3] / 1e6:.0f} | {a[4] / 1e6:.0f} | {c[4] / 1e6:.0f} |")
    print()

    print("Workspace (p = 4, causal, local exact; regions aligned to 256 bytes)\n")
    print("| n | r | workspace | largest region | predicted |")
    print("| --- | --- | --- | --- | --- |")
    for n in NS:
        for r in RS:
            tot, big, name = workspace(n, r)
            if big > MAX_RANGE:
                verdict = f"TOO_LARGE: {name} over maxStorageBufferRange ({MAX_RANGE / 1e9:.2f} GB)"
            elif tot > MAX_ALLOC:
                verdict = "runs: split over several allocations"
            else:
                verdict = "runs: one allocation"
            print(f"| {k(n)} | {r} | {tot / 1e9:.2f} GB | {name} {big / 1e9:.2f} GB | {verdict} |")
    print()

    for coop in (False, True):
        name = "(b) cooperative matrices" if coop else "(a) generic kernels, FP32 units"
        print(f"### Scenario {name}\n")
        print(f"Stage times on the H100 SXM (ms, re-reads at HBM); totals include {DISPATCHES} x {LAUNCH_S * 1e6:.0f} us of launches; "
              "SDPA (published H100 rates) on both devices.\n")
        print("| n | r | features | states | scan | output | **total H100** | total H100, re-reads in L2 "
              "| total H200 | SDPA FA2 | SDPA cuDNN | FA2 / polysketch (H100) | cuDNN / polysketch (H100) |")
        print("| --- " * 13 + "|")
        for n in NS:
            for r in RS:
                st = stages(n, r, coop)
                bw = DEVICES["H100 SXM"]
                cells = [ms(stage_time(s, bw)[0]) for s in st.values()]
                t100 = total(n, r, coop, bw)
                t100c = total(n, r, coop, bw, issued=False)
                t200 = total(n, r, coop, DEVICES["H200"])
                fa2, cud = sdpa_time("FA2", n), sdpa_time("cuDNN", n)
                print(f"| {k(n)} | {r} | " + " | ".join(cells) + f" | **{ms(t100)}** | {ms(t100c)} "
                      f"| {ms(t200)} | {ms(fa2)} | {ms(cud)} | {fa2 / t100:.2f}x | {cud / t100:.2f}x |")
        print()
        print_crossovers(coop, learned=False)
        for n in (32768, 131072):
            for kind in ("FA2", "cuDNN", "FA3"):
                s = sdpa_time(kind, n)
                parts = [f"{dev}: {s / total(n, 32, coop, bw, iss):.1f}x" for dev, bw in DEVICES.items() for iss in (True, False)]
                print(f"- r = 32, {k(n)}, {kind} ({ms(s)} ms) / polysketch, [HBM re-reads, L2 re-reads] per device: " + ", ".join(parts))
        st = stages(32768, 32, coop)
        tt = [stage_time(s, DEVICES["H100 SXM"])[0] for s in st.values()]
        print("- shares at 32k, r = 32, H100: " + ", ".join(f"{nm} {x / sum(tt):.0%}" for nm, x in zip(st, tt)))
        st = stages(32768, 64, coop)
        tt = [stage_time(s, DEVICES["H100 SXM"])[0] for s in st.values()]
        print("- shares at 32k, r = 64, H100: " + ", ".join(f"{nm} {x / sum(tt):.0%}" for nm, x in zip(st, tt)))
        print()
        # bound per stage at 32k, r = 32, H100
        st = stages(32768, 32, coop)
        parts = []
        for nm, s in st.items():
            tt, tf, tb = stage_time(s, DEVICES["H100 SXM"])
            parts.append(f"{nm} {'FLOP' if tf >= tb else 'bytes'} ({ms(tf)} vs {ms(tb)} ms)")
        print("- bound at 32k, r = 32, H100: " + "; ".join(parts))
        print()

        print(f"Learned sketch, scenario {name[:3]}: the feature stage and the totals (other stages as above)\n")
        print("| n | r | features (FLOP / bytes issued, ms) | **total H100** | total H100, re-reads in L2 "
              "| total H200 | FA2 / polysketch (H100) | cuDNN / polysketch (H100) | FA2 / polysketch (H100, L2) |")
        print("| --- " * 9 + "|")
        for n in NS:
            for r in RS:
                bw = DEVICES["H100 SXM"]
                tt, tf, tb = stage_time(stages(n, r, coop, True)["features"], bw)
                t100 = total(n, r, coop, bw, learned=True)
                t100c = total(n, r, coop, bw, issued=False, learned=True)
                t200 = total(n, r, coop, DEVICES["H200"], learned=True)
                fa2, cud = sdpa_time("FA2", n), sdpa_time("cuDNN", n)
                print(f"| {k(n)} | {r} | {ms(tt)} ({ms(tf)} / {ms(tb)}) | **{ms(t100)}** | {ms(t100c)} | {ms(t200)} "
                      f"| {fa2 / t100:.2f}x | {cud / t100:.2f}x | {fa2 / t100c:.2f}x |")
        print()
        print_crossovers(coop, learned=True)
        st = stages(32768, 32, coop, True)
        tt = [stage_time(s_, DEVICES["H100 SXM"])[0] for s_ in st.values()]
        print("- learned, shares at 32k, r = 32, H100: " + ", ".join(f"{nm} {x / sum(tt):.0%}" for nm, x in zip(st, tt)))
        print()

    # sensitivity of the headline to the efficiencies
    global EFF_FP32, EFF_TC
    print("### Sensitivity (r = 32, H100, total ms at 32k / 128k)\n")
    base = (EFF_FP32, EFF_TC)
    for ef, et in ((0.30, 0.30), (0.35, 0.30), (0.50, 0.30), (0.35, 0.50), (0.50, 0.50)):
        EFF_FP32, EFF_TC = ef, et
        a = [total(n, 32, False, DEVICES["H100 SXM"]) for n in (32768, 131072)]
        c = [total(n, 32, True, DEVICES["H100 SXM"]) for n in (32768, 131072)]
        print(f"- FP32 eff {ef:.0%}, tensor eff {et:.0%}: (a) {ms(a[0])} / {ms(a[1])}; (b) {ms(c[0])} / {ms(c[1])}")
    EFF_FP32, EFF_TC = base
    print()

    # decode step
    print("### Decode step (local exact, per step, B = 1, H = 16)\n")
    for r in RS:
        F = r * (r + 1) // 2
        z = F * (dv + 1) * 4                          # decode state rows are dv + 1 floats (unpadded)
        per_head_fixed = z + 2 * z                    # z read by decode_output; h read + written by decode_fold
        block_full = b * (h + dv) * 4                 # k' and v rows of the unfinished block (float32)
        for rows in (1, b // 2, b):
            by = H * (per_head_fixed + rows * (h + dv) * 4)
            print(f"- r = {r}, {rows} block rows: {by / 1e6:.2f} MB per step -> {by / 4.8e12 * 1e6:.2f} us at 4.8 TB/s, "
                  f"{by / 3.35e12 * 1e6:.2f} us at 3.35 TB/s")
        for lat in (150e-9, 300e-9):
            for rows in (1, b // 2, b):
                chain = F + math.ceil(rows / 64) * h + rows
                print(f"  - serial dependent loads in decode_output at {lat * 1e9:.0f} ns each, {rows} rows: "
                      f"{chain} -> {chain * lat * 1e6:.0f} us")
        print(f"  - completion step every {b}: + {H * 3 * z / 1e6:.2f} MB (z += h)")
    for L in (4096, 32768, 131072):
        kv = H * L * (h + dv) * 4
        print(f"- softmax KV cache (float32) at {k(L)}: {kv / 1e6:.0f} MB per step -> {kv / 4.8e12 * 1e6:.0f} us at 4.8 TB/s")


if __name__ == "__main__":
    main()
