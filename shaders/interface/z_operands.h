// Kernel interface of z_operands.comp (see common.h): its specialization constants, push
// constants and bindings, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_Z_OPERANDS_H
#define PSK_INTERFACE_Z_OPERANDS_H

#include "common.h"

// z_operands.comp
#define PSK_Z_OPERANDS_SPEC(X) \
    X(0, uint, THREADS, 128) /* invocations per workgroup (one chunk of one block) */ \
    X(1, uint, VALUE_DIM, 64) /* dv: Z's value columns; column dv is the normalizer */ \
    X(2, uint, Z_STRIDE, 68) /* floats per state row (PolysketchPlan::stateStride) */ \
    X(3, uint, FEAT_CHUNK, 64) /* features per record: the cooperative output's FEAT_CHUNK */ \
    X(4, uint, NC, 80) /* operand columns per row: the output's NT x CM_N (a multiple of 8), zero past column dv */ \
    X(5, uint, WALK, 0) /* 1: the input is the block states H_l (no prefix); a workgroup walks a chunk's blocks and packs each Z_l */

// z_operands.comp
#define PSK_Z_OPERANDS_BINDINGS(X) \
    X(0, STATES, read) /* the block states after the prefix (Z_l) or the reduction (Z in block 0); WALK: before it (H_l) */ \
    X(1, OPERANDS, write) /* the records, [sequence][block][chunk] (see z_operands.comp) */

PSK_PUSH_BEGIN(ZOperandsPush)
    uint features;      // F
    uint state_blocks;  // blocks of the states buffer per sequence (t)
    uint blocks;        // blocks packed per sequence, from block 0 (t causal, 1 full: the sum in block 0; WALK: t)
PSK_PUSH_END

#endif
