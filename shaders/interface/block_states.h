// Kernel interface of block_states.comp and block_states_team.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_BLOCK_STATES_H
#define PSK_INTERFACE_BLOCK_STATES_H

#include "common.h"

// block_states.comp
#define PSK_BLOCK_STATES_SPEC(X) \
    X(0, uint, THREADS, 128) /* FEAT_GROUPS * COL_GROUPS */ \
    X(1, uint, SKETCH, 32) /* length of S(k) */ \
    X(2, uint, VALUE_DIM, 64) /* dv */ \
    X(3, uint, FEAT_GROUPS, 32) \
    X(4, uint, FEATS_PER_THREAD, 4) /* a multiple of 4 */ \
    X(5, uint, COL_GROUPS, 4) \
    X(6, uint, COLS_PER_THREAD, 16) /* a multiple of 4 */ \
    X(7, uint, KEY_TILE, 16) \
    X(8, uint, Z_STRIDE, 68) /* floats per state row: VALUE_DIM + 1 rounded up to 4 */ \
    X(9, uint, ABLATE, 0) /* timing only (PSK_ABLATE; the states are wrong): 1 no accumulation, 2 no psi expansion (psi_f = the pair coefficient), 4 no key-tile loads (zeros staged) */ \
    X(10, uint, STAGE_ROLLED, 0) /* 1: the staging's whole batches a loop not unrolled, one batch of loads held at a time (staging.glsl; generic.stage_rolled) */

// block_states_team.comp
#define PSK_BLOCK_STATES_TEAM_SPEC(X) \
    X(0, uint, SKETCH, 32) /* length of S(k), a multiple of 4 */ \
    X(1, uint, VALUE_DIM, 64) /* dv, a multiple of 4, <= 128 */ \
    X(2, uint, Z_STRIDE, 72) /* floats per state row: VALUE_DIM + 1 rounded up to 4 or 8 */ \
    X(3, uint, C4, 2) /* vec4s of value columns per lane: ceil(VALUE_DIM / 32), 1..4 */

// block_states*.comp
#define PSK_BLOCK_STATES_BINDINGS(X) \
    X(0, K_SKETCH, read) /* S(k) rows, float32 */ \
    X(1, V, read) \
    X(2, PAIRS, read) /* the self-tensor pair table */ \
    X(3, STATES, write) /* H_l rows of Z_STRIDE floats */

PSK_PUSH_BEGIN(BlockStatesPush)
    uint n;
    uint block_size;
    uint blocks;         // t = ceil(n / block_size)
    uint features;       // F = SKETCH (SKETCH + 1) / 2
    uint kv_heads;
    uint feature_tiles;  // ceil(F / TILE_F)
    TensorStrides v_strides;
PSK_PUSH_END

#endif
