// Addressing by element strides (the TensorStrides struct is part of the kernel interface).
#ifndef PSK_TENSOR_STRIDES_GLSL
#define PSK_TENSOR_STRIDES_GLSL

#include "interface/common.h"

uint tensor_row(TensorStrides s, uint b, uint h, uint t) {
    return b * s.batch + h * s.head + t * s.token;
}

#endif
