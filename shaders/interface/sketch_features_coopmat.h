// Kernel interface of sketch_features_coopmat.comp (see common.h): its specialization constants
// and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_SKETCH_FEATURES_COOPMAT_H
#define PSK_INTERFACE_SKETCH_FEATURES_COOPMAT_H

#include "common.h"

// sketch_features_coopmat.comp
#define PSK_SKETCH_FEATURES_COOPMAT_SPEC(X) \
    X(0, uint, THREADS, 64) /* SG_M * SG_N * subgroup size */ \
    X(1, uint, HEAD_DIM, 64) /* h */ \
    X(2, uint, SKETCH, 32) /* r */ \
    X(3, uint, HIDDEN, 256) /* learned sketch: 8r hidden units per FF level */ \
    X(4, uint, CM_M, 16) \
    X(5, uint, CM_N, 16) \
    X(6, uint, CM_K, 16) \
    X(7, uint, SG_M, 1) /* subgroups along rows, CM_M each: TILE_M = SG_M * CM_M rows per workgroup */ \
    X(8, uint, SG_N, 4) /* subgroups along the N_CHUNK / CM_N column tiles of a product step */ \
    X(9, uint, N_CHUNK, 32) /* product columns per step (sketch columns, hidden units), a multiple of CM_N and CM_K */ \
    X(10, uint, K_CHUNK, 32) /* weight rows staged per step, a multiple of CM_K */ \
    X(11, uint, PRODUCT_TERMS, 3) /* hi/lo products per step: 3 (A_lo W_hi, A_hi W_lo, A_hi W_hi), or 1 (A_hi W_hi; diagnostic) */ \
    X(12, uint, DIAGNOSTIC, 0) /* random sketch: 0 S; 1 the staged A operand; 2 x through the products with identity weights; 3 x @ G1_0a; 4 x's float32 tile through accumulator loads and stores alone; 5 A's high parts through an operand load and store alone */

// The push constants are the generic kernel's: SketchFeaturesPush (sketch_features.h); the
// workgroup grid too, with TILE_M rows per workgroup.
#include "sketch_features.h"

#endif
