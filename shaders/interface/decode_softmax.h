// Kernel interface of decode_softmax.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_DECODE_SOFTMAX_H
#define PSK_INTERFACE_DECODE_SOFTMAX_H

#include "common.h"

// decode_softmax.comp
#define PSK_DECODE_SOFTMAX_SPEC(X) \
    X(0, uint, WG, 64) /* a power of two */ \
    X(1, uint, HEAD_DIM, 64) \
    X(2, uint, VALUE_DIM, 64) \
    X(3, uint, CHUNK, 1024)

PSK_PUSH_BEGIN(DecodeSoftmaxPush)
    uint q_heads;
    uint kv_heads;
    uint head_ratio;
    uint capacity;
    uint chunks;  // partials per row (stride)
    uint meta_offset;
    float scale;
    uint k_slot_stride;  // floats between two slots' key caches (capacity h, aligned)
    uint v_slot_stride;
    // PASS_PARTIAL: this dispatch covers sequences seq_base + gl_WorkGroupID.z and query heads
    // q_head_base + gl_WorkGroupID.y; its cache bindings start at slot slot_base (0 when the whole
    // cache is bound; the one bound slot when the step dispatches slot by slot).
    uint seq_base;
    uint q_head_base;
    uint slot_base;
PSK_PUSH_END

#endif
