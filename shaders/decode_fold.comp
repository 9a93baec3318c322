#version 450
// Incremental decoding (docs/MATH.md section 7): folds rows into the running state z of a decode state,
//
//   z[slot][f][c] += sum_{j < rows} psi(S(k_j))_f [v_j | 1]_c,
//
// the block-state formula of block_states.comp (psi expanded on the fly from the pair table, same
// product order coef * S_a * S_b), into z or, in local-exact mode, into the running sum h of the
// unfinished block. Uses: a step's new token (rows = 1), the last block of a prefill. With `add`
// it instead adds a state of z's layout (h of a just completed block) into z, for the sequences
// whose `meta` count is non-zero.
//
// One invocation owns one feature f and four adjacent columns c0..c0+3 of [v | 1] of one slot and
// walks the rows: per row two scalar loads of S(k_j) (the pair's entries) and, when dv is a
// multiple of 4, one vec4 load of v_j (llvmpipe emits every load lane by lane, so four columns per
// invocation cut the loads per multiply-add by ~3x against one column per invocation: the block
// fold of a local-exact step at b = 256, r = 32, dv = 64, 4 heads took 117 ms with one column).
// At most b (<= 1024) loop iterations per invocation, far inside llvmpipe's loop budget
// (docs/ARCHITECTURE.md).
// Source rows: sketch rows at src_slot * s_slot_stride + (s_row_begin + j) * SKETCH, values at
// src_slot * v_slot_stride + (v_row_begin + j) * VALUE_DIM, src_slot = gl_WorkGroupID.z;
// destination slot dst_slot0 + src_slot.

#extension GL_EXT_control_flow_attributes : require

#include "self_tensor.glsl"

layout(local_size_x_id = 0) in;
#include "interface/decode_fold.h"
PSK_DECLARE_SPECS(PSK_DECODE_FOLD_SPEC)

layout(std430, binding = 0) readonly buffer Sketches { float sk[]; };
layout(std430, binding = 1) readonly buffer Values { float v_rows[]; };
layout(std430, binding = 1) readonly buffer Values4 { vec4 v_rows4[]; };  // the same rows, when dv % 4 == 0
layout(std430, binding = 2) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = 3) readonly buffer Meta { uint meta[]; };
layout(std430, binding = 4) buffer State { float z[]; };

const uint Z_STRIDE = VALUE_DIM + 1u;
const uint GROUPS = (Z_STRIDE + 3u) / 4u;  // column groups of four per feature
const bool VEC4 = (VALUE_DIM % 4u) == 0u;

void main() {
    const uint e = gl_WorkGroupID.x * WG + gl_LocalInvocationID.x;
    if (e >= params.features * GROUPS) return;  // no barriers in this kernel
    const uint src = gl_WorkGroupID.z;
    const uint dst = params.dst_slot0 + src;
    const uint rows = params.rows_from_meta != 0u ? meta[params.meta_offset + dst / params.kv_heads] : params.rows;
    if (rows == 0u) return;
    const uint f = e / GROUPS, c0 = (e % GROUPS) * 4u;
    const uint base = dst * params.features * Z_STRIDE + f * Z_STRIDE;
    if (params.add != 0u) {  // merge a block's running sum (binding 0) into z; the caller zeroes it
        const uint from = (params.add_src0 + src) * params.features * Z_STRIDE + f * Z_STRIDE;
        [[unroll]] for (uint m = 0u; m < 4u; ++m)
            if (c0 + m < Z_STRIDE) z[base + c0 + m] = z[base + c0 + m] + sk[from + c0 + m];
        return;
    }
    const uint entry = pairs[f];
    const float coef = pair_coefficient(entry);
    const uint a = pair_first(entry), b = pair_second(entry);
    const uint s_base = src * params.s_slot_stride + params.s_row_begin * SKETCH;
    const uint v_base = src * params.v_slot_stride + params.v_row_begin * VALUE_DIM;
    // Columns >= VALUE_DIM: the normalizer column (weight 1) at VALUE_DIM, nothing past it.
    const vec4 one = vec4(greaterThanEqual(uvec4(c0) + uvec4(0u, 1u, 2u, 3u), uvec4(VALUE_DIM)));
    vec4 acc = vec4(0.0);
    if (VEC4 && c0 < VALUE_DIM) {
        [[dont_unroll]] for (uint j = 0u; j < rows; ++j) {
            const float p = coef * sk[s_base + j * SKETCH + a] * sk[s_base + j * SKETCH + b];
            acc += p * v_rows4[(v_base + j * VALUE_DIM + c0) / 4u];
        }
    } else {
        [[dont_unroll]] for (uint j = 0u; j < rows; ++j) {
            const float p = coef * sk[s_base + j * SKETCH + a] * sk[s_base + j * SKETCH + b];
            vec4 x = one;
            [[unroll]] for (uint m = 0u; m < 4u; ++m)
                if (c0 + m < VALUE_DIM) x[m] = v_rows[v_base + j * VALUE_DIM + c0 + m];
            acc += p * x;
        }
    }
    [[unroll]] for (uint m = 0u; m < 4u; ++m)
        if (c0 + m < Z_STRIDE) z[base + c0 + m] = z[base + c0 + m] + acc[m];
}
