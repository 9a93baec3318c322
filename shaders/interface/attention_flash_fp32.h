// Kernel interface of attention_flash_fp32.comp (see common.h): its specialization constants,
// declared once for GLSL and for the host (kernel_interface.hpp). Push constants, bindings and the
// key-chunk dispatches are the baselines' (attention_tiled.h): one dispatch per key chunk, recorded
// by the same code as the other baseline kernels.
#ifndef PSK_INTERFACE_ATTENTION_FLASH_FP32_H
#define PSK_INTERFACE_ATTENTION_FLASH_FP32_H

#include "common.h"

// attention_flash_fp32.comp
#define PSK_ATTENTION_FLASH_FP32_SPEC(X) \
    X(0, uint, THREADS, 128) /* (ROWS / ROWS_PER_INVOCATION) * KEY_GROUPS invocations */ \
    X(1, uint, ROWS, 64) /* query rows per workgroup, a multiple of ROWS_PER_INVOCATION */ \
    X(2, uint, HEAD_DIM, 64) /* h */ \
    X(3, uint, VALUE_DIM, 64) /* dv */ \
    X(4, uint, KEY_TILE, 32) /* keys per step, a multiple of KEY_GROUPS */ \
    X(5, uint, KEY_GROUPS, 8) /* invocations sharing a row group: KEY_TILE / KEY_GROUPS keys each */ \
    X(6, uint, DEGREE, 4) /* polynomial degree p: 2, 4 or 8 */ \
    X(7, bool, CAUSAL, false) \
    X(8, uint, ROWS_PER_INVOCATION, 4) /* 4 or 8: the register tile's rows */

#include "attention_tiled.h"

#endif
