// Kernel interface of decode_fold.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_DECODE_FOLD_H
#define PSK_INTERFACE_DECODE_FOLD_H

#include "common.h"

// decode_fold.comp
#define PSK_DECODE_FOLD_SPEC(X) \
    X(0, uint, WG, 64) \
    X(1, uint, SKETCH, 32) /* R */ \
    X(2, uint, VALUE_DIM, 64) /* dv */

PSK_PUSH_BEGIN(DecodeFoldPush)
    uint features;        // F
    uint kv_heads;        // Hkv (sequence of a slot = slot / kv_heads)
    uint dst_slot0;
    uint rows;            // rows to fold, unless rows_from_meta
    uint rows_from_meta;  // 1: rows = meta[meta_offset + sequence]
    uint meta_offset;
    uint s_slot_stride;
    uint s_row_begin;
    uint v_slot_stride;
    uint v_row_begin;
    uint add;             // 1: z[dst] += the state at binding 0 (same layout as z), no rows
    uint add_src0;        // add: binding 0's slot of the first workgroup (slot add_src0 + gl_WorkGroupID.z)
PSK_PUSH_END

#endif
