#version 450
// Polysketch output (docs/MATH.md section 6) on cooperative matrices: the result of
// polysketch_output.comp (same bindings, push constants PolysketchOutputPush, output layout):
// for query row i of block l
//
//   num_i = phi(q_i)^T Z + local_i,      O_i[c] = num_i[c] / (1 + num_i[dv])  (c < dv)
//
//   Z:       CAUSAL: Z_l, the exclusive prefix of the block states (zero for l = 0: skipped);
//            full:   the sum of every block state, reduced into block 0. Rows of Z_STRIDE floats:
//            dv values, the normalizer at column dv, zero padding.
//   local_i: CAUSAL only, keys j of block l with j <= i: w_ij [v_j | 1] with
//            w_ij = <S(q_i), S(k_j)>^2 (sketched) or (q'_i . k'_j)^DEGREE (LOCAL_EXACT, the rows
//            the feature map wrote; q' is already scaled).
//
// Tiling: a workgroup owns TILE_M = SG_M * CM_M consecutive query rows of one block (grid x =
// blocks * tiles_per_block, tiles_per_block = ceil(block_size / TILE_M)) and all NT =
// ceil((dv + 1) / CM_N) column tiles of them, as float32 accumulators spread over SG_M x SG_N
// subgroups: subgroup (m, n) owns rows m CM_M .. and the column tiles n WN .. n WN + WN - 1 that
// are < NT. The normalizer is column dv of the same GEMMs (the normalizer column of Z, the ones
// column of [V | 1]), so there is no separate sum.
//
//  1. S(q) rows of the tile are staged once (float32), with the range maxima of the operands.
//     FUSED_QUERY: computed here from q itself instead of read from the feature map's rows (the
//     random sketch of degree 2 or 4): the tile's q rows are staged, each row's LayerNorm
//     statistics taken (QUERY_NORM), x = s LN(q) formed in place, then S(q) = x (degree 2) or
//     c (x G_a) * (x G_b) (degree 4) in float32 on the FP32 units (TILE_M x r x h multiply-adds
//     twice: a few percent of the workgroup's work), the arithmetic of sketch_features.comp; the
//     local part's q' (x, or s LN_local(q)) is formed from q again with the kept statistics. So
//     the forward writes and reads no query-side rows: the feature map runs for k alone
//     (docs/ARCHITECTURE.md, "Which stages").
//  2. Inter-block, chunks of FEAT_CHUNK features: A = phi(q) rows (TILE_M x FEAT_CHUNK, expanded
//     from the pair table, self_tensor.glsl) and B = the Z chunk (FEAT_CHUNK x NT CM_N, zero past
//     column dv), each as two operands, hi = round(x) and lo = round(x - hi); part = A_lo B_hi +
//     A_hi B_lo + A_hi B_hi in float32, then acc += part / (scale_A scale_B) (CM_ADD_SCALED). Why
//     B in two parts: Z's value columns and its normalizer column are consistent sums of
//     phi(k) [v | 1] (the block states' products of 16-bit numbers are exact in float32), and
//     O = num / den relies on it where phi(q) . phi(k) cancels (features of either sign): rounding
//     Z once to 11 (float16) or 8 (bfloat16) bits broke that consistency, up to 1e-2 relative
//     error in float16 on a row that sees a single key (tests/conformance_polysketch_test,
//     GpuTiles16's n = 1). Why A in two parts too: rounding phi(q) does not scale numerator and
//     normalizer alike where they cancel. For a row that sees one key, O = w v / (1 + w) with
//     w = phi(q) . phi(k); each feature's rounding error (2^-11 relative) enters w weighted by
//     its term, so where the terms cancel to a small w the relative error of O is that of w,
//     amplified by sum |terms| / |w|: 8.8e-4 of the float16 threshold's 2e-3 under emulation on
//     the Sweep16 n = 1 full case, 6.8e-3 on an H200 (docs/RELIABILITY.md).
//     Z_PACKED: B comes ready, hi and lo with the chunk's scale, from z_operands.comp's records
//     (packed once per block after the prefix, the same scale and split as below): the fragments
//     load straight from the buffer (L2), with no range pass, no staging of B and one barrier per
//     chunk fewer (docs/MODEL.md, "Z operands packed once per block").
//  3. Local part (CAUSAL), keys KEY_TILE at a time up to the tile's last row: scores S = Q K^T
//     (operands q' and k', or S(q) and S(k), WIDTH_CHUNK columns per step; the KEY_TILE / CM_N
//     score tiles of a row group are spread over its SG_N subgroups) out through a float32
//     scratch (CM_STORE_ROW); there, in float32 by the whole workgroup: undo the operand scales,
//     mask (j <= i, rows of the block), raise to DEGREE (2 when sketched), choose the tile's
//     power-of-two weight scale, round into the W operand; then part = W [V | 1] (the V tile
//     staged once per key tile with its own scale; its column dv holds the scale itself, the
//     ones), acc += part / (scale_W scale_V).
//     Float32 storage (SPLIT_LOCAL = 1): Q, K, W and [V | 1] are staged as hi + lo too, and each
//     product is three, lo x hi, hi x lo, hi x hi (docs/MATH.md, "Products on 16-bit matrix
//     units"): one 16-bit rounding of q', k', w or v (2^-11) is far above the float32 thresholds.
//  4. The accumulators leave through per-subgroup scratch tiles: first the normalizer column
//     (column dv, in tile NT - 1) into den_s, then every tile normalized, STORE_ELEM.
//
// Range (as block_states_coopmat.comp): features reach 1e4-1e5 with LayerNorm'd inputs and Z 1e7
// and more at long n, outside float16. Every operand is scaled by a power of two that brings its
// largest |element| to at most 2^14 before it is rounded (CM_TO_OPERAND): phi(q) once per
// workgroup (the bound sqrt(2) max|S(q)|^2, reached by the square features), each Z chunk by its
// own maximum (a pass over the chunk before it is staged; Z_PACKED: z_operands.comp's pass), q'
// (or S(q)), k' (or S(k)) and v once per workgroup from the maxima over its rows and keys (v's
// scale covers the ones column), the weights once per key tile. Maxima are combined with atomicMax on the float bits (non-negative
// floats order as their bit patterns). Scales are powers of two in 2^-60 .. 2^60, so undoing them
// (one float32 product of two) is exact. Weights below 2^-28 of the tile's largest weight fall
// out of float16's normal range (2^-14 .. 2^14 after scaling) and lose precision.
//
// Shared memory: two pools whose regions alias by phase. The float32 pool holds the S(q) rows
// (TILE_M x SKETCH) in steps 1-2, the scores / weights (TILE_M x KEY_TILE) in step 3 and one
// CM_M x CM_N scratch per subgroup in step 4; the operand pool holds A and B (B unless Z_PACKED)
// in step 2 and Q, K, W, V in step 3. Operand rows are padded by 8 elements: 16-byte aligned for 2-byte operands
// (the load/store rule) and spread over the banks. The host computes the bytes
// (polysketchOutputCoopMatSharedBytes, lib/forward/polysketch_plan.cpp); with the emulated
// backend operands are 4-byte floats and coopmat.glsl adds 2 KiB per subgroup (16 x 16 x 16).
//
// llvmpipe's loop budget (docs/ARCHITECTURE.md): loops with spec-constant trip counts are
// unrolled; the run-time loops are the feature chunks (F / FEAT_CHUNK), the key tiles (at most
// block_size / KEY_TILE), the width steps, the maxima passes over the tile's keys, the lane loops
// over a scratch tile and, in the emulated backend, its per-lane loops over matrix elements (about
// (M K + 2 K N + M N) / lanes per product: the host keeps their sum bounded, see planPolysketch).
//
// Loads without branches: the staging rounds of global data (the Z chunk's range pass and
// staging, phi(q)'s pair table, the key tile's K and V) load in every lane, from a valid element
// where the lane has none (the last feature, key or column: indices clamped), and select zero
// afterwards. A load inside `if (in range)` is a branch per element, and a compiler waits for each
// load before the branch that follows it, so the rounds' loads went one after the other;
// branch-free they are in flight together, with fewer instructions per element (docs/MODEL.md, "An
// issue floor from a compiler's instruction counts", counted by AMD's compiler).
//
// One source for GL_KHR_cooperative_matrix, GL_NV_cooperative_matrix and the emulated backend
// (coopmat.glsl). The workgroup must consist of exactly SG_M * SG_N subgroups: the host sets
// THREADS = SG_M * SG_N * subgroup size and pins the subgroup size where it can vary.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x_id = 0) in;
#include "interface/polysketch_output_coopmat.h"
PSK_DECLARE_SPECS(PSK_POLYSKETCH_OUTPUT_COOPMAT_SPEC)
PSK_DECLARE_BINDINGS(PSK_POLYSKETCH_OUTPUT_BINDINGS)

