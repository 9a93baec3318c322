#version 450
// Block states of polysketch (docs/MATH.md section 6) on cooperative matrices: the same result as
// block_states.comp, H_l = phi(K_l)^T [V_l | 1] in the layout [seq][block][feature][Z_STRIDE]
// (VALUE_DIM values, the normalizer, zero padding to Z_STRIDE),
// computed as a GEMM C = A B with
//   A = psi(S(K_l))^T   (features x keys), expanded from the pair table (self_tensor.glsl),
//   B = V_l             (keys x value columns),
// float16 (or bfloat16) operands staged in shared memory, float32 accumulation. The normalizer
// column (column VALUE_DIM, the feature sum over the block's keys) is not a GEMM column: the
// workgroups of column tile 0 add up the staged A rows in float32, so that a value dimension that
// is a multiple of CM_N wastes no matrix column.
//
// Tiling: a workgroup owns a TILE_M x TILE_N tile of C (TILE_M = SG_M * WM * CM_M features,
// TILE_N = SG_N * WN * CM_N columns) with SG_M * SG_N subgroups; each subgroup accumulates
// WM x WN matrices of CM_M x CM_N. Keys go KEY_TILE (a multiple of CM_K) at a time:
//   1. stage the sketch rows S(k_j) (float32) and the tile's value columns (operand type),
//   2. expand A = coef_f * S_a * S_b * feature_scale into shared memory, column-major,
//   3. every subgroup runs KEY_TILE / CM_K steps of CM_MULADD.
// Keys past the end of a short last block become zero rows and columns, which add nothing.
//
// Precision: A is held as two operands, hi = round(a) and lo = round(a - hi), and each step is two
// products (A_lo B + A_hi B); B = [V] is exact in the operand type for 16-bit storage. One rounding
// of A was not enough: where phi(q) . phi(k) cancels (the random sketch's features have either
// sign), the relative error of a row that sees few keys grew past the float16 threshold (4.9e-3
// against 2e-3 on a full-attention row that sees one key, emulated). Float32 storage (SPLIT_V = 1)
// holds B as hi + lo as well and takes three products, A_lo B_hi + A_hi B_lo + A_hi B_hi (A_lo B_lo
// is below float32's ulp of the sum): about 22 significant bits per operand (float16 operands),
// which the float32 thresholds need (docs/MATH.md, "Products on 16-bit matrix units").
// The normalizer column sums hi + lo in float32.
// The accumulators go out through a per-subgroup shared scratch matrix, since the tiles may hang
// over F or dv (and coopMatStore needs 16-byte aligned rows in global memory too).
//
// Range: features psi(S(k)) reach 1e4-1e5 with LayerNorm'd keys (p = 4) and far more for p = 8,
// beyond float16's 65504, and bfloat16 values stored as float16 operands may overflow too. So
// every key tile is scaled on its own: the workgroup finds the tile's largest |S(k)| and |v| (from
// the registers the tile was loaded into: no second read) and scales A and B by powers of two that
// bring their largest element to at most 2^14 (and small ones up, for precision); the tile's
// product goes into a fresh accumulator that is added to the running one times the inverse powers
// of two (CM_ADD_SCALED), which is exact. No host input needed.
//
// Walks (WALK != 0): one workgroup per feature x column tile of a sequence walks every block in
// order, keeping the running sum in its accumulators, and writes the scan's result itself: WALK = 1
// (causal) the exclusive prefix Z_l = sum_{j<l} H_j for every block (Z_0 = 0), WALK = 2 (full) the
// sum of all blocks into block 0. The per-block H_l never goes to memory and no scan pass runs: the
// chunked linear-attention state recurrence. It trades parallelism over blocks for that (one
// workgroup per tile and sequence), so the plan picks it only where those workgroups fill the
// device. WALK = 0: one workgroup per block writes H_l, and block_scan.comp / block_reduce.comp
// follow.
//
// Latency: the next key tile's S(k) rows and values are loaded into registers while the current
// one is expanded and multiplied, so a walk waits on global memory once, not once per tile.
//
// One source for GL_NV_cooperative_matrix and GL_KHR_cooperative_matrix (coopmat.glsl); the
// shape (CM_M, CM_N, CM_K) is chosen at run time from the device's enumerated properties
// (lib/forward/coopmat_selection.cpp). The workgroup must consist of exactly SG_M * SG_N subgroups: the
// host sets THREADS = SG_M * SG_N * subgroup size and pins the subgroup size where it can vary.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x_id = 0) in;
#include "interface/block_states_coopmat.h"
PSK_DECLARE_SPECS(PSK_BLOCK_STATES_COOPMAT_SPEC)
PSK_DECLARE_BINDINGS(PSK_BLOCK_STATES_BINDINGS)

