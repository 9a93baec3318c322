// Kernel interface of attention_combine.comp (see common.h): its specialization constants, push
// constants and bindings, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_ATTENTION_COMBINE_H
#define PSK_INTERFACE_ATTENTION_COMBINE_H

#include "common.h"

#define PSK_ATTENTION_COMBINE_SPEC(X) \
    X(0, uint, WG, 64) /* invocations per workgroup, one output element each */ \
    X(1, uint, VALUE_DIM, 64) /* dv */

#define PSK_ATTENTION_COMBINE_BINDINGS(X) \
    X(0, STATE, read) /* the splits' rows (m, l, O), attention_flash_fp32.comp's key-chunk state */ \
    X(1, OUT, write)

PSK_PUSH_BEGIN(AttentionCombinePush)
    uint rows;          // batch x query heads x n rows
    uint n;             // query rows per (batch, head)
    uint num_q_heads;
    uint splits;
    uint split_stride;  // floats between one split's rows and the next's
    uint groups_x;      // workgroups along x (the rest along y)
    TensorStrides o_strides;
PSK_PUSH_END

#endif