#define CM_SUBGROUPS (SG_M * SG_N)
#include "coopmat.glsl"
#include "coopmat_scores.glsl"
#include "self_tensor.glsl"
#define PSK_STAGE_BATCH_SPEC  // STAGE_BATCH is this kernel's specialization constant (output.stage_batch)
#include "staging.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(std430, binding = BINDING_Q_SKETCH) readonly buffer QSketch { float q_sketch[]; };
layout(std430, binding = BINDING_K_LOCAL) readonly buffer KLocal { float k_local[]; };  // S(k) rows, or k' rows
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer OBuffer { ELEM o_data[]; };
layout(std430, binding = BINDING_STATES) readonly buffer States { float states[]; };
layout(std430, binding = BINDING_PAIRS) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = BINDING_Q_LOCAL) readonly buffer QLocal { float q_local[]; };  // q' rows (LOCAL_EXACT)
// FUSED_QUERY: the same bindings hold q itself and the packed sketch (every packed tensor starts
// on a vec4), which replace the rows above (polysketch_output.h; Vulkan allows several variables
// on one binding).
layout(std430, binding = BINDING_Q_SKETCH) readonly buffer QRows { ELEM q_data[]; };
layout(std430, binding = BINDING_Q_LOCAL) readonly buffer Weights { vec4 w_vec[]; };
// Z_PACKED: binding STATES holds z_operands.comp's records instead of Z (eight operands per uvec4).
layout(std430, binding = BINDING_STATES) readonly buffer ZOperands { uvec4 z_ops[]; };

