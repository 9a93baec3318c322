// Kernel interface of attention_flash_coopmat.comp (see common.h): its specialization constants,
// declared once for GLSL and for the host (kernel_interface.hpp). Push constants, bindings and the
// key-chunk state are the baselines' (attention_tiled.h): one dispatch per key chunk, recorded by
// the same code as the other baseline kernels.
#ifndef PSK_INTERFACE_ATTENTION_FLASH_COOPMAT_H
#define PSK_INTERFACE_ATTENTION_FLASH_COOPMAT_H

#include "common.h"

// attention_flash_coopmat.comp
#define PSK_ATTENTION_FLASH_COOPMAT_SPEC(X) \
    X(0, uint, THREADS, 64) /* SG_M * subgroup size */ \
    X(1, uint, HEAD_DIM, 64) /* h */ \
    X(2, uint, VALUE_DIM, 64) /* dv */ \
    X(3, uint, KEY_TILE, 64) /* keys per step, a multiple of CM_N and of CM_K */ \
    X(4, uint, DEGREE, 4) /* polynomial degree p: 2, 4 or 8 */ \
    X(5, bool, CAUSAL, false) \
    X(6, uint, CM_M, 16) \
    X(7, uint, CM_N, 16) \
    X(8, uint, CM_K, 16) \
    X(9, uint, SG_M, 4) /* subgroups, ROW_TILES * CM_M query rows each */ \
    X(10, uint, ROW_TILES, 1) /* CM_M-row tiles per subgroup: TILE_M = SG_M * ROW_TILES * CM_M rows per workgroup */

#include "attention_tiled.h"

// A bit of AttentionTiledPush.flags that only this kernel reads: the q, k and v rows start on
// 16-byte boundaries (every stride and binding offset a multiple of 8 elements, h and dv multiples
// of 8), so that they are read 8 elements per load.
const uint FLAG_ALIGNED_ROWS = 4u;

#endif
