#version 450
// Incremental decoding (docs/MATH.md section 7): the output row of one new token per (sequence, query
// head), from the decode state:
//
//   num = phi(q)^T z[slot] + local,      O = num[0:dv] / (1 + num[dv])
//
//   z:     sketched local: every consumed token including this one (decode_fold.comp ran first);
//          LOCAL_EXACT:    the completed blocks only.
//   local: LOCAL_EXACT only: sum over the rows of the unfinished block, this token's included,
//          of (q' . k'_j)^DEGREE [v_j | 1] (q', k' the local rows the feature map wrote).
//
// One workgroup of WG invocations per (query head, sequence); invocation lid owns the columns
// lid + m WG of [v | 1]. S(q) and q' sit in shared memory (no register array indexed at run time).
// Loops per invocation: F over z, ceil(rows / WG) h for the local weights, rows for the local sum:
// at most 8256 + 4096 + 1024 iterations (llvmpipe loop limit, docs/ARCHITECTURE.md).
// Layouts: S(q) rows [B Hq][SKETCH], q' rows [B Hq][HEAD_DIM], z [B Hkv][F][dv + 1],
// block rows [B Hkv][BLOCK][HEAD_DIM] and [B Hkv][BLOCK][VALUE_DIM], out [B Hq][VALUE_DIM].

#extension GL_EXT_control_flow_attributes : require

#include "self_tensor.glsl"

layout(local_size_x_id = 0) in;
#include "interface/decode_output.h"
PSK_DECLARE_SPECS(PSK_DECODE_OUTPUT_SPEC)

const uint Z_STRIDE = VALUE_DIM + 1u;
const uint COLS = (Z_STRIDE + WG - 1u) / WG;

layout(std430, binding = 0) readonly buffer QSketch { float q_sketch[]; };
layout(std430, binding = 1) readonly buffer QLocal { float q_local[]; };
layout(std430, binding = 2) readonly buffer State { float z[]; };
layout(std430, binding = 3) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = 4) readonly buffer BlockK { float block_k[]; };
layout(std430, binding = 5) readonly buffer BlockV { float block_v[]; };
layout(std430, binding = 6) readonly buffer Meta { uint meta[]; };
layout(std430, binding = 7) writeonly buffer Out { float o_data[]; };

shared float sq[SKETCH];
shared float ql[HEAD_DIM];
shared float weights[BLOCK];
shared float den_shared;

float weight_power(float x) {
    float w = x;  // x^DEGREE by repeated squaring (DEGREE is a power of two)
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint q_head = gl_WorkGroupID.x, seq = gl_WorkGroupID.y;
    const uint row = seq * params.q_heads + q_head;
    const uint slot = seq * params.kv_heads + q_head / params.head_ratio;

    for (uint d = lid; d < SKETCH; d += WG) sq[d] = q_sketch[row * SKETCH + d];
    if (LOCAL_EXACT)
        for (uint d = lid; d < HEAD_DIM; d += WG) ql[d] = q_local[row * HEAD_DIM + d];
    barrier();

    float acc[COLS];
    [[unroll]] for (uint m = 0u; m < COLS; ++m) acc[m] = 0.0;

    const uint z_base = slot * params.features * Z_STRIDE;
    [[dont_unroll]] for (uint f = 0u; f < params.features; ++f) {
        const uint entry = pairs[f];
        const float p = pair_coefficient(entry) * sq[pair_first(entry)] * sq[pair_second(entry)];
        [[unroll]] for (uint m = 0u; m < COLS; ++m) {
            const uint c = lid + m * WG;
            if (c < Z_STRIDE) acc[m] += p * z[z_base + f * Z_STRIDE + c];
        }
    }

    if (LOCAL_EXACT) {
        const uint rows = meta[params.meta_offset + seq];
        const uint k_base = slot * BLOCK * HEAD_DIM, v_base = slot * BLOCK * VALUE_DIM;
        for (uint j = lid; j < rows; j += WG) {
            float s = 0.0;
            [[dont_unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) s += ql[d] * block_k[k_base + j * HEAD_DIM + d];
            weights[j] = weight_power(s);
        }
        barrier();
        [[dont_unroll]] for (uint j = 0u; j < rows; ++j) {
            const float w = weights[j];
            [[unroll]] for (uint m = 0u; m < COLS; ++m) {
                const uint c = lid + m * WG;
                if (c < VALUE_DIM) acc[m] += w * block_v[v_base + j * VALUE_DIM + c];
                else if (c == VALUE_DIM) acc[m] += w;
            }
        }
    }

    [[unroll]] for (uint m = 0u; m < COLS; ++m)
        if (lid + m * WG == VALUE_DIM) den_shared = acc[m];
    barrier();
    const float inv = 1.0 / (1.0 + den_shared);
    [[unroll]] for (uint m = 0u; m < COLS; ++m) {
        const uint c = lid + m * WG;
        if (c < VALUE_DIM) o_data[row * VALUE_DIM + c] = acc[m] * inv;
    }
}