#define CM_SUBGROUPS (SG_M * SG_N)
#include "coopmat.glsl"
#include "self_tensor.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

const uint TILE_M = SG_M * WM * CM_M;
const uint TILE_N = SG_N * WN * CM_N;
// Shared-memory strides in operand elements: 8 of padding keeps rows 16-byte aligned and spreads
// consecutive rows over the banks.
const uint LDA = TILE_M + 8u;  // A column-major: element (f, j) at j * LDA + f
const uint LDB = TILE_N + 8u;  // B row-major: element (j, c) at j * LDB + c
const uint A_LO = KEY_TILE * LDA;  // the low parts of A follow its high parts
const uint ONES_PER_THREAD = (TILE_M + THREADS - 1u) / THREADS;
// The normalizer column is summed while A is expanded, from the values the products see (hi + lo):
// step `it` of the expansion gives invocation lid feature (it * THREADS + lid) % TILE_M, which is
// lid % TILE_M when THREADS is a multiple of TILE_M (THREADS / TILE_M invocations share a feature)
// and lid + THREADS * (it % ONES_PER_THREAD) when TILE_M is a multiple of THREADS (the host plans
// one or the other). So an invocation keeps ONES_PER_THREAD partial sums, partial q belonging to
// feature q * THREADS + lid modulo TILE_M, and the partials of a feature meet in shared memory
// when a state is stored. (Summing the staged A column by column instead put 32 dependent
// shared loads per key tile on the walk's critical path.)
const uint ONES_SHARE = ONES_PER_THREAD * THREADS;

layout(std430, binding = BINDING_K_SKETCH) readonly buffer KSketch { float k_sketch[]; };
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = BINDING_PAIRS) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = BINDING_STATES) writeonly buffer States { float states[]; };

// The scalar kernel's parameters (BlockStatesPush).

shared float sk_tile[CM_SHARED_COUNT(KEY_TILE * SKETCH, 4u)];
shared CM_OPERAND a_tile[CM_SHARED_COUNT(2u * KEY_TILE * LDA, CM_OPERAND_BYTES)];  // high parts, then low parts
const uint B_LO = KEY_TILE * LDB;  // the low parts of B follow its high parts (SPLIT_V)
shared CM_OPERAND b_tile[CM_SHARED_COUNT((1u + SPLIT_V) * KEY_TILE * LDB, CM_OPERAND_BYTES)];
shared float c_scratch[CM_SHARED_COUNT(SG_M * SG_N * CM_M * CM_N, 4u)];
shared float range_max[CM_SHARED_COUNT(2u * CM_SUBGROUPS, 4u)];  // per subgroup: max |S(k)|, max |v| of the key tile
shared float ones_share[CM_SHARED_COUNT(ONES_SHARE, 4u)];  // the normalizer's partial sums, entry e for feature e % TILE_M

