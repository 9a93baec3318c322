#version 450
// Polysketch feature map (docs/MATH.md sections 3-5) on cooperative matrices: the result of
// sketch_features.comp (same bindings 0-3, push constants SketchFeaturesPush, outputs) for
//
//   SKETCH_RANDOM, one level (p = 4):  S(x) = c (x @ G1_0a) * (x @ G1_0b)
//   SKETCH_LEARNED (p = 4):            f_b = FF_b1(FF_b0(x)), FF(y) = gelu(LN(y) @ D1) @ D2,
//                                      S(x) = sqrt(r) tanh(f_1 * f_2 / sqrt(r))
//
// with x = LN_qk(row) * scale. Degree 2 (S = x, no product) and degree 8 (two levels) stay on the
// generic kernel (the plan says so). The learned sketch is where the FLOPs are: per row
// 2 (h 8r + 8r r + r 8r + 8r r) multiply-adds, more than the block states' F (dv + 1).
//
// A workgroup owns TILE_M = SG_M * CM_M consecutive rows of one (batch, head):
//  1. loads them into a float32 tile (zero past the last row), then one invocation per row applies
//     the optional q/k LayerNorm and the scale in the generic kernel's order and writes local_out
//     (FLAG_WRITE_LOCAL) exactly as it does;
//  2. every product is a GEMM step (gemm below): the activations, as operands (see "Precision"),
//     sit in shared memory as the A operand (TILE_M x K, row-major); the weight columns of the
//     step, N_CHUNK at a time, are staged K_CHUNK rows at a time from the float32 packed sketch
//     (sketch_pack.cpp: G^T and D1^T transposed, D2 as is) into the B operand, split into
//     operands on the way (CM_TO_OPERAND); float32 accumulators, written out to a float32 tile in shared memory, or
//     loaded from and stored back to one (the learned sketch's D2 sums over the hidden chunks);
//  3. the elementwise parts run in float32 on those tiles between the products, by the whole
//     workgroup: the node product c a b (random); per level the LayerNorm over the level input
//     (one invocation per row), gelu of every hidden chunk into the A operand of D2, and at the
//     end the tanh combination (learned).
//
// Subgroup (m, n) of the SG_M x SG_N grid computes rows m CM_M .. of column tiles n, n + SG_N, ...
// of each step (WN = ceil(N_CHUNK / CM_N / SG_N) accumulators).
//
// Precision: every operand is held as two 16-bit numbers, hi = round(v) and lo = round(v - hi),
// and each product is three cooperative products, A_lo W_hi + A_hi W_lo + A_hi W_hi, into the
// float32 accumulator (PRODUCT_TERMS = 3; 1 keeps A_hi W_hi alone, a diagnostic that bisects the
// chain): about 22 significant bits (float16; 16 for bfloat16) instead of 11 (8).
// One product per step is not enough here: measured on the conformance sweep (emulated), the
// feature map's operand rounding alone took the output to 2.1e-3 (float16, threshold 2e-3) and
// 2.2e-2 (bfloat16, threshold 1.2e-2), because the sketch feeds the features psi = S (x) S and
// then the attention weights <S(q), S(k)>^2 (and, learned, four chained products): relative errors
// of S grow about fourfold by the output. Three products still run on the matrix units.
//
// Range: the learned sketch's A operands are LayerNorm outputs and gelu of their products (bounded
// by the LayerNorm parameters and the weights), so they are staged as they are. The random
// sketch's A operand is x itself, whatever the caller's rows hold: it is scaled by a power of two
// that brings the tile's largest |x| to at most 2^14 before rounding, and the float32 products
// are scaled back (exact). Weights are staged unscaled: the plan takes this kernel for float16
// operands only when every packed weight is below 2^14 in magnitude.
//
// Shared memory (the host mirrors it in sketchFeaturesCoopMatSharedBytes, polysketch_plan.cpp):
// operands [A: TILE_M x LDA | H: TILE_M x LDH (learned) | W: K_CHUNK x LDW], each twice (high and
// low parts), rows padded by 8
// elements (16-byte aligned rows for 2-byte operands, the load/store rule); float32
// [x: TILE_M x HEAD_DIM | random: two product tiles TILE_M x N_CHUNK | learned: the hidden tile
// TILE_M x N_CHUNK, the FF sum TILE_M x LDR and f_1 TILE_M x LDR].
//
// llvmpipe's loop budget (docs/ARCHITECTURE.md): the run-time loops are the per-row loops over
// h or r, the product steps and, in the emulated backend, its per-lane loops over matrix
// elements; the host estimates their sum (sketchFeaturesCoopMatEmulatedLoopIterations) and keeps
// the generic kernel where it would exceed the budget.
//
// Diagnostics (DIAGNOSTIC, random sketch only; PSK_COOPMAT_FEATURE_DIAGNOSTIC): the S rows replaced
// by an intermediate, each known to the host, so that a device that gets S wrong shows which step
// does: 1 the A operand as staged (hi + lo, scaled back: x itself, zero past h); 2 the first
// product with the staged weights replaced by the identity (x again, through the cooperative loads,
// products and stores); 3 the first product with the real weights (x @ G1_0a, no node product);
// 4 x's float32 tile loaded as accumulators (CM_LOAD_ROW_ACC, rows HEAD_DIM apart) and stored as
// the products' results are (CM_STORE_ROW into the product tile, rows N_CHUNK apart), no operand
// load and no product (x again for HEAD_DIM a multiple of CM_N; column tiles past h stay zero):
// with 2 failing and 4 passing, the fault is in the operand loads or the products; 5 the staged A
// operand's high parts through a cooperative load and an operand store alone (x rounded to the
// operand type): with 5 passing too, in the weights' loads or the products.
//
// One source for GL_KHR_cooperative_matrix, GL_NV_cooperative_matrix and the emulated backend
// (coopmat.glsl). The workgroup must consist of exactly SG_M * SG_N subgroups: the host sets
// THREADS = SG_M * SG_N * subgroup size and pins the subgroup size where it can vary.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x_id = 0) in;
#include "interface/sketch_features_coopmat.h"
PSK_DECLARE_SPECS(PSK_SKETCH_FEATURES_COOPMAT_SPEC)
PSK_DECLARE_BINDINGS(PSK_SKETCH_FEATURES_BINDINGS)

