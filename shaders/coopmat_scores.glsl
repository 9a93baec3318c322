// The cooperative score tile S = Q K^T of a row group, shared by the softmax / polynomial baseline
// (attention_tiled_coopmat.comp) and the polysketch output's local part
// (polysketch_output_coopmat.comp): both stage the tile's query rows Q (row-major A, row stride
// LDQ, at OP_Q) and the key tile's rows K (column-major B = K^T, row stride LDQ, at OP_K) in the
// operand pool `op_pool`, WIDTH_CHUNK columns per step, and spread the ST = KEY_TILE / CM_N score
// tiles of a row group over its SG_N subgroups: `score[u]` (u < SU) is tile s = sg_n + u SG_N, a
// float32 accumulator. The including shader declares op_pool, OP_Q, OP_K, LDQ, ST, SU and the
// subgroup coordinates sg_m, sg_n; it also stages the operands (their sources and scales differ)
// and turns the scores into weights.
//
// Macros rather than functions: the products, loads and their order are exactly those the
// kernels ran inline (one A operand live at a time, each B loaded right before its product: the
// pattern that passes on NVIDIA), with no arrays of cooperative matrices passed to functions.
#ifndef PSK_COOPMAT_SCORES_GLSL
#define PSK_COOPMAT_SCORES_GLSL

// score[u] = 0 for every tile of the subgroup.
#define CM_SCORES_ZERO(score)                                      \
    [[unroll]] for (uint u = 0u; u < SU; ++u) score[u] = CM_ACC_ZERO;

// One width step at column w0 of `width`: score[u] += Q[:, w0 ..] K[s, w0 ..]^T, where `active`
// (subgroup-uniform) says the subgroup has rows that see keys of the tile.
#define CM_SCORES_STEP(score, active, w0, width) CM_SCORES_STEP_AT(score, active, w0, width, OP_Q, OP_K)

// The same with the Q and K operands at pool offsets q_at and k_at (the hi + lo parts of a split
// product, polysketch_output_coopmat.comp's SPLIT_LOCAL).
#define CM_SCORES_STEP_AT(score, active, w0, width, q_at, k_at)                                     \
    if (active) {                                                                                   \
        [[unroll]] for (uint kk = 0u; kk < WIDTH_CHUNK; kk += CM_K) {                               \
            if ((w0) + kk < (width)) {                                                              \
                CM_A ma;                                                                            \
                CM_LOAD_ROW_A(ma, op_pool, (q_at) + sg_m * CM_M * LDQ + kk, LDQ);                   \
                [[unroll]] for (uint u = 0u; u < SU; ++u) {                                         \
                    const uint s = sg_n + u * SG_N;                                                 \
                    if (s < ST) {                                                                   \
                        CM_B mb;                                                                    \
                        CM_LOAD_COL_B(mb, op_pool, (k_at) + s * CM_N * LDQ + kk, LDQ); /* K^T */    \
                        score[u] = CM_MULADD(ma, mb, score[u]);                                     \
                    }                                                                               \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }

// The subgroup's score tiles out to the float32 array `scores`, rows of `stride` (row r of the
// workgroup's tile at r * stride).
#define CM_SCORES_STORE(score, active, scores, stride) CM_SCORES_STORE_AT(score, active, scores, 0u, stride)
// The same from element `base` of `scores` (polysketch_output_coopmat.comp's FUSED_QUERY keeps
// the S(q) rows before it).
#define CM_SCORES_STORE_AT(score, active, scores, base, stride)                                             \
    if (active) {                                                                                           \
        [[unroll]] for (uint u = 0u; u < SU; ++u) {                                                         \
            const uint s = sg_n + u * SG_N;                                                                 \
            if (s < ST) CM_STORE_ROW(score[u], scores, (base) + sg_m * CM_M * (stride) + s * CM_N, stride); \
        }                                                                                                   \
    }

#endif