// Elements of a key tile's S(k) rows and value columns each invocation loads (see "Latency").
const uint S_PER_THREAD = (KEY_TILE * SKETCH + THREADS - 1u) / THREADS;
const uint V_PER_THREAD = (KEY_TILE * TILE_N + THREADS - 1u) / THREADS;
// Whether those (and A's expansion) are whole rounds of THREADS: then the rounds' stores need no
// guard, which a compiler that does not know lid < THREADS keeps as a branch around every store
// (AMD's did: an exec-mask branch and a wait per staged element).
const bool S_WHOLE = KEY_TILE * SKETCH % THREADS == 0u;
const bool V_WHOLE = KEY_TILE * TILE_N % THREADS == 0u;
const bool A_WHOLE = KEY_TILE * TILE_M % THREADS == 0u;

// operand_scale (operands.glsl) with e clamped to +-100 (float32 range) instead of +-60.
float wide_operand_scale(float x) {
    if (!(x > 0.0)) return 1.0;
    int e;
    frexp(x, e);  // x < 2^e
    return exp2(float(clamp(14 - e, -100, 100)));
}

// The key tile [start, start + len) of this workgroup into pre_s / pre_v (zeros past len: keys past
// the end of a short block add nothing). Without branches: every lane loads, past the tile (or the
// value columns) the tile's last key (last column), and len = 0 reads key 0 of the sequence, then
// selects zero. A load under a per-lane condition is a branch, inside which a compiler waits for
// it, so the tile's loads went one after the other (polysketch_output_coopmat.comp, "Loads without
// branches"; docs/MODEL.md, "An issue floor from a compiler's instruction counts").
#define LOAD_KEY_TILE(start, len)                                                                   \
    {                                                                                               \
        const uint tile_row_ = (len) > 0u ? (start) : 0u, tile_last_ = max((len), 1u) - 1u;         \
        [[unroll]] for (uint it = 0u; it < S_PER_THREAD; ++it) {                                    \
            const uint i = it * THREADS + lid;                                                      \
            const float s = k_sketch[sk_base + tile_row_ * SKETCH + min(i, tile_last_ * SKETCH + SKETCH - 1u)]; \
            pre_s[it] = i < (len) * SKETCH ? s : 0.0;                                               \
        }                                                                                           \
        [[unroll]] for (uint it = 0u; it < V_PER_THREAD; ++it) {                                    \
            const uint i = it * THREADS + lid;                                                      \
            const uint j = i / TILE_N, c = i % TILE_N;                                              \
            const float v = LOAD_ELEM(v_data[v_base + (tile_row_ + min(j, tile_last_)) * params.v_strides.token + \
                                             min(c0 + c, VALUE_DIM - 1u)]);                         \
            pre_v[it] = j < (len) && c0 + c < VALUE_DIM ? v : 0.0;                                  \
        }                                                                                           \
    }

