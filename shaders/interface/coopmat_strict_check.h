// Kernel interface of coopmat_strict_check.comp (see common.h): its specialization constants and
// push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_COOPMAT_STRICT_CHECK_H
#define PSK_INTERFACE_COOPMAT_STRICT_CHECK_H

#include "common.h"

#define PSK_COOPMAT_STRICT_CHECK_SPEC(X) \
    X(0, uint, THREADS, 32) /* one subgroup */ \
    X(1, uint, CM_M, 16) \
    X(2, uint, CM_N, 16) \
    X(3, uint, CM_K, 16)

// What the kernel does wrong on purpose (mode).
#define PSK_STRICT_LEGAL 0u          // nothing: the product must be exact
#define PSK_STRICT_DIVERGENT 1u      // half the subgroup loads A
#define PSK_STRICT_NONUNIFORM 2u     // lane 0 loads A from another offset
#define PSK_STRICT_MISALIGNED 3u     // A at an offset of 4 elements (8 bytes)
#define PSK_STRICT_UNWRITTEN 4u      // B's last row is never written, then multiplied
#define PSK_STRICT_STRIDE 5u         // A with a stride of 20 elements (40 bytes)
// Not a violation: a legal product whose exact value float32 cannot hold, so that the result
// shows the emulated products' arithmetic (interface/emulated_products.h): every row of A is
// (4096, 1, 0, ...), column c of B is +-(4096, 1.5, 0, ...) (minus for odd c), C = +-(2^24 + 1.5):
// +-(2^24 + 2) rounded to nearest term by term, +-2^24 through a tensor core's truncation.
#define PSK_STRICT_ROUNDING 6u

PSK_PUSH_BEGIN(CoopMatStrictCheckPush)
    uint mode;
PSK_PUSH_END

#endif
