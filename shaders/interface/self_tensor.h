// Kernel interface of self_tensor.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_SELF_TENSOR_H
#define PSK_INTERFACE_SELF_TENSOR_H

#include "common.h"

// self_tensor.comp
#define PSK_SELF_TENSOR_BINDINGS(X) \
    X(0, SKETCHES, read) /* rows x sketch */ \
    X(1, PAIRS, read) /* features */ \
    X(2, FEATURES, write) /* rows x features */

PSK_PUSH_BEGIN(SelfTensorPush)
    uint rows;
    uint sketch;    // length of one sketch row
    uint features;  // sketch (sketch + 1) / 2
    uint rows_y;    // rows per z slice: rows spread over y and z
PSK_PUSH_END

#endif
