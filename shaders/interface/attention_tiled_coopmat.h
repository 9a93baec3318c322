// Kernel interface of attention_tiled_coopmat.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_ATTENTION_TILED_COOPMAT_H
#define PSK_INTERFACE_ATTENTION_TILED_COOPMAT_H

#include "common.h"

// attention_tiled_coopmat.comp
#define PSK_ATTENTION_TILED_COOPMAT_SPEC(X) \
    X(0, uint, THREADS, 64) /* SG_M * SG_N * subgroup size */ \
    X(1, uint, HEAD_DIM, 64) /* h */ \
    X(2, uint, VALUE_DIM, 64) /* dv */ \
    X(3, uint, KEY_TILE, 32) /* keys per step, a multiple of CM_N and of CM_K */ \
    X(4, uint, DEGREE, 4) /* polynomial degree p: 2, 4 or 8 */ \
    X(5, bool, CAUSAL, false) \
    X(6, uint, CM_M, 16) \
    X(7, uint, CM_N, 16) \
    X(8, uint, CM_K, 16) \
    X(9, uint, SG_M, 1) /* subgroups along rows, CM_M each: TILE_M = SG_M * CM_M query rows per workgroup */ \
    X(10, uint, SG_N, 4) /* subgroups along the score tiles (KEY_TILE / CM_N) and value tiles (ceil(dv / CM_N)) */ \
    X(11, uint, WN, 1) /* value column tiles per subgroup: SG_N * WN >= ceil(dv / CM_N) */ \
    X(12, uint, WIDTH_CHUNK, 64) /* q/k columns per step of the scores, a multiple of CM_K */

// The push constants and the key-chunk state are the generic kernel's: AttentionTiledPush
// (attention_tiled.h), one dispatch per key chunk.
#include "attention_tiled.h"

#endif
