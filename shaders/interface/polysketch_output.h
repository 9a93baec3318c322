// Kernel interface of polysketch_output.comp and polysketch_output_team.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_POLYSKETCH_OUTPUT_H
#define PSK_INTERFACE_POLYSKETCH_OUTPUT_H

#include "common.h"

// polysketch_output.comp
#define PSK_POLYSKETCH_OUTPUT_SPEC(X) \
    X(0, uint, THREADS, 64) /* invocations: ROWS / 4 x COL_GROUPS */ \
    X(1, uint, ROWS, 64) /* query rows per workgroup, a multiple of 4 (4 per invocation) */ \
    X(2, uint, SKETCH, 32) /* length of S(q) */ \
    X(3, uint, HEAD_DIM, 64) /* h (local exact rows) */ \
    X(4, uint, VALUE_DIM, 64) /* dv */ \
    X(5, uint, FEAT_TILE, 16) /* Z rows staged per step */ \
    X(6, uint, KEY_TILE, 16) /* local keys staged per step: COL_GROUPS x keys per invocation */ \
    X(7, uint, DEGREE, 4) /* local exact weights (q.k)^DEGREE */ \
    X(8, bool, CAUSAL, true) \
    X(9, bool, LOCAL_EXACT, false) \
    X(10, uint, SMEM_FLOATS, 4800) /* the shared pool: the larger of the two phases' tiles, in floats */ \
    X(11, uint, COL_GROUPS, 4) /* invocations along the value columns */ \
    X(12, uint, COL_VEC4, 4) /* vec4 value columns per invocation */ \
    X(13, uint, WIDTH_CHUNK, 32) /* key-width columns of q and k staged per step of the scores, a multiple of 4 */ \
    X(14, uint, Z_STRIDE, 68) /* floats per state row: VALUE_DIM + 1 rounded up to 4 */ \
    X(15, uint, ABLATE, 0) /* timing only (PSK_ABLATE; the output is wrong): 1 no phi(q)^T Z part, 2 no local part, 16 no phi(q) expansion (phi_f = the pair coefficient), 32 no Z loads (zeros staged), 64 no key / value loads (zeros staged) */ \
    X(16, uint, STAGE_ROLLED, 0) /* 1: the staging's whole batches a loop not unrolled, one batch of loads held at a time (staging.glsl; generic.stage_rolled) */

// polysketch_output_rows.comp (the row kernel: one query row per invocation)
#define PSK_POLYSKETCH_OUTPUT_ROWS_SPEC(X) \
    X(0, uint, ROWS, 64) /* invocations; a workgroup owns ROWS * RPI query rows */ \
    X(1, uint, SKETCH, 32) /* length of S(q) */ \
    X(2, uint, HEAD_DIM, 64) /* h (local exact rows) */ \
    X(3, uint, VALUE_DIM, 64) /* dv */ \
    X(4, uint, FEAT_TILE, 16) /* Z rows staged per step (<= ROWS) */ \
    X(5, uint, KEY_TILE, 32) /* local keys staged per step */ \
    X(6, uint, DEGREE, 4) /* local exact weights (q.k)^DEGREE */ \
    X(7, bool, CAUSAL, true) \
    X(8, bool, LOCAL_EXACT, false) \
    X(9, uint, SMEM_FLOATS, 2048) /* max(FEAT_TILE ZS4, KEY_TILE (KW4 + VD4)) vec4s, in floats */ \
    X(10, uint, RPI, 1) /* query rows per invocation (register tile) */ \
    X(11, uint, Z_STRIDE, 68) /* floats per state row: VALUE_DIM + 1 rounded up to 4 */ \
    X(12, uint, ABLATE, 0) /* as polysketch_output.comp's */ \
    X(13, uint, STAGE_ROLLED, 0) /* as polysketch_output.comp's */

// polysketch_output_team.comp
#define PSK_POLYSKETCH_OUTPUT_TEAM_SPEC(X) \
    X(0, uint, SKETCH, 32) /* R, a multiple of 4 */ \
    X(1, uint, HEAD_DIM, 64) /* h (local exact rows), a multiple of 4 */ \
    X(2, uint, VALUE_DIM, 64) /* dv, a multiple of 4 */ \
    X(3, uint, DEGREE, 4) /* local exact weights (q.k)^DEGREE */ \
    X(4, bool, CAUSAL, true) \
    X(5, bool, LOCAL_EXACT, false) \
    X(6, uint, Z_STRIDE, 72) /* floats per state row (dv + 1 rounded up to 8) */ \
    X(7, uint, C4, 2) /* vec4 value columns per lane: ceil(dv / 32) */ \
    X(8, uint, V_LOAD, 0) /* How v rows are read: 0 element by element, 1 as vec4s (float32, every v stride a multiple of 4), 2 as 8 floats per u64vec4 load (float32, strides and dv multiples of 8, C4 even). A specialization constant, not a run-time branch, because a CPU driver runs both sides of a branch under a lane mask. */

// polysketch_output*.comp
#define PSK_POLYSKETCH_OUTPUT_BINDINGS(X) \
    X(0, Q_SKETCH, read) /* S(q) rows, float32; the cooperative kernel's FUSED_QUERY: q itself, storage type */ \
    X(1, K_LOCAL, read) /* S(k) rows, or k' rows (LOCAL_EXACT) */ \
    X(2, V, read) \
    X(3, OUT, write) \
    X(4, STATES, read) /* Z: the scanned (causal) or reduced (full) block states; the cooperative kernel's Z_PACKED: z_operands.comp's records of them */ \
    X(5, PAIRS, read) /* the self-tensor pair table */ \
    X(6, Q_LOCAL, read) /* q' rows (LOCAL_EXACT); the cooperative kernel's FUSED_QUERY: the packed sketch */

PSK_PUSH_BEGIN(PolysketchOutputPush)
    uint n;
    uint block_size;
    uint blocks;
    uint features;
    uint head_ratio;  // Hq / Hkv
    uint q_heads;
    uint kv_heads;
    uint tiles_per_block;  // ceil(block_size / ROWS)
    TensorStrides v_strides;
    TensorStrides o_strides;
    uint prefix_first;  // causal: 1 when Z_0 is not zero (a decode state's z, docs/DECODING.md), so block 0 reads it too
    // The cooperative kernel's FUSED_QUERY: q's strides, the score scale s, the sketch's node scale c,
    // the offsets (floats) in the packed sketch of G_a and G_b (transposed: SKETCH rows of HEAD_DIM)
    // and of the LayerNorms' scale and bias (QUERY_NORM). Its bindings 0 and 6 then hold q and the packed sketch: every pipeline shares one
    // layout of 8 storage buffers (vk/pipelines.hpp), and the rows they replace are not stored.
    TensorStrides q_strides;
    float scale;
    float node_scale;
    uint w_a;
    uint w_b;
    uint ln_scale, ln_bias, local_ln_scale, local_ln_bias;
PSK_PUSH_END

#endif