const uint TILE_M = SG_M * CM_M;
const uint NT = (VALUE_DIM + CM_N) / CM_N;   // column tiles: ceil((dv + 1) / CM_N)
const uint NC = NT * CM_N;
const uint ST = KEY_TILE / CM_N;             // score tiles of a row group per key tile ...
const uint SU = (ST + SG_N - 1u) / SG_N;     // ... per subgroup
const uint KEY_WIDTH = LOCAL_EXACT ? HEAD_DIM : SKETCH;
const uint PAD = 8u;
const uint LDA = FEAT_CHUNK + PAD;   // A: phi(q) rows, row-major
// phi(q)'s expansion in rounds of THREADS elements (see its loop): rounds, features per invocation,
// whether the rounds are whole (no guard on their stores) and whether an invocation's features are
// fixed across the chunk's rounds.
const uint A_ROUNDS = (TILE_M * FEAT_CHUNK + THREADS - 1u) / THREADS;
const uint A_FEATURES = (FEAT_CHUNK + THREADS - 1u) / THREADS;
const bool A_WHOLE = TILE_M * FEAT_CHUNK % THREADS == 0u;
const bool A_FIXED = THREADS % FEAT_CHUNK == 0u || FEAT_CHUNK % THREADS == 0u;
const uint LDB = NC + PAD;           // B: Z chunk rows / V rows, row-major
const uint K_ROUNDS = (KEY_TILE * WIDTH_CHUNK + THREADS - 1u) / THREADS;  // step 3's staging rounds of K ...
const uint V_ROUNDS = (KEY_TILE * NC + THREADS - 1u) / THREADS;           // ... and of [V | 1]
// Whether those rounds are whole (every lane has an element in each): then no lane tests its index,
// a test a compiler cannot fold (it does not know lid < THREADS), and into whose branch it would
// move the round's load ("Loads without branches").
const bool K_WHOLE = (KEY_TILE * WIDTH_CHUNK) % THREADS == 0u;
const bool V_WHOLE = (KEY_TILE * NC) % THREADS == 0u;
const uint LDQ = WIDTH_CHUNK + PAD;  // Q rows (row-major A), K rows (column-major B = K^T)
const uint LDW = KEY_TILE + PAD;     // W rows, row-major
// Operand pool: step 2 [A | B hi | B lo], step 3 [Q | K | W | V], each of step 3's followed by
// its low parts when SPLIT_LOCAL (X_LO: the offset of X's low parts from X).
const uint OP_A = 0u;
const uint A_LO = TILE_M * LDA;      // the low parts of A, after the high parts
const uint OP_B = 2u * A_LO;
const uint B_LO = FEAT_CHUNK * LDB;  // the low parts of B, after the high parts
const uint OP_INTER = Z_PACKED != 0u ? OP_B : OP_B + 2u * B_LO;  // Z_PACKED: B from the records, not staged
// Z_PACKED: a record of z_operands.comp (uvec4 units): the scale, then hi and lo, each NC columns
// of FEAT_CHUNK operands (B column-major: the product's K contiguous, as the matrix units take it).
const uint Z_COL16 = FEAT_CHUNK / 8u, Z_PART = NC * Z_COL16, Z_RECORD = 1u + 2u * Z_PART;
const uint PARTS = 1u + SPLIT_LOCAL;
const uint Q_LO = TILE_M * LDQ, K_LO = KEY_TILE * LDQ, W_LO = TILE_M * LDW, V_LO = KEY_TILE * LDB;
const uint OP_Q = 0u;
const uint OP_K = PARTS * Q_LO;
const uint OP_W = OP_K + PARTS * K_LO;
const uint OP_V = OP_W + PARTS * W_LO;
const uint OP_LOCAL = CAUSAL ? OP_V + PARTS * V_LO : 0u;
const uint OP_POOL = OP_INTER > OP_LOCAL ? OP_INTER : OP_LOCAL;
// Float32 pool: [TILE_M][SKETCH] S(q) rows (steps 1-2), [TILE_M][KEY_TILE] scores (step 3),
// [subgroup][CM_M][CM_N] (step 4). FUSED_QUERY = 2 stages x = s LN(q) ([TILE_M][HEAD_DIM]) after the
// S(q) rows in step 1; FUSED_QUERY with a sketched local part keeps the S(q) rows through step 3
// (they are its Q operand), so the scores start after them (F_SC).
const uint F_SQ = TILE_M * SKETCH;
const uint F_X = F_SQ;
const uint F_XLEN = FUSED_QUERY == 2u ? TILE_M * HEAD_DIM : 0u;
const uint F_SC = FUSED_QUERY != 0u && !LOCAL_EXACT ? F_SQ : 0u;
const uint F_SCORES = TILE_M * KEY_TILE;
const uint F_OUT = SG_M * SG_N * CM_M * CM_N;
const uint F_POOL_1 = F_SQ + F_XLEN;
const uint F_POOL_3 = F_SC + F_SCORES;
const uint F_POOL_13 = F_POOL_1 > F_POOL_3 ? F_POOL_1 : F_POOL_3;
const uint F_POOL = F_POOL_13 > F_OUT ? F_POOL_13 : F_OUT;
// Range maxima (float bits): S(q), q', k', v, two Z chunk slots, the key tile's weights.
const uint R_S = 0u, R_Q = 1u, R_K = 2u, R_V = 3u, R_Z = 4u, R_W = 6u;
const uint RANGE_SLOTS = 7u;
// The normalizer column dv lies in column tile NT - 1: its owner subgroup column and slot.
const uint DEN_SG_N = (NT - 1u) / WN, DEN_W = (NT - 1u) % WN;

shared CM_OPERAND op_pool[CM_SHARED_COUNT(OP_POOL, CM_OPERAND_BYTES)];
shared float f_pool[CM_SHARED_COUNT(F_POOL, 4u)];
shared float den_s[CM_SHARED_COUNT(TILE_M, 4u)];
shared uint range_bits[CM_SHARED_COUNT(RANGE_SLOTS, 4u)];

float range_max(uint slot) { return uintBitsToFloat(range_bits[slot]); }

// x into the operand pool at `at`: rounded where lo is 0, else as hi + lo (CM_SPLIT_HIGH), the rest
// at `at + lo` (the parts of a split operand: step 2 always, step 3 with SPLIT_LOCAL).
void put_operand(uint at, uint lo, float x) {
    if (lo == 0u) {
        op_pool[at] = CM_TO_OPERAND(x);
    } else {
        const float hi = CM_SPLIT_HIGH(x);
        op_pool[at] = CM_TO_OPERAND(hi);
        op_pool[at + lo] = CM_TO_OPERAND(x - hi);
    }
}

// Feature f of the chunk at f0 of flen features: the positions of its pair in an S(q) row and its
// coefficient times the operand scale, zero past flen (branch-free: the last feature's entry read).
float chunk_pair(uint f0, uint f, uint flen, float a_scale, out uint a, out uint b) {
    const uint entry = pairs[f0 + min(f, flen - 1u)];
    a = pair_first(entry);
    b = pair_second(entry);
    return f < flen ? pair_coefficient(entry) * a_scale : 0.0;
}

// FUSED_QUERY: each row's LayerNorm mean and 1 / sqrt(var + eps) (QUERY_NORM != 0; both norms of a
// row share them: only their scale and bias differ).
shared vec2 ln_row[CM_SHARED_COUNT(TILE_M, 8u)];
const float LN_EPS = 1e-5;