#define CM_SUBGROUPS (SG_M * SG_N)
#include "coopmat.glsl"
#include "sketch_activations.glsl"
#include "staging.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(std430, binding = BINDING_X_ROWS) readonly buffer XBuffer { ELEM x_data[]; };
layout(std430, binding = BINDING_WEIGHTS) readonly buffer Weights { float w_data[]; };
layout(std430, binding = BINDING_SKETCH_OUT) writeonly buffer SketchOut { float sketch_out[]; };
layout(std430, binding = BINDING_LOCAL_OUT) writeonly buffer LocalOut { float local_out[]; };

const uint TILE_M = SG_M * CM_M;
const uint NT = N_CHUNK / CM_N;              // column tiles of a step ...
const uint WN = (NT + SG_N - 1u) / SG_N;     // ... per subgroup
const uint PAD = 8u;
#if defined(SKETCH_LEARNED)
const uint KA = ((HEAD_DIM > SKETCH ? HEAD_DIM : SKETCH) + CM_K - 1u) / CM_K * CM_K;  // level inputs: h, then r
#else
const uint KA = (HEAD_DIM + CM_K - 1u) / CM_K * CM_K;
#endif
const uint LDR = (SKETCH + N_CHUNK - 1u) / N_CHUNK * N_CHUNK;  // FF sums: r columns, padded to whole steps
const uint LDA = KA + PAD;
const uint LDH = N_CHUNK + PAD;
const uint LDW = N_CHUNK + PAD;
// Operand pool: every operand twice, its high part, then its low part (see "Precision").
const uint A_LO = TILE_M * LDA, H_LO = TILE_M * LDH, W_LO = K_CHUNK * LDW;
const uint OP_A = 0u;
#if defined(SKETCH_LEARNED)
const uint OP_H = OP_A + 2u * A_LO;
const uint OP_W = OP_H + 2u * H_LO;
#else
const uint OP_W = OP_A + 2u * A_LO;
#endif
const uint OP_POOL = OP_W + 2u * W_LO;
// Float32 pool (offsets are multiples of 8 floats: TILE_M is a multiple of 8).
const uint F_X = 0u;
const uint F_P0 = F_X + TILE_M * HEAD_DIM;
#if defined(SKETCH_LEARNED)
const uint F_ACC = F_P0 + TILE_M * N_CHUNK;
const uint F_F1 = F_ACC + TILE_M * LDR;
const uint F_POOL = F_F1 + TILE_M * LDR;
#else
const uint F_P1 = F_P0 + TILE_M * N_CHUNK;
const uint F_POOL = F_P1 + TILE_M * N_CHUNK;
#endif

