// Kernel interface of decode_softmax.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_DECODE_SOFTMAX_H
#define PSK_INTERFACE_DECODE_SOFTMAX_H

#include "common.h"

// decode_softmax.comp: one softmax KV-cache decode step, workgroups over slices of every (sequence,
// key/value head)'s keys, combined by the slot's last workgroup.
#define PSK_DECODE_SOFTMAX_SPEC(X) \
    X(0, uint, WG, 64) /* invocations = keys per tile */ \
    X(1, uint, HEAD_DIM, 64) \
    X(2, uint, VALUE_DIM, 64) \
    X(3, uint, HEAD_RATIO, 1) /* query heads per key/value head (Hq / Hkv) */

// decode_softmax.comp
#define PSK_DECODE_SOFTMAX_BINDINGS(X) \
    X(0, WORKSPACE, read_write) /* key counts, counters, partials */ \
    X(1, Q_ROWS, read) /* the token's q rows, storage type */ \
    X(2, K_ROWS, read) \
    X(3, V_ROWS, read) \
    X(4, K_CACHE, read_write) /* float32; the token's row written by its slice's workgroup */ \
    X(5, V_CACHE, read_write) \
    X(6, OUT, write) /* the output rows, storage type */

PSK_PUSH_BEGIN(DecodeSoftmaxPush)
    uint q_heads;         // Hq
    uint kv_heads;        // Hkv
    uint batch;           // B: the workspace's counters follow its B key counts
    uint groups;          // workgroups per slot in this step (all of them count, empty slices too)
    uint slice;           // keys per workgroup
    float scale;          // s
    uint k_slot_stride;   // floats between two slots' key caches (capacity h, aligned)
    uint v_slot_stride;
    uint slot_base;       // the first slot of this dispatch (gl_WorkGroupID.y counts from it); its cache
                          // bindings start at slot cache_slot_base (slot_base, or 0 when the whole
    uint cache_slot_base; // cache is bound)
    uint work;            // word offset of the workspace in binding 0 (decode_softmax.comp)
    uint group_stride;    // partial sums per slot: the most groups of any step
    uint capacity;        // keys a slot's cache holds: a step that finds it full stores nothing
    uint dropped;         // word of binding 0 counting such steps' tokens (per sequence)
PSK_PUSH_END

#endif
