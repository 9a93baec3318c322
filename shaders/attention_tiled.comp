#version 450
// Quadratic-cost attention, flash-style: one workgroup owns ROWS consecutive query rows of one
// (batch, query head); it walks the keys in tiles of KEY_TILE rows staged in shared memory, and
// never materializes an n x n matrix.
//
//   KIND_SOFTMAX:    O_i = sum_j softmax_j(q_i.k_j) v_j         (online softmax, one rescale per tile)
//   KIND_POLYNOMIAL: O_i = sum_j (q_i.k_j)^p v_j / (1 + sum_j (q_i.k_j)^p)
//
// q is pre-multiplied by the score scale. Each invocation owns one query row: its q and its
// float32 accumulator live in registers, and every invocation of the workgroup reads the same
// staged key/value row at a time (a broadcast from shared memory).
//
// Key chunks. One dispatch covers keys [key_begin, key_limit). Long sequences take several
// dispatches whose running (max, denominator, accumulator) per row is carried in `state_data`:
// the host records them back to back. This bounds the loop iterations of one invocation, which
// matters on llvmpipe (lavapipe): gallivm silently ends every loop of an invocation once their
// iterations add up to 65535 (LP_MAX_TGSI_LOOP_ITERATIONS, shared by all loops of a shader).
// For the same reason every loop with a trip count known at pipeline creation is unrolled.

#extension GL_EXT_control_flow_attributes : require

#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x_id = 0) in;
#include "interface/attention_tiled.h"
PSK_DECLARE_SPECS(PSK_ATTENTION_TILED_SPEC)
PSK_DECLARE_BINDINGS(PSK_ATTENTION_TILED_BINDINGS)

layout(std430, binding = BINDING_Q) readonly buffer QBuffer { ELEM q_data[]; };
layout(std430, binding = BINDING_K) readonly buffer KBuffer { ELEM k_data[]; };
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer OBuffer { ELEM o_data[]; };
// Per row: [running max, denominator, accumulator[VALUE_DIM]], rows in [batch][q head][token] order.
layout(std430, binding = BINDING_STATE) buffer StateBuffer { float state_data[]; };

shared float k_tile[KEY_TILE * HEAD_DIM];
shared float v_tile[KEY_TILE * VALUE_DIM];

float weight_power(float x) {
    // x^p by repeated squaring (p is a power of two).
    float w = x;
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

void main() {
    const uint row = gl_WorkGroupID.x * ROWS + gl_LocalInvocationID.x;
    const uint q_head = gl_WorkGroupID.y;
    const uint batch = gl_WorkGroupID.z;
    const uint kv_head = q_head / params.head_ratio;
    const bool row_valid = row < params.n;
    const uint state_base = ((batch * params.num_q_heads + q_head) * params.n + min(row, params.n - 1u)) * (VALUE_DIM + 2u);

    float q[HEAD_DIM];
    const uint q_base = tensor_row(params.q_strides, batch, q_head, min(row, params.n - 1u));
    [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) q[d] = LOAD_ELEM(q_data[q_base + d]) * params.scale;

    float acc[VALUE_DIM];
    float running_max = -1.0 / 0.0;  // softmax only
    float denominator = 0.0;
    if ((params.flags & FLAG_LOAD_STATE) != 0u) {
        running_max = state_data[state_base];
        denominator = state_data[state_base + 1u];
        [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) acc[d] = state_data[state_base + 2u + d];
    } else {
        [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) acc[d] = 0.0;
    }

    // Keys past the workgroup's last row never matter under the causal mask.
    const uint last_row = min(params.n, gl_WorkGroupID.x * ROWS + ROWS);
    const uint key_end = min(params.key_limit, CAUSAL ? last_row : params.n);
    const uint k_base = tensor_row(params.k_strides, batch, kv_head, 0u);
    const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);
    const uint lid = gl_LocalInvocationID.x;

    for (uint tile_start = params.key_begin; tile_start < key_end; tile_start += KEY_TILE) {
        const uint tile_len = min(KEY_TILE, key_end - tile_start);
        barrier();  // the previous tile is no longer being read
        [[unroll]] for (uint it = 0u; it < (KEY_TILE * HEAD_DIM + ROWS - 1u) / ROWS; ++it) {
            const uint i = it * ROWS + lid;
            if (i < tile_len * HEAD_DIM) {
                const uint j = i / HEAD_DIM, d = i % HEAD_DIM;
                k_tile[i] = LOAD_ELEM(k_data[k_base + (tile_start + j) * params.k_strides.token + d]);
            }
        }
        [[unroll]] for (uint it = 0u; it < (KEY_TILE * VALUE_DIM + ROWS - 1u) / ROWS; ++it) {
            const uint i = it * ROWS + lid;
            if (i < tile_len * VALUE_DIM) {
                const uint j = i / VALUE_DIM, d = i % VALUE_DIM;
                v_tile[i] = LOAD_ELEM(v_data[v_base + (tile_start + j) * params.v_strides.token + d]);
            }
        }
        barrier();

        // Keys this row may see inside the tile: all of them, or up to the row itself.
        uint visible = tile_len;
        if (CAUSAL) visible = row >= tile_start ? min(tile_len, row - tile_start + 1u) : 0u;

#if defined(KIND_SOFTMAX)
        float scores[KEY_TILE];
        float tile_max = running_max;
        for (uint j = 0u; j < visible; ++j) {
            float s = 0.0;
            [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) s += q[d] * k_tile[j * HEAD_DIM + d];
            scores[j] = s;
            tile_max = max(tile_max, s);
        }
        if (visible > 0u) {
            // One rescale of the accumulator per tile, not per key.
            const float correction = exp(running_max - tile_max);
            denominator *= correction;
            [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) acc[d] *= correction;
            running_max = tile_max;
            for (uint j = 0u; j < visible; ++j) {
                const float w = exp(scores[j] - running_max);
                denominator += w;
                [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) acc[d] += w * v_tile[j * VALUE_DIM + d];
            }
        }
#elif defined(KIND_POLYNOMIAL)
        for (uint j = 0u; j < visible; ++j) {
            float s = 0.0;
            [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) s += q[d] * k_tile[j * HEAD_DIM + d];
            const float w = weight_power(s);
            denominator += w;
            [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) acc[d] += w * v_tile[j * VALUE_DIM + d];
        }
#else
#error "define KIND_SOFTMAX or KIND_POLYNOMIAL"
#endif
    }

    if (!row_valid) return;
    if ((params.flags & FLAG_STORE_STATE) != 0u) {
        state_data[state_base] = running_max;
        state_data[state_base + 1u] = denominator;
        [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) state_data[state_base + 2u + d] = acc[d];
        return;
    }
#if defined(KIND_SOFTMAX)
    const float inv = 1.0 / denominator;
#else
    const float inv = 1.0 / (1.0 + denominator);  // the "1 +" keeps an all-zero row finite
#endif
    const uint o_base = tensor_row(params.o_strides, batch, q_head, row);
    [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) o_data[o_base + d] = STORE_ELEM(acc[d] * inv);
}
