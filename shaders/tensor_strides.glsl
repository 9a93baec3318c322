// Element strides of a 4-D tensor [batch, head, token, feature] whose feature dimension is
// contiguous. Layout (BHND, BNHD, custom) is only ever expressed through these strides.
#ifndef PSK_TENSOR_STRIDES_GLSL
#define PSK_TENSOR_STRIDES_GLSL

struct TensorStrides {
    uint batch;
    uint head;
    uint token;
};

uint tensor_row(TensorStrides s, uint b, uint h, uint t) {
    return b * s.batch + h * s.head + t * s.token;
}

#endif
