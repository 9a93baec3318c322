// Kernel interface of block_states_coopmat.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_BLOCK_STATES_COOPMAT_H
#define PSK_INTERFACE_BLOCK_STATES_COOPMAT_H

#include "common.h"

// block_states_coopmat.comp
#define PSK_BLOCK_STATES_COOPMAT_SPEC(X) \
    X(0, uint, THREADS, 128) /* SG_M * SG_N * subgroup size */ \
    X(1, uint, SKETCH, 32) /* length of S(k) */ \
    X(2, uint, VALUE_DIM, 64) /* dv */ \
    X(3, uint, CM_M, 16) \
    X(4, uint, CM_N, 16) \
    X(5, uint, CM_K, 16) \
    X(6, uint, SG_M, 2) /* subgroups along features */ \
    X(7, uint, SG_N, 2) /* subgroups along value columns */ \
    X(8, uint, WM, 2) /* matrices per subgroup along features */ \
    X(9, uint, WN, 2) /* matrices per subgroup along value columns */ \
    X(10, uint, KEY_TILE, 32) /* keys per step, a multiple of CM_K and of 8 */ \
    X(11, uint, Z_STRIDE, 68) /* floats per state row: VALUE_DIM + 1 rounded up to 4 (zero padding) */ \
    X(12, uint, WALK, 0) /* 0: a workgroup per block writes H_l; 1: causal walk writing Z_l; 2: full walk writing the sum */ \
    X(13, uint, ABLATE, 0) /* timing only (PSK_ABLATE; the states are wrong): 1 no products, 2 no psi expansion, 4 no key-tile loads */ \
    X(14, uint, SPLIT_V, 0) /* 1: V as hi + lo too, three products per step (float32 storage); 0: V one operand (16-bit storage) */

// The push constants are the scalar kernel's: BlockStatesPush (block_states.h).
#include "block_states.h"

#endif
