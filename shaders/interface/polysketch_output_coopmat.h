// Kernel interface of polysketch_output_coopmat.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_POLYSKETCH_OUTPUT_COOPMAT_H
#define PSK_INTERFACE_POLYSKETCH_OUTPUT_COOPMAT_H

#include "common.h"

// polysketch_output_coopmat.comp
#define PSK_POLYSKETCH_OUTPUT_COOPMAT_SPEC(X) \
    X(0, uint, THREADS, 64) /* SG_M * SG_N * subgroup size */ \
    X(1, uint, SKETCH, 32) /* length of S(q) */ \
    X(2, uint, HEAD_DIM, 64) /* h (local exact rows) */ \
    X(3, uint, VALUE_DIM, 64) /* dv */ \
    X(4, uint, DEGREE, 4) /* local exact weights (q.k)^DEGREE */ \
    X(5, bool, CAUSAL, true) \
    X(6, bool, LOCAL_EXACT, false) \
    X(7, uint, Z_STRIDE, 68) /* floats per state row: VALUE_DIM + 1 rounded up to 4 (zero padding) */ \
    X(8, uint, CM_M, 16) \
    X(9, uint, CM_N, 16) \
    X(10, uint, CM_K, 16) \
    X(11, uint, SG_M, 2) /* subgroups along rows, CM_M each: TILE_M = SG_M * CM_M query rows per workgroup */ \
    X(12, uint, SG_N, 2) /* subgroups along the NT = ceil((dv + 1) / CM_N) column tiles */ \
    X(13, uint, WN, 3) /* column tiles per subgroup: SG_N * WN >= NT */ \
    X(14, uint, FEAT_CHUNK, 32) /* features (Z rows) per step of phi(q)^T Z, a multiple of CM_K */ \
    X(15, uint, KEY_TILE, 32) /* local keys per step, a multiple of CM_K and of CM_N */ \
    X(16, uint, WIDTH_CHUNK, 64) /* local: q'/k' (or S) columns per step of the scores, a multiple of CM_K */ \
    X(17, uint, ABLATE, 0) /* timing only (PSK_ABLATE; the output is wrong): 1 no phi(q)^T Z part, 2 no local part, 4 no products, 8 no Z range pass, 16 no phi(q) expansion, 32 no Z staging (8 and 32: Z staged, Z_PACKED = 0), 64 no key-tile (K, V) staging */ \
    X(18, uint, SPLIT_LOCAL, 0) /* 1: the local part's Q, K, W and V as hi + lo, three products each (float32 storage); 0: one operand each */ \
    X(19, uint, FUSED_QUERY, 0) /* 0: S(q) (and q') are the feature map's rows; the kernel computes them from q itself (random sketch): 1 S(q) = x (degree 2), 2 S(q) = c (x G_a) * (x G_b) (degree 4), x = s LN(q) */ \
    X(20, uint, QUERY_NORM, 0) /* FUSED_QUERY's LayerNorms, bits: 1 LN before the sketch (x = s LN(q), and q' = x), 2 a separate local LayerNorm (q' = s LN_local(q)) */ \
    X(21, uint, STAGE_BATCH, 8) /* loads in flight per invocation in the staging rounds and range passes (staging.glsl): more hide more latency and hold more registers (output.stage_batch) */ \
    X(22, uint, Z_PACKED, 0) /* 1: binding STATES holds z_operands.comp's records of Z (scale, hi, lo per FEAT_CHUNK features), loaded as B fragments directly; 0: Z itself, scaled and staged per workgroup (output.z_packed) */

// The push constants and bindings are the generic kernel's: PolysketchOutputPush and
// PSK_POLYSKETCH_OUTPUT_BINDINGS (polysketch_output.h), with tiles_per_block = ceil(block_size /
// TILE_M); only this kernel reads the push constants after prefix_first, and with FUSED_QUERY its
// bindings Q_SKETCH and Q_LOCAL hold q and the packed sketch.
#include "polysketch_output.h"

#endif
