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
// products (A_lo B + A_hi B); B = [V] is exact in the operand type (16-bit storage; float32 storage
// keeps the FP32 kernel). One rounding of A was not enough: where phi(q) . phi(k) cancels (the
// random sketch's features have either sign), the relative error of a row that sees few keys grew
// past the float16 threshold (4.9e-3 against 2e-3 on a full-attention row that sees one key,
// emulated). The normalizer column sums hi + lo in float32.
// The accumulators go out through a per-subgroup shared scratch matrix, since the tiles may hang
// over F or dv (and coopMatStore needs 16-byte aligned rows in global memory too).
//
// Range: features psi(S(k)) reach 1e4-1e5 with LayerNorm'd keys (p = 4) and far more for p = 8,
// beyond float16's 65504, and bfloat16 values stored as float16 operands may overflow too. So
// each workgroup first finds its block's largest |S(k)| and |v| and scales A and B by powers of
// two that bring their largest element to at most 2^14 (and small ones up, for precision); the
// float32 results are divided by the same powers of two, which is exact. No host input needed.
//
// One source for GL_NV_cooperative_matrix and GL_KHR_cooperative_matrix (coopmat.glsl); the
// shape (CM_M, CM_N, CM_K) is chosen at run time from the device's enumerated properties
// (lib/coopmat_selection.cpp). The workgroup must consist of exactly SG_M * SG_N subgroups: the
// host sets THREADS = SG_M * SG_N * subgroup size and pins the subgroup size where it can vary.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require

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

layout(std430, binding = BINDING_K_SKETCH) readonly buffer KSketch { float k_sketch[]; };
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = BINDING_PAIRS) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = BINDING_STATES) writeonly buffer States { float states[]; };

// The scalar kernel's parameters (BlockStatesPush).

shared float sk_tile[KEY_TILE * SKETCH];
shared CM_OPERAND a_tile[2u * KEY_TILE * LDA];  // high parts, then low parts
shared CM_OPERAND b_tile[KEY_TILE * LDB];
shared uint pair_tile[TILE_M];
shared float c_scratch[SG_M * SG_N * CM_M * CM_N];
shared float range_max[2 * THREADS];  // per invocation: max |S(k)|, max |v| of the block

// 2^e such that x * 2^e <= 2^14 < 2 x * 2^e (1 for x = 0), e clamped to +-100 (float32 range).
float operand_scale(float x) {
    if (!(x > 0.0)) return 1.0;
    int e;
    frexp(x, e);  // x < 2^e
    return exp2(float(clamp(14 - e, -100, 100)));
}

