// Kernel interface of sketch_features.comp and sketch_features_team.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_SKETCH_FEATURES_H
#define PSK_INTERFACE_SKETCH_FEATURES_H

#include "common.h"

// sketch_features.comp
#define PSK_SKETCH_FEATURES_SPEC(X) \
    X(0, uint, ROWS, 64) /* rows per workgroup = invocations, a multiple of 4 */ \
    X(1, uint, HEAD_DIM, 64) /* h */ \
    X(2, uint, SKETCH, 32) /* length of S(x): r, or h for degree 2 */ \
    X(3, uint, LEVELS, 1) /* random sketch: log2(p / 2) */ \
    X(4, uint, HIDDEN, 256) /* learned sketch: 8r */ \
    X(5, uint, W_CHUNK, 32) /* p = 4 random sketch: weight input columns staged per step */ \
    X(6, uint, LEARNED_TILE, 0) /* learned sketch: hidden units per staged chunk of the tiled products (a multiple of 4; 0: one row per invocation) */ \
    X(7, uint, ABLATE, 0) /* timing only (PSK_ABLATE; the rows are wrong): 1 no sketch products (the p = 4 random sketch: S = 0), 2 no row loads (zeros staged), 4 no local rows written */ \
    X(8, uint, STAGE_ROLLED, 0) /* 1: the staging's whole batches a loop not unrolled, one batch of loads held at a time (staging.glsl; generic.stage_rolled) */

// sketch_features_team.comp
#define PSK_SKETCH_FEATURES_TEAM_SPEC(X) \
    X(0, uint, HEAD_DIM, 64) /* h, a multiple of 4 */ \
    X(1, uint, SKETCH, 32) /* r, a multiple of 4 */ \
    X(2, uint, CPL4, 1) /* vec4 sketch columns per lane: ceil(r / 32) */ \
    X(3, uint, X_LOAD, 0) /* How rows are read: 0 element by element, 1 as vec4s (float32, every stride a multiple of 4), 2 as 8 floats per u64vec4 load (float32, strides and h multiples of 8). A specialization constant, not a run-time branch, because a CPU driver runs both sides of a branch under a lane mask. */

// Bits of SketchFeaturesPush.flags.
const uint FLAG_QK_LN = 1u;        // LayerNorm the row before sketching
const uint FLAG_WRITE_LOCAL = 2u;  // write local_out
const uint FLAG_LOCAL_LN = 4u;     // local_out uses its own LayerNorm

// sketch_features*.comp (the team and cooperative variants leave NODES out)
#define PSK_SKETCH_FEATURES_BINDINGS(X) \
    X(0, X_ROWS, read) /* q or k rows, storage type */ \
    X(1, WEIGHTS, read) /* the packed sketch */ \
    X(2, SKETCH_OUT, write) /* S(x) rows, float32 */ \
    X(3, LOCAL_OUT, write) /* local exact rows (FLAG_WRITE_LOCAL) */ \
    X(4, NODES, read_write) /* degree 8: level-1 nodes */

PSK_PUSH_BEGIN(SketchFeaturesPush)
    uint n;           // tokens per sequence
    uint heads;       // heads of this tensor
    float scale;      // score scale s (1 for k)
    uint flags;
    TensorStrides x_strides;
    float node_scale;  // random sketch: factor per tree node
    uint ln_scale, ln_bias, local_ln_scale, local_ln_bias;  // offsets (floats) into the weights
    // Random: G1_0a, G1_0b, G1_1a, G1_1b, G2_0a, G2_0b (transposed, SKETCH x in).
    // Learned: per FF (b, l) at 4 (2b + l): LN scale, LN bias, D1^T (HIDDEN x in), D2 (HIDDEN x SKETCH).
    uint w[16];
PSK_PUSH_END

#endif
