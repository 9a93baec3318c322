#version 450
// Softmax and exact polynomial attention (docs/MATH.md section 2) on cooperative matrices: the
// result of attention_tiled.comp (same bindings, push constants AttentionTiledPush, key chunks and
// their per-row state), flash-style. A workgroup owns TILE_M = SG_M * CM_M consecutive query rows
// of one (batch, query head) and walks the keys KEY_TILE at a time:
//
//  1. The key tile's largest |k| and |v| (a pass over its rows); V staged once per key tile.
//  2. Scores S = Q K^T (WIDTH_CHUNK columns of q and k per step; Q staged once when one step
//     covers h): the KEY_TILE / CM_N score tiles of a row group are spread over its SG_N
//     subgroups, float32 accumulators, out through a float32 scratch (CM_STORE_ROW).
//  3. One invocation per row, in float32: undo the operand scales and apply the score scale s,
//     mask (causal: j <= i; keys of the chunk), then
//       KIND_SOFTMAX:    running max m and denominator l: m' = max(m, max_j x_j), c = e^(m - m'),
//                        w_j = e^(x_j - m'), l' = c l + sum_j w_j;
//       KIND_POLYNOMIAL: w_j = x_j^DEGREE, l' = l + sum_j w_j (the "1 +" is added at the end);
//     the row's weights are scaled by a power of two that brings their largest to at most 2^14
//     and rounded into the W operand (CM_TO_OPERAND).
//  4. part = W V on cooperative matrices (the WN value tiles of a subgroup), then through the
//     subgroup's scratch tile o = o c + part / (scale_W scale_V), per row, in float32.
//  After the last key tile: O_i = o_i / l_i (softmax) or o_i / (1 + l_i), or the state
//  (m, l, o) of the row for the next key chunk (FLAG_STORE_STATE).
//
// The output accumulator o lives in shared memory (TILE_M x dv float32), not in cooperative-matrix
// accumulators: the online softmax rescales it per row, which the matrix types cannot express.
//
// Range: with 16-bit operands (float16 at most 65504) every operand is scaled by a power of two
// that brings its largest |element| to at most 2^14 before it is rounded, and the float32 results
// are scaled back, which is exact (as block_states_coopmat.comp and polysketch_output_coopmat.comp
// do): q once per workgroup (its rows), k and v per key tile, the weights per row and key tile
// (softmax weights are in [0, 1]; polynomial weights (s q.k)^p span many orders of magnitude).
// Weights below 2^-28 of their row's largest in the tile fall out of float16's normal range and
// lose precision; they are that much smaller than the row's denominator.
//
// Shared memory: the operand pool holds Q, K, W, V (rows padded by 8 elements: 16-byte aligned
// for 2-byte operands, the load/store rule); the float32 pool the scores / weights (rows of
// KEY_TILE + 4) in steps 2-3 and one CM_M x CM_N scratch per subgroup in step 4. The host computes
// the bytes (attentionTiledCoopMatSharedBytes, lib/forward/tiled_forward.cpp); with the emulated
// backend operands are 4-byte floats and coopmat.glsl adds its exchange region per subgroup.
//
// llvmpipe's loop budget (attention_tiled.comp): the run-time loops are the key tiles, the width
// steps, the element-wise loops strided by the workgroup (staging, maxima, state, output: not
// unrolled, which would make llvmpipe's compile of the emulated variants take tens of seconds at
// h = 128), the scratch loops and, in the emulated backend, its per-lane loops over matrix
// elements; the per-row loops over a key tile and the products' steps are unrolled. The host
// bounds the keys of one dispatch (the key chunks) so that an invocation stays within the budget
// (attentionTiledCoopMatEmulatedIterationsPerKeyTile).
//
// One source for GL_KHR_cooperative_matrix, GL_NV_cooperative_matrix and the emulated backend
// (coopmat.glsl). The workgroup must consist of exactly SG_M * SG_N subgroups: the host sets
// THREADS = SG_M * SG_N * subgroup size and pins the subgroup size where it can vary.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x_id = 0) in;
#include "interface/attention_tiled_coopmat.h"
PSK_DECLARE_SPECS(PSK_ATTENTION_TILED_COOPMAT_SPEC)
PSK_DECLARE_BINDINGS(PSK_ATTENTION_TILED_BINDINGS)