shared CM_OPERAND op_pool[CM_SHARED_COUNT(OP_POOL, CM_OPERAND_BYTES)];
shared float f_pool[CM_SHARED_COUNT(F_POOL, 4u)];
// The tile's largest |x| (float bits; non-negative floats order as their bits) in element 0: an
// array of 16 bytes, not a lone uint (CM_SHARED_COUNT: the lone uint misaligned the pools above).
shared uint x_max_bits[CM_SHARED_COUNT(1u, 4u)];

const float LN_EPS = 1e-5;

// v as two operands, hi + lo (CM_SPLIT_HIGH): the high part at op_pool[off], the rest, rounded,
// `lo` elements further.
void put_operand(uint off, uint lo, float v) {
    const float hi = CM_SPLIT_HIGH(v);
    op_pool[off] = CM_TO_OPERAND(hi);
    op_pool[off + lo] = CM_TO_OPERAND(v - hi);
}


// LayerNorm of the LEN floats of f_pool at `src` (population variance, eps inside the square
// root), in the generic kernel's order of operations, rounded into op_pool at `dst`.
void layer_norm_to_operand(uint src, uint len, uint scale_off, uint bias_off, uint dst) {
    float mean = 0.0;
    for (uint d = 0u; d < len; ++d) mean += f_pool[src + d];
    mean /= float(len);
    float var = 0.0;
    for (uint d = 0u; d < len; ++d) var += (f_pool[src + d] - mean) * (f_pool[src + d] - mean);
    const float inv = inversesqrt(var / float(len) + LN_EPS);
    for (uint d = 0u; d < len; ++d) put_operand(dst + d, A_LO, (f_pool[src + d] - mean) * inv * w_data[scale_off + d] + w_data[bias_off + d]);
}

// One GEMM step: out[TILE_M x tiles CM_N] (+)= A[TILE_M x k_len] W[k_len x columns c0 ..].
//   A: op_pool at a_off (high parts; the low parts a_lo further), row-major, stride lda, zero past
//      the valid columns (k_len is a multiple of CM_K, at most the padded width of A).
//   W: element (k, c) of the weight matrix at w_data[w_off + k * w_k + c * w_c]; rows k >= k_valid
//      and columns c >= c_valid are staged as zeros.
//   out: float32 in f_pool at out_off (column tile t at out_off + t CM_N), stride ldo; with
//      `accumulate` the accumulators start from what is there.
// Starts with a barrier (the caller's writes of A and out are visible, the W stage is free) and
// ends after the last product; the caller puts a barrier between it and reads of `out`.
// Element i of a staged weight chunk: its row (k) and column (c) in the chunk, k-major or c-major.
uint w_chunk_k(uint i, bool k_fast) { return k_fast ? i % K_CHUNK : i / N_CHUNK; }
uint w_chunk_c(uint i, bool k_fast) { return k_fast ? i / K_CHUNK : i % N_CHUNK; }