void main() {
    // The emulated backend hands shared memory over as NaN, as a GPU might (coopmat.glsl).
    CM_POISON_SHARED(sk_tile, KEY_TILE * SKETCH);
    CM_POISON_SHARED(a_tile, 2u * KEY_TILE * LDA);
    CM_POISON_SHARED(b_tile, (1u + SPLIT_V) * KEY_TILE * LDB);
    CM_POISON_SHARED(c_scratch, SG_M * SG_N * CM_M * CM_N);
    const uint ftile = gl_WorkGroupID.x % params.feature_tiles;
    const uint ctile = gl_WorkGroupID.x / params.feature_tiles;
    const uint seq = gl_WorkGroupID.z;
    const uint batch = seq / params.kv_heads, head = seq % params.kv_heads;
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID;
    const uint sg_m = sg % SG_M, sg_n = sg / SG_M;
    const uint f0 = ftile * TILE_M, c0 = ctile * TILE_N;
    const bool keep_ones = ctile == 0u;
    // WALK = 0: this workgroup's block only (grid y = blocks); else every block (grid y = 1).
    const uint first_block = WALK == 0u ? gl_WorkGroupID.y : 0u;
    const uint end_block = WALK == 0u ? first_block + 1u : params.blocks;

    // The invocation's features of the expansion, partial q: feature (q THREADS + lid) % TILE_M of
    // the tile (see ONES_SHARE), the same in every key tile and block, so their pair entries are
    // decoded here once: the positions of S_a and S_b in a staged S(k) row and the coefficient, zero
    // for features past F (S_0 S_0 then, times zero). Decoding per element and key tile had been
    // about two thirds of the expansion's instructions (docs/MODEL.md, "The block states' pairs
    // decoded once").
    uint pair_a[ONES_PER_THREAD], pair_b[ONES_PER_THREAD];
    float pair_c[ONES_PER_THREAD];
    [[unroll]] for (uint q = 0u; q < ONES_PER_THREAD; ++q) {
        const uint f = f0 + (q * THREADS + lid) % TILE_M;
        const uint entry = f < params.features ? pairs[f] : 0u;
        pair_a[q] = pair_first(entry);
        pair_b[q] = pair_second(entry);
        pair_c[q] = f < params.features ? pair_coefficient(entry) : 0.0;
    }

    // The running sum over the key tiles (and blocks) walked so far, unscaled.
    CM_ACC total[WM][WN];
    [[unroll]] for (uint a = 0u; a < WM; ++a)
        [[unroll]] for (uint b = 0u; b < WN; ++b) total[a][b] = CM_ACC_ZERO;
    float ones_part[ONES_PER_THREAD];  // see ONES_SHARE
    [[unroll]] for (uint i = 0u; i < ONES_PER_THREAD; ++i) ones_part[i] = 0.0;

    const uint sk_base = seq * params.n * SKETCH;
    const uint v_base = tensor_row(params.v_strides, batch, head, 0u);
    const uint row_stride = Z_STRIDE;
    const uint seq_states = seq * params.blocks * params.features * row_stride;
    const uint scratch = sg * CM_M * CM_N;

    // A causal walk's Z_0 is zero (no block before the first).
    if (WALK == 1u) {
        for (uint i = lid; i < TILE_M * TILE_N; i += THREADS) {
            const uint f = f0 + i / TILE_N, c = c0 + i % TILE_N;
            if (f < params.features && c < VALUE_DIM) states[seq_states + f * row_stride + c] = 0.0;
        }
        if (keep_ones)
            for (uint i = lid; i < TILE_M; i += THREADS)
                if (f0 + i < params.features)
                    for (uint c = VALUE_DIM; c < Z_STRIDE; ++c) states[seq_states + (f0 + i) * row_stride + c] = 0.0;
    }

    float pre_s[S_PER_THREAD];
    float pre_v[V_PER_THREAD];
    {
        const uint start = first_block * params.block_size;
        LOAD_KEY_TILE(start, min(KEY_TILE, min(params.n, start + params.block_size) - start));
    }

    for (uint block = first_block; block < end_block; ++block) {
        const uint key_begin = block * params.block_size;
        const uint key_end = min(params.n, key_begin + params.block_size);
        for (uint tile_start = key_begin; tile_start < key_end; tile_start += KEY_TILE) {
            const uint tile_len = min(KEY_TILE, key_end - tile_start);
            // The tile's operand ranges (see "Range"): |psi_f| <= sqrt(2) max|S|^2.
            float s_max = 0.0, v_max = 0.0;
            [[unroll]] for (uint it = 0u; it < S_PER_THREAD; ++it) s_max = max(s_max, abs(pre_s[it]));
            [[unroll]] for (uint it = 0u; it < V_PER_THREAD; ++it) v_max = max(v_max, abs(pre_v[it]));
            s_max = subgroupMax(s_max);
            v_max = subgroupMax(v_max);
            if (subgroupElect()) {
                range_max[sg] = s_max;
                range_max[CM_SUBGROUPS + sg] = v_max;
            }
            // Also: every invocation is done with the previous tile's shared operands.
            barrier();
            s_max = 0.0;
            v_max = 0.0;
            [[unroll]] for (uint i = 0u; i < CM_SUBGROUPS; ++i) {
                s_max = max(s_max, range_max[i]);
                v_max = max(v_max, range_max[CM_SUBGROUPS + i]);
            }
            const float a_scale = wide_operand_scale(1.4142135 * s_max * s_max);
            const float b_scale = wide_operand_scale(v_max);
            [[unroll]] for (uint it = 0u; it < S_PER_THREAD; ++it) {
                const uint i = it * THREADS + lid;
                if (S_WHOLE || i < KEY_TILE * SKETCH) sk_tile[i] = pre_s[it];
            }
            [[unroll]] for (uint it = 0u; it < V_PER_THREAD; ++it) {
                const uint i = it * THREADS + lid;
                if (V_WHOLE || i < KEY_TILE * TILE_N) {
                    const float b = pre_v[it] * b_scale;
                    const float hi = SPLIT_V != 0u ? CM_SPLIT_HIGH(b) : b;  // rounded by the store alone
                    b_tile[(i / TILE_N) * LDB + i % TILE_N] = CM_TO_OPERAND(hi);
                    if (SPLIT_V != 0u) b_tile[B_LO + (i / TILE_N) * LDB + i % TILE_N] = CM_TO_OPERAND(b - hi);
                }
            }
            // The next tile (of this block, else of the next one walked) loads while this one is used.
            {
                uint next = tile_start + KEY_TILE, next_len = 0u;
                if (next < key_end) {
                    next_len = min(KEY_TILE, key_end - next);
                } else if (block + 1u < end_block) {
                    next = key_end;
                    next_len = min(KEY_TILE, min(params.n, next + params.block_size) - next);
                }
                if ((ABLATE & 4u) == 0u) { LOAD_KEY_TILE(next, next_len); }
            }
            barrier();
            const float inv_a = 1.0 / a_scale, inv_b = 1.0 / b_scale;  // exact: powers of two
            // A column-major: consecutive invocations take consecutive features of one key; step it
            // gives invocation lid feature (it THREADS + lid) % TILE_M, its partial it % ONES_PER_THREAD
            // (the host plans THREADS and TILE_M powers of two: one divides the other).
            float tile_sum[ONES_PER_THREAD], coef[ONES_PER_THREAD];
            [[unroll]] for (uint q = 0u; q < ONES_PER_THREAD; ++q) {
                tile_sum[q] = 0.0;
                coef[q] = pair_c[q] * a_scale;
            }
            [[unroll]] for (uint it = 0u; it < (KEY_TILE * TILE_M + THREADS - 1u) / THREADS; ++it) {
                const uint i = it * THREADS + lid;
                if ((A_WHOLE || i < KEY_TILE * TILE_M) && (ABLATE & 2u) == 0u) {
                    const uint j = i / TILE_M, f = i % TILE_M, q = it % ONES_PER_THREAD;
                    const float p = coef[q] * sk_tile[j * SKETCH + pair_a[q]] * sk_tile[j * SKETCH + pair_b[q]];
                    const float hi = CM_SPLIT_HIGH(p);
                    const CM_OPERAND lo = CM_TO_OPERAND(p - hi);
                    a_tile[j * LDA + f] = CM_TO_OPERAND(hi);
                    a_tile[A_LO + j * LDA + f] = lo;
                    tile_sum[q] += hi + float(lo);  // what the products see
                }
            }
            [[unroll]] for (uint i = 0u; i < ONES_PER_THREAD; ++i) ones_part[i] += tile_sum[i] * inv_a;
            barrier();
            CM_ACC acc[WM][WN];
            [[unroll]] for (uint a = 0u; a < WM; ++a)
                [[unroll]] for (uint b = 0u; b < WN; ++b) acc[a][b] = CM_ACC_ZERO;
            [[unroll]] for (uint kk = 0u; kk < KEY_TILE && (ABLATE & 1u) == 0u; kk += CM_K) {
                CM_B mb[WN];
                [[unroll]] for (uint b = 0u; b < WN; ++b)
                    CM_LOAD_ROW_B(mb[b], b_tile, kk * LDB + (sg_n * WN + b) * CM_N, LDB);
                // A as hi + lo (see "Precision"): the small parts first, A_lo B_hi, then A_hi B_lo
                // (SPLIT_V, each B_lo loaded right before its product), then A_hi B_hi. One A
                // operand live at a time.
                [[unroll]] for (uint part = 0u; part < 2u; ++part) {
                    [[unroll]] for (uint a = 0u; a < WM; ++a) {
                        CM_A ma;
                        CM_LOAD_COL_A(ma, a_tile, (part == 0u ? A_LO : 0u) + kk * LDA + (sg_m * WM + a) * CM_M, LDA);
                        if (part == 1u && SPLIT_V != 0u) {
                            [[unroll]] for (uint b = 0u; b < WN; ++b) {
                                CM_B mb_lo;
                                CM_LOAD_ROW_B(mb_lo, b_tile, B_LO + kk * LDB + (sg_n * WN + b) * CM_N, LDB);
                                acc[a][b] = CM_MULADD(ma, mb_lo, acc[a][b]);
                            }
                        }
                        [[unroll]] for (uint b = 0u; b < WN; ++b) acc[a][b] = CM_MULADD(ma, mb[b], acc[a][b]);
                    }
                }
            }
            [[unroll]] for (uint a = 0u; a < WM; ++a)
                [[unroll]] for (uint b = 0u; b < WN; ++b) CM_ADD_SCALED(total[a][b], acc[a][b], inv_a * inv_b);
        }

        // What this block leaves in memory: WALK 0 its own H_l; WALK 1 the next block's exclusive
        // prefix Z_{l+1}; WALK 2 the sum of every block, into block 0, after the last.
        const bool store = WALK == 0u || (WALK == 1u && block + 1u < end_block) || (WALK == 2u && block + 1u == end_block);
        if (store) {
            const uint target = WALK == 0u ? block : WALK == 1u ? block + 1u : 0u;
            const uint state_base = seq_states + target * params.features * row_stride;
            // Out through this subgroup's scratch matrix, one accumulator at a time.
            [[unroll]] for (uint a = 0u; a < WM; ++a) {
                [[unroll]] for (uint b = 0u; b < WN; ++b) {
                    CM_STORE_ROW(total[a][b], c_scratch, scratch, CM_N);
                    subgroupMemoryBarrierShared();
                    subgroupBarrier();
                    const uint fm = f0 + (sg_m * WM + a) * CM_M, cn = c0 + (sg_n * WN + b) * CM_N;
                    for (uint i = gl_SubgroupInvocationID; i < CM_M * CM_N; i += gl_SubgroupSize) {
                        const uint f = fm + i / CM_N, c = cn + i % CM_N;
                        if (f < params.features && c < VALUE_DIM) states[state_base + f * row_stride + c] = c_scratch[scratch + i];
                    }
                    subgroupMemoryBarrierShared();
                    subgroupBarrier();  // the scratch is free for the next accumulator
                }
            }
            float ones[ONES_PER_THREAD];  // feature q * THREADS + lid of the tile: its partials summed
            if (keep_ones) {
                [[unroll]] for (uint q = 0u; q < ONES_PER_THREAD; ++q) ones_share[q * THREADS + lid] = ones_part[q];
                barrier();
                [[unroll]] for (uint q = 0u; q < ONES_PER_THREAD; ++q) {
                    ones[q] = 0.0;
                    for (uint e = q * THREADS + lid; e < ONES_SHARE; e += TILE_M) ones[q] += ones_share[e];
                }
                barrier();  // ones_share is free for the next store
            }
            if (keep_ones) {
                [[unroll]] for (uint i = 0u; i < ONES_PER_THREAD; ++i) {
                    const uint f = f0 + i * THREADS + lid;
                    if (i * THREADS + lid < TILE_M && f < params.features) {
                        states[state_base + f * row_stride + VALUE_DIM] = ones[i];
                        for (uint c = VALUE_DIM + 1u; c < Z_STRIDE; ++c) states[state_base + f * row_stride + c] = 0.0;  // padding
                    }
                }
            }
        }
    }
}