#define CM_SUBGROUPS (SG_M * SG_N)
#include "coopmat.glsl"
#include "coopmat_scores.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(std430, binding = BINDING_Q) readonly buffer QBuffer { ELEM q_data[]; };
layout(std430, binding = BINDING_K) readonly buffer KBuffer { ELEM k_data[]; };
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer OBuffer { ELEM o_data[]; };
// Per row: [running max, denominator, accumulator[VALUE_DIM]], rows in [batch][q head][token] order.
layout(std430, binding = BINDING_STATE) buffer StateBuffer { float state_data[]; };

const uint TILE_M = SG_M * CM_M;
const uint NT = (VALUE_DIM + CM_N - 1u) / CM_N;  // value column tiles
const uint NC = NT * CM_N;
const uint ST = KEY_TILE / CM_N;                 // score tiles of a row group per key tile ...
const uint SU = (ST + SG_N - 1u) / SG_N;         // ... per subgroup
const bool Q_ONCE = WIDTH_CHUNK >= HEAD_DIM;     // one width step: Q is staged once
const uint PAD = 8u;
const uint LDQ = WIDTH_CHUNK + PAD;  // Q rows (row-major A), K rows (column-major B = K^T)
const uint LDW = KEY_TILE + PAD;     // W rows, row-major A
const uint LDV = NC + PAD;           // V rows, row-major B
const uint OP_Q = 0u;
const uint OP_K = TILE_M * LDQ;
const uint OP_W = OP_K + KEY_TILE * LDQ;
const uint OP_V = OP_W + TILE_M * LDW;
const uint OP_POOL = OP_V + KEY_TILE * LDV;
const uint LDS = KEY_TILE + 4u;      // float32 score rows
const uint F_SCORES = TILE_M * LDS;
const uint F_OUT = SG_M * SG_N * CM_M * CM_N;
const uint F_POOL = F_SCORES > F_OUT ? F_SCORES : F_OUT;
const uint R_Q = 0u, R_K = 1u, R_V = 2u;  // range maxima (float bits)
const uint RANGE_SLOTS = 3u;
const uint STATE_ROW = VALUE_DIM + 2u;

shared CM_OPERAND op_pool[CM_SHARED_COUNT(OP_POOL, CM_OPERAND_BYTES)];
shared float f_pool[CM_SHARED_COUNT(F_POOL, 4u)];
shared float o_acc[CM_SHARED_COUNT(TILE_M * VALUE_DIM, 4u)];
shared float row_max[CM_SHARED_COUNT(TILE_M, 4u)];
shared float row_den[CM_SHARED_COUNT(TILE_M, 4u)];
shared float row_corr[CM_SHARED_COUNT(TILE_M, 4u)];  // this key tile's rescale of o (softmax; 1 for the polynomial)
shared float row_back[CM_SHARED_COUNT(TILE_M, 4u)];  // 1 / (scale_W scale_V) of this key tile
shared uint range_bits[CM_SHARED_COUNT(RANGE_SLOTS, 4u)];


float range_max(uint slot) { return uintBitsToFloat(range_bits[slot]); }