void gemm(uint a_off, uint a_lo, uint lda, uint k_len, uint w_off, uint w_k, uint w_c, uint k_valid, uint c0, uint c_valid,
          uint out_off, uint ldo, uint tiles, bool accumulate) {
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID;
    const uint sg_m = sg % SG_M, sg_n = sg / SG_M;
    barrier();
    CM_ACC acc[WN];
    [[unroll]] for (uint w = 0u; w < WN; ++w) {
        const uint t = sg_n + w * SG_N;
        acc[w] = CM_ACC_ZERO;
        if (accumulate && t < tiles) {
            CM_LOAD_ROW_ACC(acc[w], f_pool, out_off + sg_m * CM_M * ldo + t * CM_N, ldo);
        }
    }
    // Staging order: consecutive invocations read consecutive weights (k-major when w_k == 1).
    // The whole chunk with its loads in flight (staging.glsl), rows and columns past the valid ones
    // staged as zeros; the load itself clamped to a valid element.
    const bool k_fast = w_k == 1u;
    const uint k_last = max(k_valid, 1u) - 1u, c_last = max(c_valid, 1u) - 1u;
    for (uint k0 = 0u; k0 < k_len; k0 += K_CHUNK) {
        STAGED_COPY(K_CHUNK * N_CHUNK, THREADS, lid,
                    DIAGNOSTIC == 2u ? (k0 + w_chunk_k(i, k_fast) == c0 + w_chunk_c(i, k_fast) ? 1.0 : 0.0)
                                     : w_data[w_off + min(k0 + w_chunk_k(i, k_fast), k_last) * w_k + min(c0 + w_chunk_c(i, k_fast), c_last) * w_c],
                    k0 + w_chunk_k(i, k_fast) < k_valid && c0 + w_chunk_c(i, k_fast) < c_valid,
                    put_operand(OP_W + w_chunk_k(i, k_fast) * LDW + w_chunk_c(i, k_fast), W_LO, v))
        barrier();
        [[unroll]] for (uint kk = 0u; kk < K_CHUNK; kk += CM_K) {
            if (k0 + kk < k_len) {
                [[unroll]] for (uint w = 0u; w < WN; ++w) {
                    const uint t = sg_n + w * SG_N;
                    if (t < tiles) {
                        // The small cross terms first, A_lo W_hi and A_hi W_lo, then A_hi W_hi (lo x lo
                        // is below float32's ulp); PRODUCT_TERMS = 1 keeps only the last (diagnostic).
                        // One A and one B operand live at a time, each loaded right before its
                        // product, the pattern of the output and baseline kernels; one call site in
                        // a loop, so the emulated backend (whose product llvmpipe inlines) compiles
                        // one copy and runs exactly this sequence.
#if defined(COOPMAT_EMULATED)
                        [[dont_unroll]]
#else
                        [[unroll]]
#endif
                        for (uint term = 3u - PRODUCT_TERMS; term < 3u; ++term) {
                            CM_A ma;
                            CM_B mb;
                            CM_LOAD_ROW_A(ma, op_pool, (term == 0u ? a_lo : 0u) + a_off + sg_m * CM_M * lda + k0 + kk, lda);
                            CM_LOAD_ROW_B(mb, op_pool, (term == 1u ? W_LO : 0u) + OP_W + kk * LDW + t * CM_N, LDW);
                            acc[w] = CM_MULADD(ma, mb, acc[w]);
                        }
                    }
                }
            }
        }
        barrier();  // the W stage is read
    }
    [[unroll]] for (uint w = 0u; w < WN; ++w) {
        const uint t = sg_n + w * SG_N;
        if (t < tiles) CM_STORE_ROW(acc[w], f_pool, out_off + sg_m * CM_M * ldo + t * CM_N, ldo);
    }
}