float sketch_weight(uint i) { return w_vec[i >> 2][i & 3u]; }

// FUSED_QUERY: element d of query row r (of the tile) as it enters the sketch, x = s LN(q) (or s q),
// from its raw value q.
float query_x(float q, uint r, uint d) {
    if ((QUERY_NORM & 1u) != 0u)
        q = (q - ln_row[r].x) * ln_row[r].y * sketch_weight(params.ln_scale + d) + sketch_weight(params.ln_bias + d);
    return q * params.scale;
}

// ... and as the local part uses it, q' = s LN_local(q) with a separate local LayerNorm, else x.
float query_local(float q, uint r, uint d) {
    if ((QUERY_NORM & 2u) != 0u)
        return ((q - ln_row[r].x) * ln_row[r].y * sketch_weight(params.local_ln_scale + d) + sketch_weight(params.local_ln_bias + d)) *
               params.scale;
    return query_x(q, r, d);
}

float query_raw(uint batch, uint q_head, uint row, uint d) {
    return LOAD_ELEM(q_data[tensor_row(params.q_strides, batch, q_head, row) + d]);
}

// Column d of row r of the tile's local-part query rows (the tile starts at row_begin): q' (or S(q)
// without LOCAL_EXACT) from the feature map's rows at q_base, or formed here again (FUSED_QUERY:
// q' from q, S(q) from the pool).
float local_query(uint batch, uint q_head, uint row_begin, uint q_base, uint r, uint d) {
    if (FUSED_QUERY != 0u) return LOCAL_EXACT ? query_local(query_raw(batch, q_head, row_begin + r, d), r, d) : f_pool[r * SKETCH + d];
    return LOCAL_EXACT ? q_local[q_base + r * HEAD_DIM + d] : q_sketch[q_base + r * SKETCH + d];
}

