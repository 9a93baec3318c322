// Kernel interface of attention_tiled.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_ATTENTION_TILED_H
#define PSK_INTERFACE_ATTENTION_TILED_H

#include "common.h"

// attention_tiled.comp
#define PSK_ATTENTION_TILED_SPEC(X) \
    X(0, uint, ROWS, 64) /* query rows per workgroup = invocations */ \
    X(1, uint, HEAD_DIM, 64) /* h */ \
    X(2, uint, VALUE_DIM, 64) /* dv */ \
    X(3, uint, KEY_TILE, 32) /* key rows staged per step */ \
    X(4, uint, DEGREE, 4) /* polynomial degree p: 2, 4 or 8 */ \
    X(5, bool, CAUSAL, false)

// Bits of AttentionTiledPush.flags.
const uint FLAG_LOAD_STATE = 1u;   // continue from the state a previous chunk stored
const uint FLAG_STORE_STATE = 2u;  // store the state for a later chunk instead of the output

// attention_tiled.comp and attention_tiled_coopmat.comp
#define PSK_ATTENTION_TILED_BINDINGS(X) \
    X(0, Q, read) \
    X(1, K, read) \
    X(2, V, read) \
    X(3, OUT, write) /* written by the last key chunk */ \
    X(4, STATE, read_write) /* per row (m, l, o) between key chunks */

PSK_PUSH_BEGIN(AttentionTiledPush)
    uint n;           // tokens per sequence
    uint head_ratio;  // Hq / Hkv (grouped-query attention)
    float scale;      // score scale s
    uint flags;
    uint key_begin;   // this chunk's keys: [key_begin, key_limit)
    uint key_limit;
    uint num_q_heads;
    uint q_pos;       // causal: query row i is key position q_pos + i (a forward continuing a KV cache; else 0)
    TensorStrides q_strides;
    TensorStrides k_strides;
    TensorStrides v_strides;
    TensorStrides o_strides;
    // Split keys (attention_flash_fp32.comp only; zero elsewhere): `splits` workgroup slices along
    // z (z = batch * splits + split), split s owning keys [s split_keys, (s + 1) split_keys), its
    // key_begin / key_limit relative to that start, its state rows split_stride floats after split
    // s - 1's (FLAG_STORE_STATE: attention_combine.comp merges them).
    uint splits;
    uint split_keys;
    uint split_stride;
    // The batch entry and query head of workgroup (0, 0, 0) (attention_flash_fp32.comp only): a
    // dispatch of one (sequence, kv head) whose K and V bindings are that slot alone.
    uint batch_base;
    uint q_head_base;
PSK_PUSH_END

#endif