#if defined(SKETCH_LEARNED)
// One FF level on the A operand (LayerNorm'd input of `in_len` columns), summed into the float32
// tile at F_ACC (zero on entry): for each chunk of N_CHUNK hidden units, the hidden tile
// A @ D1[:, chunk] in float32, gelu into the H operand, then F_ACC += H @ D2[chunk, :].
void feed_forward(uint in_len, uint ff) {
    const uint lid = gl_LocalInvocationID.x;
    const uint d1 = params.w[ff + 2u], d2 = params.w[ff + 3u];
    const uint k_in = (in_len + CM_K - 1u) / CM_K * CM_K;
    [[dont_unroll]] for (uint u0 = 0u; u0 < HIDDEN; u0 += N_CHUNK) {
        // D1^T is packed HIDDEN x in: unit u's weights contiguous.
        const uint valid_units = min(N_CHUNK, HIDDEN - u0);
        gemm(OP_A, A_LO, LDA, k_in, d1, 1u, in_len, in_len, u0, HIDDEN, F_P0, N_CHUNK, (valid_units + CM_N - 1u) / CM_N, false);
        barrier();
        // Units past HIDDEN (tiles not computed) become zeros: the hidden tile is not cleared.
        [[unroll]] for (uint it = 0u; it < (TILE_M * N_CHUNK + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            if (i < TILE_M * N_CHUNK)
                put_operand(OP_H + (i / N_CHUNK) * LDH + i % N_CHUNK, H_LO, i % N_CHUNK < valid_units ? gelu_tanh(f_pool[F_P0 + i]) : 0.0);
        }
        // D2 is packed HIDDEN x r, row-major: rows u0 .. of this chunk. Only the column tiles
        // below r are computed; the others of the sum tile stay zero.
        for (uint c0 = 0u; c0 < SKETCH; c0 += N_CHUNK)
            gemm(OP_H, H_LO, LDH, N_CHUNK, d2 + u0 * SKETCH, SKETCH, 1u, valid_units, c0, SKETCH, F_ACC + c0, LDR,
                 min(NT, (SKETCH - c0 + CM_N - 1u) / CM_N), true);
    }
}
#endif

void main() {
    // The emulated backend hands shared memory over as NaN, as a GPU might (coopmat.glsl).
    CM_POISON_SHARED(op_pool, OP_POOL);
    CM_POISON_SHARED(f_pool, F_POOL);
    const uint lid = gl_LocalInvocationID.x;
    const uint row0 = gl_WorkGroupID.x * TILE_M;
    const uint head = gl_WorkGroupID.y, batch = gl_WorkGroupID.z;
    const uint rows = min(TILE_M, params.n - row0);  // the grid has no workgroup past n
    const uint out_row0 = (batch * params.heads + head) * params.n + row0;

    if (lid == 0u) x_max_bits[0] = 0u;
    // ---- 1. the rows in float32, zero past the last one (loads in flight: staging.glsl) ----
    STAGED_COPY(TILE_M * HEAD_DIM, THREADS, lid,
                LOAD_ELEM(x_data[tensor_row(params.x_strides, batch, head, row0 + min(i / HEAD_DIM, max(rows, 1u) - 1u)) + i % HEAD_DIM]),
                i / HEAD_DIM < rows, f_pool[F_X + i] = v)
    barrier();
    // One invocation per row: the local rows, the q/k LayerNorm and the scale, as the generic kernel.
    // The loop's trip count is the same in every invocation (the row test is inside), so the
    // subgroup leaves it together: cooperative operations need the whole subgroup converged.
    for (uint r0 = 0u; r0 < TILE_M; r0 += THREADS) {
        const uint r = r0 + lid;
        if (r >= rows) continue;
        const uint x = F_X + r * HEAD_DIM;
        if ((params.flags & FLAG_WRITE_LOCAL) != 0u && (params.flags & FLAG_LOCAL_LN) != 0u) {
            float mean = 0.0;
            for (uint d = 0u; d < HEAD_DIM; ++d) mean += f_pool[x + d];
            mean /= float(HEAD_DIM);
            float var = 0.0;
            for (uint d = 0u; d < HEAD_DIM; ++d) var += (f_pool[x + d] - mean) * (f_pool[x + d] - mean);
            const float inv = inversesqrt(var / float(HEAD_DIM) + LN_EPS);
            for (uint d = 0u; d < HEAD_DIM; ++d)
                local_out[(out_row0 + r) * HEAD_DIM + d] =
                    ((f_pool[x + d] - mean) * inv * w_data[params.local_ln_scale + d] + w_data[params.local_ln_bias + d]) * params.scale;
        }
        if ((params.flags & FLAG_QK_LN) != 0u) {
            float mean = 0.0;
            for (uint d = 0u; d < HEAD_DIM; ++d) mean += f_pool[x + d];
            mean /= float(HEAD_DIM);
            float var = 0.0;
            for (uint d = 0u; d < HEAD_DIM; ++d) var += (f_pool[x + d] - mean) * (f_pool[x + d] - mean);
            const float inv = inversesqrt(var / float(HEAD_DIM) + LN_EPS);
            for (uint d = 0u; d < HEAD_DIM; ++d)
                f_pool[x + d] = (f_pool[x + d] - mean) * inv * w_data[params.ln_scale + d] + w_data[params.ln_bias + d];
        }
        float x_max = 0.0;
        for (uint d = 0u; d < HEAD_DIM; ++d) {
            const float v = f_pool[x + d] * params.scale;
            f_pool[x + d] = v;
            x_max = max(x_max, abs(v));
        }
        if ((params.flags & FLAG_WRITE_LOCAL) != 0u && (params.flags & FLAG_LOCAL_LN) == 0u)
            for (uint d = 0u; d < HEAD_DIM; ++d) local_out[(out_row0 + r) * HEAD_DIM + d] = f_pool[x + d];
        atomicMax(x_max_bits[0], floatBitsToUint(x_max));
    }
    barrier();

#if defined(SKETCH_RANDOM)
    // ---- 2. S = c (x @ G1_0a) * (x @ G1_0b), N_CHUNK columns at a time ----
    const float x_scale = operand_scale(uintBitsToFloat(x_max_bits[0]));
    [[unroll]] for (uint it = 0u; it < (TILE_M * KA + THREADS - 1u) / THREADS; ++it) {
        const uint i = it * THREADS + lid;
        if (i < TILE_M * KA) {
            const uint r = i / KA, d = i % KA;
            put_operand(OP_A + r * LDA + d, A_LO, d < HEAD_DIM ? f_pool[F_X + r * HEAD_DIM + d] * x_scale : 0.0);
        }
    }
    const float back = 1.0 / x_scale;  // exact: a power of two
    if (DIAGNOSTIC == 4u) {
        const uint sg = gl_SubgroupID;
        const uint sg_m = sg % SG_M, sg_n = sg / SG_M;
        [[dont_unroll]] for (uint c0 = 0u; c0 < SKETCH; c0 += N_CHUNK) {
            barrier();  // the x tile is complete; the previous chunk's product tile is read
            const uint tiles = min(NT, (SKETCH - c0 + CM_N - 1u) / CM_N);
            [[unroll]] for (uint w = 0u; w < WN; ++w) {
                const uint t = sg_n + w * SG_N;
                if (t < tiles) {
                    CM_ACC acc = CM_ACC_ZERO;
                    if (c0 + (t + 1u) * CM_N <= HEAD_DIM) CM_LOAD_ROW_ACC(acc, f_pool, F_X + sg_m * CM_M * HEAD_DIM + c0 + t * CM_N, HEAD_DIM);
                    CM_STORE_ROW(acc, f_pool, F_P0 + sg_m * CM_M * N_CHUNK + t * CM_N, N_CHUNK);
                }
            }
            barrier();
            [[unroll]] for (uint it = 0u; it < (TILE_M * N_CHUNK + THREADS - 1u) / THREADS; ++it) {
                const uint i = it * THREADS + lid;
                const uint r = i / N_CHUNK, c = c0 + i % N_CHUNK;
                if (i < TILE_M * N_CHUNK && r < rows && c < SKETCH) sketch_out[(out_row0 + r) * SKETCH + c] = f_pool[F_P0 + i];
            }
        }
        return;
    }
    if (DIAGNOSTIC == 5u) {
        const uint sg = gl_SubgroupID;
        const uint sg_m = sg % SG_M, sg_n = sg / SG_M;
        barrier();  // A is staged
        if (sg_n == 0u) {  // each row group's subgroup of column group 0: its CM_M x CM_K tiles over the low parts
            [[unroll]] for (uint kk = 0u; kk < KA; kk += CM_K) {
                CM_A ma;
                CM_LOAD_ROW_A(ma, op_pool, OP_A + sg_m * CM_M * LDA + kk, LDA);
                CM_STORE_ROW_A(ma, op_pool, OP_A + A_LO + sg_m * CM_M * LDA + kk, LDA);
            }
        }
        barrier();
        [[unroll]] for (uint it = 0u; it < (TILE_M * SKETCH + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            const uint r = i / SKETCH, c = i % SKETCH;
            if (i < TILE_M * SKETCH && r < rows)
                sketch_out[(out_row0 + r) * SKETCH + c] = c < HEAD_DIM ? float(op_pool[OP_A + A_LO + r * LDA + c]) * back : 0.0;
        }
        return;
    }
    if (DIAGNOSTIC == 1u) {
        barrier();
        [[unroll]] for (uint it = 0u; it < (TILE_M * SKETCH + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            const uint r = i / SKETCH, c = i % SKETCH;
            if (i < TILE_M * SKETCH && r < rows)
                sketch_out[(out_row0 + r) * SKETCH + c] =
                    c < HEAD_DIM ? (float(op_pool[OP_A + r * LDA + c]) + float(op_pool[OP_A + A_LO + r * LDA + c])) * back : 0.0;
        }
        return;
    }
    [[dont_unroll]] for (uint c0 = 0u; c0 < SKETCH; c0 += N_CHUNK) {
        // G^T is packed r x h: column c's weights contiguous. x @ G1_0a into P0, x @ G1_0b into P1
        // (one gemm call site: llvmpipe compiles each inlined copy).
        const uint tiles = min(NT, (SKETCH - c0 + CM_N - 1u) / CM_N);  // columns past r are not read
        [[dont_unroll]] for (uint g = 0u; g < 2u; ++g)
            gemm(OP_A, A_LO, LDA, KA, params.w[g], 1u, HEAD_DIM, HEAD_DIM, c0, SKETCH, g == 0u ? F_P0 : F_P1, N_CHUNK, tiles, false);
        barrier();
        [[unroll]] for (uint it = 0u; it < (TILE_M * N_CHUNK + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            const uint r = i / N_CHUNK, c = c0 + i % N_CHUNK;
            if (i < TILE_M * N_CHUNK && r < rows && c < SKETCH)
                sketch_out[(out_row0 + r) * SKETCH + c] = DIAGNOSTIC >= 2u ? f_pool[F_P0 + i] * back
                                                                           : params.node_scale * (f_pool[F_P0 + i] * back) * (f_pool[F_P1 + i] * back);
        }
    }
#elif defined(SKETCH_LEARNED)
    // ---- 2. two branches of two FF levels, then S = sqrt(r) tanh(f_1 * f_2 / sqrt(r)) ----
    // Levels in a loop rather than written out: one feed_forward call site (llvmpipe compiles
    // every inlined copy of the products).
    [[dont_unroll]] for (uint branch = 0u; branch < 2u; ++branch) {
        [[dont_unroll]] for (uint level = 0u; level < 2u; ++level) {
            const uint ff = 8u * branch + 4u * level;
            const uint in_len = level == 0u ? HEAD_DIM : SKETCH;
            // A = LN(the level's input: x, or level 0's sum over r columns), zero up to KA.
            barrier();  // the previous level's products no longer read A
            [[unroll]] for (uint it = 0u; it < (TILE_M * LDA + THREADS - 1u) / THREADS; ++it) {
                const uint i = it * THREADS + lid;
                if (i < TILE_M * LDA && i % LDA >= in_len) put_operand(OP_A + i, A_LO, 0.0);
            }
            for (uint r0 = 0u; r0 < TILE_M; r0 += THREADS)  // a uniform trip count, as above
                if (r0 + lid < TILE_M)
                    layer_norm_to_operand(level == 0u ? F_X + (r0 + lid) * HEAD_DIM : F_ACC + (r0 + lid) * LDR, in_len, params.w[ff],
                                          params.w[ff + 1u], OP_A + (r0 + lid) * LDA);
            barrier();  // the LayerNorm has read the sum tile: clear it for this level's sum
            [[unroll]] for (uint it = 0u; it < (TILE_M * LDR + THREADS - 1u) / THREADS; ++it) {
                const uint i = it * THREADS + lid;
                if (i < TILE_M * LDR) f_pool[F_ACC + i] = 0.0;
            }
            feed_forward(in_len, ff);
            barrier();
        }
        if (branch == 0u) {
            [[unroll]] for (uint it = 0u; it < (TILE_M * LDR + THREADS - 1u) / THREADS; ++it) {
                const uint i = it * THREADS + lid;
                if (i < TILE_M * LDR) f_pool[F_F1 + i] = f_pool[F_ACC + i];
            }
        }
    }
    const float root_r = sqrt(float(SKETCH));
    [[unroll]] for (uint it = 0u; it < (TILE_M * LDR + THREADS - 1u) / THREADS; ++it) {
        const uint i = it * THREADS + lid;
        const uint r = i / LDR, c = i % LDR;
        if (i < TILE_M * LDR && r < rows && c < SKETCH)
            sketch_out[(out_row0 + r) * SKETCH + c] = root_r * stable_tanh(f_pool[F_F1 + i] * f_pool[F_ACC + i] / root_r);
    }
#else
#error "define SKETCH_RANDOM or SKETCH_LEARNED"
#endif
}