void main() {
    // The emulated backend hands shared memory over as NaN, as a GPU might (coopmat.glsl).
    CM_POISON_SHARED(sk_tile, KEY_TILE * SKETCH);
    CM_POISON_SHARED(a_tile, 2u * KEY_TILE * LDA);
    CM_POISON_SHARED(b_tile, KEY_TILE * LDB);
    CM_POISON_SHARED(c_scratch, SG_M * SG_N * CM_M * CM_N);
    const uint ftile = gl_WorkGroupID.x % params.feature_tiles;
    const uint ctile = gl_WorkGroupID.x / params.feature_tiles;
    const uint block = gl_WorkGroupID.y, seq = gl_WorkGroupID.z;
    const uint batch = seq / params.kv_heads, head = seq % params.kv_heads;
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID;
    const uint sg_m = sg % SG_M, sg_n = sg / SG_M;
    const uint f0 = ftile * TILE_M, c0 = ctile * TILE_N;
    const bool keep_ones = ctile == 0u;

    // Features past F get a zero coefficient through an out-of-range marker.
    for (uint i = lid; i < TILE_M; i += THREADS) pair_tile[i] = f0 + i < params.features ? pairs[f0 + i] : 0xFFFFFFFFu;

    CM_ACC acc[WM][WN];
    [[unroll]] for (uint a = 0u; a < WM; ++a)
        [[unroll]] for (uint b = 0u; b < WN; ++b) acc[a][b] = CM_ACC_ZERO;
    float ones[ONES_PER_THREAD];
    [[unroll]] for (uint i = 0u; i < ONES_PER_THREAD; ++i) ones[i] = 0.0;

    const uint key_begin = block * params.block_size;
    const uint key_end = min(params.n, key_begin + params.block_size);
    const uint sk_base = seq * params.n * SKETCH;
    const uint v_base = tensor_row(params.v_strides, batch, head, 0u);

    // The block's operand ranges (see "Range" above): |psi_f| <= sqrt(2) max|S|^2.
    float s_max = 0.0, v_max = 0.0;
    for (uint i = lid; i < (key_end - key_begin) * SKETCH; i += THREADS)
        s_max = max(s_max, abs(k_sketch[sk_base + key_begin * SKETCH + i]));
    for (uint i = lid; i < (key_end - key_begin) * TILE_N; i += THREADS) {
        const uint j = i / TILE_N, c = i % TILE_N;
        if (c0 + c < VALUE_DIM) v_max = max(v_max, abs(LOAD_ELEM(v_data[v_base + (key_begin + j) * params.v_strides.token + c0 + c])));
    }
    range_max[lid] = s_max;
    range_max[THREADS + lid] = v_max;
    barrier();
    s_max = 0.0;
    v_max = 0.0;
    for (uint i = 0u; i < THREADS; ++i) {
        s_max = max(s_max, range_max[i]);
        v_max = max(v_max, range_max[THREADS + i]);
    }
    const float a_scale = operand_scale(1.4142135 * s_max * s_max);
    const float b_scale = operand_scale(v_max);

    for (uint tile_start = key_begin; tile_start < key_end; tile_start += KEY_TILE) {
        const uint tile_len = min(KEY_TILE, key_end - tile_start);
        barrier();  // the previous step's tiles are no longer being read
        [[unroll]] for (uint it = 0u; it < (KEY_TILE * SKETCH + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            if (i < KEY_TILE * SKETCH)
                sk_tile[i] = i < tile_len * SKETCH ? k_sketch[sk_base + tile_start * SKETCH + i] : 0.0;
        }
        [[unroll]] for (uint it = 0u; it < (KEY_TILE * TILE_N + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            if (i < KEY_TILE * TILE_N) {
                const uint j = i / TILE_N, c = i % TILE_N;
                float v = 0.0;
                if (j < tile_len && c0 + c < VALUE_DIM)
                    v = LOAD_ELEM(v_data[v_base + (tile_start + j) * params.v_strides.token + c0 + c]);
                b_tile[j * LDB + c] = CM_TO_OPERAND(v * b_scale);
            }
        }
        barrier();
        // A column-major: consecutive invocations take consecutive features of one key.
        [[unroll]] for (uint it = 0u; it < (KEY_TILE * TILE_M + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            if (i < KEY_TILE * TILE_M) {
                const uint j = i / TILE_M, f = i % TILE_M;
                const uint entry = pair_tile[f];
                float p = 0.0;
                if (entry != 0xFFFFFFFFu)
                    p = pair_coefficient(entry) * a_scale * sk_tile[j * SKETCH + pair_first(entry)] *
                        sk_tile[j * SKETCH + pair_second(entry)];
                const CM_OPERAND hi = CM_TO_OPERAND(p);
                a_tile[j * LDA + f] = hi;
                a_tile[A_LO + j * LDA + f] = CM_TO_OPERAND(p - float(hi));
            }
        }
        barrier();
        if (keep_ones) {
            [[unroll]] for (uint i = 0u; i < ONES_PER_THREAD; ++i) {
                const uint f = i * THREADS + lid;
                if (f < TILE_M)
                    for (uint j = 0u; j < tile_len; ++j) ones[i] += float(a_tile[j * LDA + f]) + float(a_tile[A_LO + j * LDA + f]);
            }
        }
        [[unroll]] for (uint kk = 0u; kk < KEY_TILE; kk += CM_K) {
            CM_B mb[WN];
            [[unroll]] for (uint b = 0u; b < WN; ++b)
                CM_LOAD_ROW_B(mb[b], b_tile, kk * LDB + (sg_n * WN + b) * CM_N, LDB);
            // A as hi + lo (see "Precision"): the small part first. One A operand live at a time.
            [[unroll]] for (uint part = 0u; part < 2u; ++part) {
                [[unroll]] for (uint a = 0u; a < WM; ++a) {
                    CM_A ma;
                    CM_LOAD_COL_A(ma, a_tile, (part == 0u ? A_LO : 0u) + kk * LDA + (sg_m * WM + a) * CM_M, LDA);
                    [[unroll]] for (uint b = 0u; b < WN; ++b) acc[a][b] = CM_MULADD(ma, mb[b], acc[a][b]);
                }
            }
        }
    }

    // Out through this subgroup's scratch matrix, one accumulator at a time.
    const float inv_a = 1.0 / a_scale, inv_b = 1.0 / b_scale;  // exact: powers of two
    const uint row_stride = Z_STRIDE;
    const uint state_base = (seq * params.blocks + block) * params.features * row_stride;
    const uint scratch = sg * CM_M * CM_N;
    [[unroll]] for (uint a = 0u; a < WM; ++a) {
        [[unroll]] for (uint b = 0u; b < WN; ++b) {
            CM_STORE_ROW(acc[a][b], c_scratch, scratch, CM_N);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            const uint fm = f0 + (sg_m * WM + a) * CM_M, cn = c0 + (sg_n * WN + b) * CM_N;
            for (uint i = gl_SubgroupInvocationID; i < CM_M * CM_N; i += gl_SubgroupSize) {
                const uint f = fm + i / CM_N, c = cn + i % CM_N;
                if (f < params.features && c < VALUE_DIM)
                    states[state_base + f * row_stride + c] = c_scratch[scratch + i] * inv_a * inv_b;
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();  // the scratch is free for the next accumulator
        }
    }
    if (keep_ones) {
        [[unroll]] for (uint i = 0u; i < ONES_PER_THREAD; ++i) {
            const uint f = f0 + i * THREADS + lid;
            if (i * THREADS + lid < TILE_M && f < params.features) {
                states[state_base + f * row_stride + VALUE_DIM] = ones[i] * inv_a;
                for (uint c = VALUE_DIM + 1u; c < Z_STRIDE; ++c) states[state_base + f * row_stride + c] = 0.0;  // padding
            }
        }
    }
}
