// Kernel interface of decode_output.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_DECODE_OUTPUT_H
#define PSK_INTERFACE_DECODE_OUTPUT_H

#include "common.h"

// decode_output.comp: one polysketch decode step (the token's sketch, the token joins the state,
// its output row), workgroups over feature slices and block-row slices of every (sequence,
// key/value head).
#define PSK_DECODE_OUTPUT_SPEC(X) \
    X(0, uint, WG, 64) \
    X(1, uint, SKETCH, 32) \
    X(2, uint, HEAD_DIM, 64) \
    X(3, uint, VALUE_DIM, 64) \
    X(4, uint, DEGREE, 4) \
    X(5, bool, LOCAL_EXACT, false) \
    X(6, uint, BLOCK, 1) /* b in LOCAL_EXACT mode, else 1 */ \
    X(7, uint, HEAD_RATIO, 1) /* query heads per key/value head (Hq / Hkv) */ \
    X(8, uint, FEATURE_SLICE, 64) /* features per feature workgroup */ \
    X(9, uint, ROW_SLICE, 1) /* LOCAL_EXACT: block rows per row workgroup, else 1 */ \
    X(10, uint, LEVELS, 1) /* random sketch: log2(p / 2), the levels of the sketch tree the step evaluates */

// decode_output.comp
#define PSK_DECODE_OUTPUT_BINDINGS(X) \
    X(0, STEP_STATE, read_write) /* h and the block rows, the learned feature rows, the step's words */ \
    X(1, Q_ROWS, read) /* the token's q rows, storage type */ \
    X(2, K_ROWS, read) \
    X(3, V_ROWS, read) \
    X(4, WEIGHTS, read) /* the packed sketch */ \
    X(5, PAIRS, read) /* the pair table of psi */ \
    X(6, Z, read_write) /* the running state z */ \
    X(7, OUT, write) /* the output rows, storage type */

// Bits of DecodeOutputPush.flags (random sketch: the step normalizes the token's rows itself).
const uint DECODE_FLAG_QK_LN = 1u;     // LayerNorm q and k before sketching
const uint DECODE_FLAG_LOCAL_LN = 2u;  // LOCAL_EXACT: q', k' use their own LayerNorm

PSK_PUSH_BEGIN(DecodeOutputPush)
    uint features;        // F
    uint q_heads;         // Hq
    uint kv_heads;        // Hkv
    uint batch;           // B: the workspace's counters follow its B row counts
    uint feature_groups;  // workgroups per slot over the features: ceil(F / FEATURE_SLICE)
    uint row_groups;      // LOCAL_EXACT: workgroups per slot over the block rows: ceil(BLOCK / ROW_SLICE); else 0
    uint work;            // word offsets into binding 0 (the step state): the step's words (decode_output.comp),
    uint block_sum;       //   LOCAL_EXACT: h [B Hkv][F][dv + 1],
    uint block_k;         //   the unfinished block's k' rows [B Hkv][BLOCK][HEAD_DIM],
    uint block_v;         //   and its v rows [B Hkv][BLOCK][VALUE_DIM]
    uint q_sketch;        // learned sketch: the feature map's rows in binding 0: S(q) [B Hq][SKETCH],
    uint k_sketch;        //   S(k) [B Hkv][SKETCH],
    uint q_local;         //   LOCAL_EXACT: q' [B Hq][HEAD_DIM],
    uint k_local;         //   and k' [B Hkv][HEAD_DIM]
    float scale;          // random sketch: the score scale s (q only)
    float node_scale;     //   the factor per sketch tree node
    uint flags;           //   DECODE_FLAG_*
    uint ln_scale, ln_bias, local_ln_scale, local_ln_bias;  // offsets (floats) into the packed sketch
    uint w[6];            //   G1_0a, G1_0b, G1_1a, G1_1b, G2_0a, G2_0b (transposed, SKETCH x in), as PackedSketch
    uint steps;           // word of binding 0 counting the executed steps (slot 0's last workgroup adds one)
PSK_PUSH_END

#endif