float weight_power(float x) {
    float w = x;  // x^DEGREE by repeated squaring (DEGREE is a power of two)
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

void main() {
    // The emulated backend hands shared memory over as NaN, as a GPU might (coopmat.glsl).
    CM_POISON_SHARED(op_pool, OP_POOL);
    CM_POISON_SHARED(f_pool, F_POOL);
    CM_POISON_SHARED(den_s, TILE_M);
    const uint block = gl_WorkGroupID.x / params.tiles_per_block;
    const uint tile = gl_WorkGroupID.x % params.tiles_per_block;
    const uint q_head = gl_WorkGroupID.y, batch = gl_WorkGroupID.z;
    const uint kv_head = q_head / params.head_ratio;
    const uint q_seq = batch * params.q_heads + q_head;
    const uint kv_seq = batch * params.kv_heads + kv_head;
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint sg_m = sg % SG_M, sg_n = sg / SG_M;

    const uint block_begin = block * params.block_size;
    const uint block_end = min(params.n, block_begin + params.block_size);
    const uint row_begin = block_begin + tile * TILE_M;
    if (row_begin >= block_end) return;  // a tile past a short last block (the whole workgroup)
    const uint row_end = min(block_end, row_begin + TILE_M);
    const uint last_row = row_end - row_begin - 1u;  // the tile's last row (clamped staging loads)
    const uint sg_row = row_begin + sg_m * CM_M;  // this subgroup's first row
    const uint sg_end = min(row_end, sg_row + CM_M);
    const bool sg_rows = sg_row < row_end;        // the subgroup has rows (subgroup-uniform)
    const uint key_end = row_end;                 // keys past the tile's last row never count

    [[unroll]] for (uint i = 0u; i < RANGE_SLOTS; i += THREADS)
        if (i + lid < RANGE_SLOTS) range_bits[i + lid] = 0u;
    barrier();

    // ---- 1. S(q) rows of the tile (zero past its last row), and the operand ranges ----
    {
        float s_max = 0.0, s_x_max = 0.0, x_max = 0.0;  // S(q), x, q' (FUSED_QUERY)
        // Global rows are staged with their loads in flight (staging.glsl: whole tiles, no guard on
        // the stores), the rows past the tile's last one zero.
        if (FUSED_QUERY == 0u) {
            STAGED_COPY(F_SQ, THREADS, lid, q_sketch[(q_seq * params.n + row_begin + min(i / SKETCH, last_row)) * SKETCH + i % SKETCH],
                        row_begin + i / SKETCH < row_end, {
                            f_pool[i] = v;
                            s_max = max(s_max, abs(v));
                        })
        } else {
            // The tile's q rows (zero past its last row) where x = s LN(q) will be: S(q) itself
            // (degree 2, SKETCH = HEAD_DIM) or the input of its two products (degree 4, at F_X).
            const uint x_at = FUSED_QUERY == 1u ? 0u : F_X;
            STAGED_COPY(TILE_M * HEAD_DIM, THREADS, lid, query_raw(batch, q_head, row_begin + min(i / HEAD_DIM, last_row), i % HEAD_DIM),
                        row_begin + i / HEAD_DIM < row_end, f_pool[x_at + i] = v)
            if (QUERY_NORM != 0u) {
                barrier();  // the rows are staged
                // Each row's statistics, as sketch_features.comp's LAYER_NORM (population variance, eps inside).
                [[unroll]] for (uint it = 0u; it < (TILE_M + THREADS - 1u) / THREADS; ++it) {
                    const uint r = it * THREADS + lid;
                    if (r < TILE_M) {
                        float mean = 0.0;
                        [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) mean += f_pool[x_at + r * HEAD_DIM + d];
                        mean /= float(HEAD_DIM);
                        float var = 0.0;
                        [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) {
                            const float c = f_pool[x_at + r * HEAD_DIM + d] - mean;
                            var += c * c;
                        }
                        ln_row[r] = vec2(mean, inversesqrt(var / float(HEAD_DIM) + LN_EPS));
                    }
                }
                barrier();
            }
            // x in place (each invocation its own elements), with the ranges of x and of q'.
            [[unroll]] for (uint it = 0u; it < (TILE_M * HEAD_DIM + THREADS - 1u) / THREADS; ++it) {
                const uint i = it * THREADS + lid;
                if (i < TILE_M * HEAD_DIM) {
                    const uint r = i / HEAD_DIM, d = i % HEAD_DIM;
                    const bool valid = row_begin + r < row_end;
                    const float q = f_pool[x_at + i];
                    const float x = valid ? query_x(q, r, d) : 0.0;
                    f_pool[x_at + i] = x;
                    s_x_max = max(s_x_max, abs(x));
                    if (LOCAL_EXACT) x_max = max(x_max, abs((QUERY_NORM & 2u) != 0u && valid ? query_local(q, r, d) : x));
                }
            }
            if (FUSED_QUERY == 1u) s_max = s_x_max;
            if (FUSED_QUERY == 2u) {
                barrier();  // the x rows are staged
                // S(q)[r][c] = c_node (x_r . G_a[c]) (x_r . G_b[c]) for 4 rows r = g + j TILE_M / 4 and
                // one column c per invocation: each weight vec4 (from L1/L2) feeds 4 rows, each x
                // value (a broadcast from shared memory: consecutive invocations, consecutive columns)
                // the whole subgroup's columns.
                const uint QG = TILE_M / 4u;
                [[dont_unroll]] for (uint i = lid; i < QG * SKETCH; i += THREADS) {
                    const uint g = i / SKETCH, c = i % SKETCH;
                    float a[4], b[4];
                    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                        a[j] = 0.0;
                        b[j] = 0.0;
                    }
                    if (HEAD_DIM % 4u == 0u) {
                        const uint a4 = (params.w_a + c * HEAD_DIM) >> 2, b4 = (params.w_b + c * HEAD_DIM) >> 2;
                        [[unroll]] for (uint d4 = 0u; d4 < HEAD_DIM / 4u; ++d4) {
                            const vec4 wa = w_vec[a4 + d4], wb = w_vec[b4 + d4];
                            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                                const uint xr = F_X + (g + j * QG) * HEAD_DIM + 4u * d4;
                                const vec4 x = vec4(f_pool[xr], f_pool[xr + 1u], f_pool[xr + 2u], f_pool[xr + 3u]);
                                a[j] += dot(x, wa);
                                b[j] += dot(x, wb);
                            }
                        }
                    } else {
                        [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) {
                            const uint ia = params.w_a + c * HEAD_DIM + d, ib = params.w_b + c * HEAD_DIM + d;
                            const float wa = w_vec[ia >> 2][ia & 3u], wb = w_vec[ib >> 2][ib & 3u];
                            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                                const float x = f_pool[F_X + (g + j * QG) * HEAD_DIM + d];
                                a[j] += x * wa;
                                b[j] += x * wb;
                            }
                        }
                    }
                    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                        const float s = params.node_scale * a[j] * b[j];  // zero past the tile's last row (x = 0)
                        f_pool[(g + j * QG) * SKETCH + c] = s;
                        s_max = max(s_max, abs(s));
                    }
                }
            }
        }
        atomicMax(range_bits[R_S], floatBitsToUint(s_max));
        if (CAUSAL) {
            float q_max = 0.0, k_max = 0.0, v_max = 0.0;
            // Passes over the tile's q' rows and the block's keys and values up to the tile's last
            // row, STAGE_BATCH loads in flight per invocation (staging.glsl). FUSED_QUERY: q' is
            // formed from q, and its maximum was taken above.
            if (LOCAL_EXACT && FUSED_QUERY != 0u) {
                q_max = x_max;
            } else if (LOCAL_EXACT) {
                const uint q_base = (q_seq * params.n + row_begin) * HEAD_DIM;
                STAGED_ABS_MAX(q_max, (row_end - row_begin) * HEAD_DIM, THREADS, lid, q_local[q_base + i])
            }
            const uint k_base = (kv_seq * params.n + block_begin) * KEY_WIDTH;
            STAGED_ABS_MAX(k_max, (key_end - block_begin) * KEY_WIDTH, THREADS, lid, k_local[k_base + i])
            const uint v_base = tensor_row(params.v_strides, batch, kv_head, block_begin);
            STAGED_ABS_MAX(v_max, (key_end - block_begin) * VALUE_DIM, THREADS, lid,
                           LOAD_ELEM(v_data[v_base + (i / VALUE_DIM) * params.v_strides.token + i % VALUE_DIM]))
            atomicMax(range_bits[R_Q], floatBitsToUint(q_max));
            atomicMax(range_bits[R_K], floatBitsToUint(k_max));
            atomicMax(range_bits[R_V], floatBitsToUint(v_max));
        }
    }
    barrier();

    CM_ACC acc[WN];
    [[unroll]] for (uint w = 0u; w < WN; ++w) acc[w] = CM_ACC_ZERO;

    // ---- 2. phi(q)^T Z: everything before this block (causal) or everything (full) ----
    // ABLATE (PSK_ABLATE, timing only): parts left out, so that a GPU run assigns the time to them
    // (interface/polysketch_output_coopmat.h: 8, 16, 32 split step 2 into the Z chunk's range pass,
    // the expansion of phi(q) and the staging of the Z chunk; 64 is step 3's key-tile staging).
    const bool products = (ABLATE & 4u) == 0u;
    if ((ABLATE & 1u) == 0u && (!CAUSAL || block > 0u || params.prefix_first != 0u)) {
        const uint z_base = (kv_seq * params.blocks + (CAUSAL ? block : 0u)) * params.features * Z_STRIDE;
        const float s_max = range_max(R_S);
        const float a_scale = operand_scale(SQRT2 * s_max * s_max);
        const float inv_a = 1.0 / a_scale;
        const uint chunks = (params.features + FEAT_CHUNK - 1u) / FEAT_CHUNK;
        const uint z_record = (kv_seq * (CAUSAL ? params.blocks : 1u) + (CAUSAL ? block : 0u)) * chunks * Z_RECORD;
        uint chunk = 0u;
        for (uint f0 = 0u; f0 < params.features; f0 += FEAT_CHUNK, ++chunk) {
            const uint flen = min(FEAT_CHUNK, params.features - f0);
            const uint slot = R_Z + (chunk & 1u);
            barrier();  // the previous chunk's operands and its maximum slot are read
            if (Z_PACKED == 0u && lid == 0u) range_bits[R_Z + ((chunk + 1u) & 1u)] = 0u;  // the next chunk's slot
            // The chunk's largest |Z| (normalizer column included) ...
            if (Z_PACKED == 0u && (ABLATE & 8u) == 0u) {
                // Branch-free rounds (see "Loads without branches" in the header): every lane loads,
                // past the chunk from its last feature, and keeps what is in it.
                float z_max = 0.0;
                [[unroll]] for (uint it = 0u; it < (FEAT_CHUNK * (VALUE_DIM + 1u) + THREADS - 1u) / THREADS; ++it) {
                    const uint i = it * THREADS + lid;
                    const uint f = i / (VALUE_DIM + 1u), c = i % (VALUE_DIM + 1u);
                    const float z = abs(states[z_base + (f0 + min(f, flen - 1u)) * Z_STRIDE + c]);
                    z_max = i < flen * (VALUE_DIM + 1u) ? max(z_max, z) : z_max;
                }
                atomicMax(range_bits[slot], floatBitsToUint(z_max));
            }
            // ... while A = phi(q) rows of the chunk are expanded (features past F are zero). Round it
            // gives invocation lid feature (it THREADS + lid) % FEAT_CHUNK of the chunk, which is
            // feature q = it % A_FEATURES's of the invocation where one of THREADS and FEAT_CHUNK
            // divides the other (A_FIXED: the plans' powers of two): its pair entry is loaded and
            // decoded once per chunk, not per element (docs/MODEL.md, "The block states' pairs
            // decoded once"; the output's expansion likewise).
            uint pa[A_FEATURES], pb[A_FEATURES];
            float pc[A_FEATURES];
            [[unroll]] for (uint q = 0u; q < A_FEATURES && A_FIXED; ++q)
                pc[q] = chunk_pair(f0, (q * THREADS + lid) % FEAT_CHUNK, flen, a_scale, pa[q], pb[q]);
            [[unroll]] for (uint it = 0u; it < A_ROUNDS; ++it) {
                const uint i = it * THREADS + lid;
                if ((A_WHOLE || i < TILE_M * FEAT_CHUNK) && (ABLATE & 16u) == 0u) {
                    const uint r = i / FEAT_CHUNK, f = i % FEAT_CHUNK;
                    const uint q = it % A_FEATURES;
                    uint a = pa[q], b = pb[q];
                    const float c = A_FIXED ? pc[q] : chunk_pair(f0, f, flen, a_scale, a, b);
                    put_operand(OP_A + r * LDA + f, A_LO, c * f_pool[r * SKETCH + a] * f_pool[r * SKETCH + b]);
                }
            }
            // Z_PACKED: A alone is staged here; the chunk's record holds B and its scale.
            const uint z_chunk = z_record + chunk * Z_RECORD;
            if (Z_PACKED == 0u) {
                barrier();
                // B = the Z chunk, scaled by its own power of two, zero past column dv, hi + lo. (Without
                // the range pass, ABLATE 8, the scale is the slot's 0: Z reads as zeros and its scale is
                // undone as infinity, a value the compiler cannot fold, so the staging still runs.)
                const float z_scale = (ABLATE & 8u) != 0u ? range_max(slot) : operand_scale(range_max(slot));
                [[unroll]] for (uint it = 0u; it < (FEAT_CHUNK * NC + THREADS - 1u) / THREADS; ++it) {
                    const uint i = it * THREADS + lid;
                    if (i < FEAT_CHUNK * NC && (ABLATE & 32u) == 0u) {
                        const uint f = i / NC, c = i % NC;
                        const float z = states[z_base + (f0 + min(f, flen - 1u)) * Z_STRIDE + min(c, VALUE_DIM)] * z_scale;  // branch-free
                        put_operand(OP_B + f * LDB + c, B_LO, f < flen && c <= VALUE_DIM ? z : 0.0);
                    }
                }
            }
            barrier();
            const float z_scale = Z_PACKED != 0u ? uintBitsToFloat(z_ops[z_chunk].x)
                                  : (ABLATE & 8u) != 0u        ? range_max(slot)
                                                               : operand_scale(range_max(slot));
            if (sg_rows && products) {
                CM_ACC part[WN];
                [[unroll]] for (uint w = 0u; w < WN; ++w) part[w] = CM_ACC_ZERO;
                [[unroll]] for (uint kk = 0u; kk < FEAT_CHUNK; kk += CM_K) {
                    if (kk < flen) {
                        // A and B each as hi + lo (see step 2 in the header): the small products
                        // first, A_lo B_hi and A_hi B_lo, then A_hi B_hi (lo x lo is below float32's ulp).
                        // One declarator per declaration: glslang gives a second declarator of a
                        // coopmat type list no matrix use (spirv-val rejects the product).
                        CM_A ma;
                        CM_A ma_lo;
                        CM_LOAD_ROW_A(ma_lo, op_pool, OP_A + A_LO + sg_m * CM_M * LDA + kk, LDA);
                        CM_LOAD_ROW_A(ma, op_pool, OP_A + sg_m * CM_M * LDA + kk, LDA);
                        [[unroll]] for (uint w = 0u; w < WN; ++w) {
                            const uint t = sg_n * WN + w;
                            if (t < NT) {
                                CM_B mb;
                                CM_B mb_lo;
                                if (Z_PACKED != 0u) {
                                    const uint at = z_chunk + 1u + t * CM_N * Z_COL16 + kk / 8u;
                                    CM_LOAD_COL_B_V(mb, z_ops, at, Z_COL16);
                                    CM_LOAD_COL_B_V(mb_lo, z_ops, at + Z_PART, Z_COL16);
                                } else {
                                    CM_LOAD_ROW_B(mb, op_pool, OP_B + kk * LDB + t * CM_N, LDB);
                                    CM_LOAD_ROW_B(mb_lo, op_pool, OP_B + B_LO + kk * LDB + t * CM_N, LDB);
                                }
                                part[w] = CM_MULADD(ma_lo, mb, part[w]);
                                part[w] = CM_MULADD(ma, mb_lo, part[w]);
                                part[w] = CM_MULADD(ma, mb, part[w]);
                            }
                        }
                    }
                }
                const float back = inv_a * (1.0 / z_scale);  // exact: powers of two in 2^-120 .. 2^120
                [[unroll]] for (uint w = 0u; w < WN; ++w) CM_ADD_SCALED(acc[w], part[w], back);
            }
        }
    }

    // ---- 3. Local part: keys of this block up to each row ----
    if (CAUSAL && (ABLATE & 2u) == 0u) {
        const float q_scale = operand_scale(LOCAL_EXACT ? range_max(R_Q) : range_max(R_S));
        const float k_scale = operand_scale(range_max(R_K));
        const float v_scale = operand_scale(max(range_max(R_V), 1.0));  // the ones column is v_scale
        const float inv_qk = (1.0 / q_scale) * (1.0 / k_scale);
        const float inv_v = 1.0 / v_scale;
        const uint q_base = (q_seq * params.n + row_begin) * (LOCAL_EXACT ? HEAD_DIM : SKETCH);
        const uint k_base = kv_seq * params.n * KEY_WIDTH;
        const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);
        for (uint ks = block_begin; ks < key_end; ks += KEY_TILE) {
            const bool sees_keys = sg_rows && ks < sg_end && products;  // a key of the tile is visible to a row of the subgroup
            CM_ACC score[SU];
            CM_SCORES_ZERO(score)
            [[dont_unroll]] for (uint w0 = 0u; w0 < KEY_WIDTH; w0 += WIDTH_CHUNK) {
                barrier();  // the previous step's operands (and the previous key tile's W and V) are read
                // Q: the tile's rows (zero past its last row), once when one step covers the width.
                // (Loads in flight, as the S(q) rows; row and column clamped for the load, zero past.)
                if (KEY_WIDTH > WIDTH_CHUNK || ks == block_begin) {
                    STAGED_COPY(TILE_M * WIDTH_CHUNK, THREADS, lid, local_query(batch, q_head, row_begin, q_base, min(i / WIDTH_CHUNK, last_row),
                                                                        min(w0 + i % WIDTH_CHUNK, KEY_WIDTH - 1u)),
                                row_begin + i / WIDTH_CHUNK < row_end && w0 + i % WIDTH_CHUNK < KEY_WIDTH,
                                put_operand(OP_Q + (i / WIDTH_CHUNK) * LDQ + i % WIDTH_CHUNK, SPLIT_LOCAL * Q_LO, v * q_scale))
                }
                // K: the key tile's rows (zero past the last key any row of the tile sees). Rounds of
                // STAGE_BATCH loads, then their stores ("Loads without branches" in the header);
                // past the last key (or the width) a lane loads the last key's (last column's) value.
                [[unroll]] for (uint r0 = 0u; r0 < K_ROUNDS && (ABLATE & 64u) == 0u; r0 += STAGE_BATCH) {
                    float loaded[STAGE_BATCH];
                    [[unroll]] for (uint u = 0u; u < STAGE_BATCH; ++u) {
                        const uint i = (r0 + u) * THREADS + lid;
                        loaded[u] = r0 + u < K_ROUNDS ? k_local[k_base + min(ks + i / WIDTH_CHUNK, key_end - 1u) * KEY_WIDTH +
                                                                 min(w0 + i % WIDTH_CHUNK, KEY_WIDTH - 1u)]
                                                      : 0.0;
                    }
                    [[unroll]] for (uint u = 0u; u < STAGE_BATCH; ++u) {
                        const uint i = (r0 + u) * THREADS + lid;
                        const uint j = i / WIDTH_CHUNK, d = w0 + i % WIDTH_CHUNK;
                        if (r0 + u < K_ROUNDS && (K_WHOLE || i < KEY_TILE * WIDTH_CHUNK))
                            put_operand(OP_K + j * LDQ + i % WIDTH_CHUNK, SPLIT_LOCAL * K_LO,
                                        ks + j < key_end && d < KEY_WIDTH ? loaded[u] * k_scale : 0.0);
                    }
                }
                // [V | 1] of the key tile, scaled (the ones column holds v_scale), once per key tile.
                if (w0 == 0u && (ABLATE & 64u) == 0u) {
                    // Rounds of STAGE_BATCH loads, then their stores, as K's (past the last key or
                    // value column, the last one's).
                    [[unroll]] for (uint r0 = 0u; r0 < V_ROUNDS; r0 += STAGE_BATCH) {
                        float loaded[STAGE_BATCH];
                        [[unroll]] for (uint u = 0u; u < STAGE_BATCH; ++u) {
                            const uint i = (r0 + u) * THREADS + lid;
                            loaded[u] = r0 + u < V_ROUNDS ? LOAD_ELEM(v_data[v_base + min(ks + i / NC, key_end - 1u) * params.v_strides.token +
                                                                             min(i % NC, VALUE_DIM - 1u)])
                                                          : 0.0;
                        }
                        [[unroll]] for (uint u = 0u; u < STAGE_BATCH; ++u) {
                            const uint i = (r0 + u) * THREADS + lid;
                            const uint j = i / NC, c = i % NC;
                            const float x = c < VALUE_DIM ? loaded[u] * v_scale : (c == VALUE_DIM ? v_scale : 0.0);
                            if (r0 + u < V_ROUNDS && (V_WHOLE || i < KEY_TILE * NC)) put_operand(OP_V + j * LDB + c, SPLIT_LOCAL * V_LO, ks + j < key_end ? x : 0.0);
                        }
                    }
                }
                barrier();
                if (SPLIT_LOCAL != 0u) {  // the small products first, as in step 2
                    CM_SCORES_STEP_AT(score, sees_keys, w0, KEY_WIDTH, OP_Q + Q_LO, OP_K)
                    CM_SCORES_STEP_AT(score, sees_keys, w0, KEY_WIDTH, OP_Q, OP_K + K_LO)
                }
                CM_SCORES_STEP(score, sees_keys, w0, KEY_WIDTH)
            }
            CM_SCORES_STORE_AT(score, sees_keys, f_pool, F_SC, KEY_TILE)
            if (lid == 0u) range_bits[R_W] = 0u;  // its last reads were before the staging barrier
            barrier();
            // Weights in float32: unscaled scores, masked (j <= i inside the tile's rows; this also
            // masks the rows of subgroups that computed no scores, ks >= their last row), raised;
            // and the key tile's largest.
            float w_max = 0.0;
            [[unroll]] for (uint it = 0u; it < (F_SCORES + THREADS - 1u) / THREADS; ++it) {
                const uint e = it * THREADS + lid;
                if (e < F_SCORES) {
                    const uint i = row_begin + e / KEY_TILE, j = ks + e % KEY_TILE;
                    const float x = f_pool[F_SC + e] * inv_qk;
                    const float w = i < row_end && j <= i ? (LOCAL_EXACT ? weight_power(x) : x * x) : 0.0;
                    f_pool[F_SC + e] = w;
                    w_max = max(w_max, abs(w));
                }
            }
            atomicMax(range_bits[R_W], floatBitsToUint(w_max));
            barrier();
            const float w_scale = operand_scale(range_max(R_W));
            [[unroll]] for (uint it = 0u; it < (F_SCORES + THREADS - 1u) / THREADS; ++it) {
                const uint e = it * THREADS + lid;
                if (e < F_SCORES) put_operand(OP_W + (e / KEY_TILE) * LDW + e % KEY_TILE, SPLIT_LOCAL * W_LO, f_pool[F_SC + e] * w_scale);
            }
            barrier();
            if (sees_keys) {
                CM_ACC part[WN];
                [[unroll]] for (uint w = 0u; w < WN; ++w) part[w] = CM_ACC_ZERO;
                [[unroll]] for (uint kk = 0u; kk < KEY_TILE; kk += CM_K) {
                    if (SPLIT_LOCAL != 0u) {  // W_lo V_hi, then W_hi V_lo (below), then W_hi V_hi
                        CM_A ma_lo;
                        CM_LOAD_ROW_A(ma_lo, op_pool, OP_W + W_LO + sg_m * CM_M * LDW + kk, LDW);
                        [[unroll]] for (uint w = 0u; w < WN; ++w) {
                            const uint t = sg_n * WN + w;
                            if (t < NT) {
                                CM_B mb;
                                CM_LOAD_ROW_B(mb, op_pool, OP_V + kk * LDB + t * CM_N, LDB);
                                part[w] = CM_MULADD(ma_lo, mb, part[w]);
                            }
                        }
                    }
                    CM_A ma;
                    CM_LOAD_ROW_A(ma, op_pool, OP_W + sg_m * CM_M * LDW + kk, LDW);
                    [[unroll]] for (uint w = 0u; w < WN; ++w) {
                        const uint t = sg_n * WN + w;
                        if (t < NT) {
                            if (SPLIT_LOCAL != 0u) {
                                CM_B mb_lo;
                                CM_LOAD_ROW_B(mb_lo, op_pool, OP_V + V_LO + kk * LDB + t * CM_N, LDB);
                                part[w] = CM_MULADD(ma, mb_lo, part[w]);
                            }
                            CM_B mb;
                            CM_LOAD_ROW_B(mb, op_pool, OP_V + kk * LDB + t * CM_N, LDB);
                            part[w] = CM_MULADD(ma, mb, part[w]);
                        }
                    }
                }
                const float back = (1.0 / w_scale) * inv_v;
                [[unroll]] for (uint w = 0u; w < WN; ++w) CM_ADD_SCALED(acc[w], part[w], back);
            }
        }
    }

    // ---- 4. Normalize and write, through this subgroup's scratch tile ----
    barrier();  // every read of the float32 pool and of the operand pool is done
    const uint scratch = sg * CM_M * CM_N;
    // The normalizer column dv (tile NT - 1) into den_s, by the subgroups that own it.
    if (sg_rows && sg_n == DEN_SG_N) {
        CM_STORE_ROW(acc[DEN_W], f_pool, scratch, CM_N);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (uint r = lane; r < CM_M; r += gl_SubgroupSize)
            den_s[sg_m * CM_M + r] = f_pool[scratch + r * CM_N + VALUE_DIM - (NT - 1u) * CM_N];
    }
    barrier();
    if (sg_rows) {
        [[unroll]] for (uint w = 0u; w < WN; ++w) {
            const uint t = sg_n * WN + w;
            if (t < NT) {
                subgroupMemoryBarrierShared();
                subgroupBarrier();  // the scratch is free (previous tile written out)
                CM_STORE_ROW(acc[w], f_pool, scratch, CM_N);
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                for (uint e = lane; e < CM_M * CM_N; e += gl_SubgroupSize) {
                    const uint r = e / CM_N, c = t * CM_N + e % CM_N;
                    if (sg_row + r < sg_end && c < VALUE_DIM) {
                        const uint o = tensor_row(params.o_strides, batch, q_head, sg_row + r) + c;
                        o_data[o] = STORE_ELEM(f_pool[scratch + e] / (1.0 + den_s[sg_m * CM_M + r]));
                    }
                }
            }
        }
    }
}