float weight_power(float x) {
    float w = x;  // x^DEGREE by repeated squaring (DEGREE is a power of two)
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

void main() {
    // The emulated backend hands shared memory over as NaN, as a GPU might (coopmat.glsl).
    CM_POISON_SHARED(op_pool, OP_POOL);
    CM_POISON_SHARED(f_pool, F_POOL);
    CM_POISON_SHARED(o_acc, TILE_M * VALUE_DIM);
    const uint row_begin = gl_WorkGroupID.x * TILE_M;
    const uint q_head = gl_WorkGroupID.y, batch = gl_WorkGroupID.z;
    const uint kv_head = q_head / params.head_ratio;
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint sg_m = sg % SG_M, sg_n = sg / SG_M;
    const uint row_end = min(params.n, row_begin + TILE_M);
    const uint rows = row_end - row_begin;  // >= 1: the grid covers ceil(n / TILE_M) tiles
    const bool sg_rows = sg_m * CM_M < rows;  // the subgroup has rows (subgroup-uniform)
    // Keys past the tile's last row never matter under the causal mask.
    const uint key_end = min(params.key_limit, CAUSAL ? row_end : params.n);
    const uint q_base = tensor_row(params.q_strides, batch, q_head, row_begin);
    const uint k_base = tensor_row(params.k_strides, batch, kv_head, 0u);
    const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);
    const uint state_row0 = (batch * params.num_q_heads + q_head) * params.n + row_begin;
    const bool load_state = (params.flags & FLAG_LOAD_STATE) != 0u;

    // ---- Row state (m, l, o): zero, or the previous key chunk's ----
    if (lid < RANGE_SLOTS) range_bits[lid] = 0u;
    [[unroll]] for (uint it = 0u; it < (TILE_M + THREADS - 1u) / THREADS; ++it) {
        const uint r = it * THREADS + lid;
        if (r < TILE_M) {
            const bool from_state = load_state && r < rows;
            row_max[r] = from_state ? state_data[(state_row0 + r) * STATE_ROW] : -1.0 / 0.0;
            row_den[r] = from_state ? state_data[(state_row0 + r) * STATE_ROW + 1u] : 0.0;
        }
    }
    for (uint i = lid; i < TILE_M * VALUE_DIM; i += THREADS) {
        if (i < TILE_M * VALUE_DIM) {
            const uint r = i / VALUE_DIM, c = i % VALUE_DIM;
            o_acc[i] = load_state && r < rows ? state_data[(state_row0 + r) * STATE_ROW + 2u + c] : 0.0;
        }
    }
    barrier();
    // The query tile's largest |q|.
    {
        float q_max = 0.0;
        for (uint i = lid; i < TILE_M * HEAD_DIM; i += THREADS) {
            const uint r = i / HEAD_DIM, d = i % HEAD_DIM;
            if (i < TILE_M * HEAD_DIM && r < rows) q_max = max(q_max, abs(LOAD_ELEM(q_data[q_base + r * params.q_strides.token + d])));
        }
        atomicMax(range_bits[R_Q], floatBitsToUint(q_max));
    }
    barrier();
    const float q_scale = operand_scale(range_max(R_Q));
    const float inv_q = (1.0 / q_scale) * params.scale;  // undoes q's scale and applies s (exact scaling by 2^e)

    for (uint ks = params.key_begin; ks < key_end; ks += KEY_TILE) {
        const uint klen = min(KEY_TILE, key_end - ks);
        // ---- 1. The key tile's largest |k| and |v| ----
        {
            float k_max = 0.0, v_max = 0.0;
            for (uint i = lid; i < KEY_TILE * HEAD_DIM; i += THREADS) {
                const uint j = i / HEAD_DIM, d = i % HEAD_DIM;
                if (i < KEY_TILE * HEAD_DIM && j < klen)
                    k_max = max(k_max, abs(LOAD_ELEM(k_data[k_base + (ks + j) * params.k_strides.token + d])));
            }
            for (uint i = lid; i < KEY_TILE * VALUE_DIM; i += THREADS) {
                const uint j = i / VALUE_DIM, c = i % VALUE_DIM;
                if (i < KEY_TILE * VALUE_DIM && j < klen)
                    v_max = max(v_max, abs(LOAD_ELEM(v_data[v_base + (ks + j) * params.v_strides.token + c])));
            }
            atomicMax(range_bits[R_K], floatBitsToUint(k_max));
            atomicMax(range_bits[R_V], floatBitsToUint(v_max));
        }
        barrier();  // also: the previous key tile's reads of W, V and the scratch are done
        const float k_scale = operand_scale(range_max(R_K));
        const float v_scale = operand_scale(range_max(R_V));
        const float inv_qk = inv_q * (1.0 / k_scale);
        const float inv_v = 1.0 / v_scale;
        // V of the key tile, scaled, zero past the tile's keys and past column dv.
        for (uint i = lid; i < KEY_TILE * NC; i += THREADS) {
            if (i < KEY_TILE * NC) {
                const uint j = i / NC, c = i % NC;
                float x = 0.0;
                if (j < klen && c < VALUE_DIM) x = LOAD_ELEM(v_data[v_base + (ks + j) * params.v_strides.token + c]) * v_scale;
                op_pool[OP_V + j * LDV + c] = CM_TO_OPERAND(x);
            }
        }

        // ---- 2. Scores S = Q K^T ----
        CM_ACC score[SU];
        CM_SCORES_ZERO(score)
        [[dont_unroll]] for (uint w0 = 0u; w0 < HEAD_DIM; w0 += WIDTH_CHUNK) {
            if (w0 > 0u) barrier();  // the previous width step's Q and K are read
            if (!Q_ONCE || ks == params.key_begin) {
                for (uint i = lid; i < TILE_M * WIDTH_CHUNK; i += THREADS) {
                    if (i < TILE_M * WIDTH_CHUNK) {
                        const uint r = i / WIDTH_CHUNK, d = w0 + i % WIDTH_CHUNK;
                        float x = 0.0;
                        if (r < rows && d < HEAD_DIM) x = LOAD_ELEM(q_data[q_base + r * params.q_strides.token + d]) * q_scale;
                        op_pool[OP_Q + r * LDQ + i % WIDTH_CHUNK] = CM_TO_OPERAND(x);
                    }
                }
            }
            for (uint i = lid; i < KEY_TILE * WIDTH_CHUNK; i += THREADS) {
                if (i < KEY_TILE * WIDTH_CHUNK) {
                    const uint j = i / WIDTH_CHUNK, d = w0 + i % WIDTH_CHUNK;
                    float x = 0.0;
                    if (j < klen && d < HEAD_DIM) x = LOAD_ELEM(k_data[k_base + (ks + j) * params.k_strides.token + d]) * k_scale;
                    op_pool[OP_K + j * LDQ + i % WIDTH_CHUNK] = CM_TO_OPERAND(x);
                }
            }
            barrier();
            CM_SCORES_STEP(score, sg_rows, w0, HEAD_DIM)
        }
        CM_SCORES_STORE(score, sg_rows, f_pool, LDS)
        if (lid == 0u) {  // every invocation read them before the staging barrier
            range_bits[R_K] = 0u;
            range_bits[R_V] = 0u;
        }
        barrier();

        // ---- 3. Per row: mask, weights, running max and denominator; W scaled per row ----
        [[unroll]] for (uint it = 0u; it < (TILE_M + THREADS - 1u) / THREADS; ++it) {
            const uint r = it * THREADS + lid;
            if (r < TILE_M) {
                const uint i = row_begin + r;
                // Keys j < visible of the tile count for this row (rows past n see none).
                uint visible = r < rows ? klen : 0u;
                if (CAUSAL) visible = r < rows && i >= ks ? min(klen, i - ks + 1u) : 0u;
                float corr = 1.0, sum = 0.0, w_max = 0.0;
#if defined(KIND_SOFTMAX)
                const float m_old = row_max[r];
                float m_new = m_old;
                [[unroll]] for (uint j = 0u; j < KEY_TILE; ++j)
                    if (j < visible) m_new = max(m_new, f_pool[r * LDS + j] * inv_qk);
                if (visible > 0u) {
                    corr = exp(m_old - m_new);  // 0 for the first keys of the row (m_old = -inf)
                    row_max[r] = m_new;
                }
                [[unroll]] for (uint j = 0u; j < KEY_TILE; ++j) {
                    const float w = j < visible ? exp(f_pool[r * LDS + j] * inv_qk - m_new) : 0.0;
                    f_pool[r * LDS + j] = w;
                    sum += w;
                    w_max = max(w_max, w);
                }
#elif defined(KIND_POLYNOMIAL)
                [[unroll]] for (uint j = 0u; j < KEY_TILE; ++j) {
                    const float w = j < visible ? weight_power(f_pool[r * LDS + j] * inv_qk) : 0.0;
                    f_pool[r * LDS + j] = w;
                    sum += w;
                    w_max = max(w_max, w);
                }
#else
#error "define KIND_SOFTMAX or KIND_POLYNOMIAL"
#endif
                row_den[r] = row_den[r] * corr + sum;
                row_corr[r] = corr;
                const float w_scale = operand_scale(w_max);
                row_back[r] = (1.0 / w_scale) * inv_v;  // exact: powers of two in 2^-120 .. 2^120
                [[unroll]] for (uint j = 0u; j < KEY_TILE; ++j)
                    op_pool[OP_W + r * LDW + j] = CM_TO_OPERAND(f_pool[r * LDS + j] * w_scale);
            }
        }
        barrier();

        // ---- 4. part = W V; o = o corr + part back, through this subgroup's scratch tile ----
        if (sg_rows) {
            CM_ACC part[WN];
            [[unroll]] for (uint w = 0u; w < WN; ++w) part[w] = CM_ACC_ZERO;
            [[unroll]] for (uint kk = 0u; kk < KEY_TILE; kk += CM_K) {
                CM_A ma;
                CM_LOAD_ROW_A(ma, op_pool, OP_W + sg_m * CM_M * LDW + kk, LDW);
                [[unroll]] for (uint w = 0u; w < WN; ++w) {
                    const uint t = sg_n * WN + w;
                    if (t < NT) {
                        CM_B mb;
                        CM_LOAD_ROW_B(mb, op_pool, OP_V + kk * LDV + t * CM_N, LDV);
                        part[w] = CM_MULADD(ma, mb, part[w]);
                    }
                }
            }
            const uint scratch = sg * CM_M * CM_N;  // the scores are read (step 3): the pool is free
            [[unroll]] for (uint w = 0u; w < WN; ++w) {
                const uint t = sg_n * WN + w;
                if (t < NT) {
                    subgroupMemoryBarrierShared();
                    subgroupBarrier();  // the scratch is free (previous tile folded in)
                    CM_STORE_ROW(part[w], f_pool, scratch, CM_N);
                    subgroupMemoryBarrierShared();
                    subgroupBarrier();
                    for (uint e = lane; e < CM_M * CM_N; e += gl_SubgroupSize) {
                        const uint r = sg_m * CM_M + e / CM_N, c = t * CM_N + e % CM_N;
                        if (c < VALUE_DIM) o_acc[r * VALUE_DIM + c] = o_acc[r * VALUE_DIM + c] * row_corr[r] + f_pool[scratch + e] * row_back[r];
                    }
                }
            }
        }
    }

    // ---- The output, or the row state for the next key chunk ----
    barrier();
    const bool store_state = (params.flags & FLAG_STORE_STATE) != 0u;
    if (store_state) {
        [[unroll]] for (uint it = 0u; it < (TILE_M + THREADS - 1u) / THREADS; ++it) {
            const uint r = it * THREADS + lid;
            if (r < rows) {
                state_data[(state_row0 + r) * STATE_ROW] = row_max[r];
                state_data[(state_row0 + r) * STATE_ROW + 1u] = row_den[r];
            }
        }
    }
    for (uint i = lid; i < TILE_M * VALUE_DIM; i += THREADS) {
        const uint r = i / VALUE_DIM, c = i % VALUE_DIM;
        if (i < TILE_M * VALUE_DIM && r < rows) {
            if (store_state) {
                state_data[(state_row0 + r) * STATE_ROW + 2u + c] = o_acc[i];
            } else {
#if defined(KIND_SOFTMAX)
                const float inv = 1.0 / row_den[r];
#else
                const float inv = 1.0 / (1.0 + row_den[r]);  // the "1 +" keeps an all-zero row finite
#endif
                o_data[tensor_row(params.o_strides, batch, q_head, row_begin + r) + c] = STORE_ELEM(o_acc[i] * inv);
            }
        }
    }
}
