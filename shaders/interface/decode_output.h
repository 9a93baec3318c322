// Kernel interface of decode_output.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_DECODE_OUTPUT_H
#define PSK_INTERFACE_DECODE_OUTPUT_H

#include "common.h"

// decode_output.comp
#define PSK_DECODE_OUTPUT_SPEC(X) \
    X(0, uint, WG, 64) \
    X(1, uint, SKETCH, 32) \
    X(2, uint, HEAD_DIM, 64) \
    X(3, uint, VALUE_DIM, 64) \
    X(4, uint, DEGREE, 4) \
    X(5, bool, LOCAL_EXACT, false) \
    X(6, uint, BLOCK, 1) /* b in LOCAL_EXACT mode (shared weights), else 1 */

PSK_PUSH_BEGIN(DecodeOutputPush)
    uint features;
    uint q_heads;
    uint kv_heads;
    uint head_ratio;   // Hq / Hkv
    uint meta_offset;  // LOCAL_EXACT: rows of the unfinished block at meta[meta_offset + sequence]
PSK_PUSH_END

#endif
