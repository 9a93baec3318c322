#version 450
// The split-key softmax's merge (docs/MATH.md section 2): attention_flash_fp32.comp with split keys
// leaves, per split s and query row, the state (m_s, l_s, O_s) of the keys it walked: m_s its
// running maximum score (EMPTY = -3e38 when it saw no key), l_s = sum e^(s_j - m_s), O_s = sum
// e^(s_j - m_s) v_j. The row's output is
//
//   M = max_s m_s,   O = sum_s e^(m_s - M) O_s / sum_s e^(m_s - M) l_s
//
// (a split that saw no key weighs e^(EMPTY - M) = 0). One invocation per output element; the
// splits in order, so the sum is the same for every column of a row.
#extension GL_EXT_control_flow_attributes : require

#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x_id = 0) in;
#include "interface/attention_combine.h"
PSK_DECLARE_SPECS(PSK_ATTENTION_COMBINE_SPEC)
PSK_DECLARE_BINDINGS(PSK_ATTENTION_COMBINE_BINDINGS)

layout(std430, binding = BINDING_STATE) readonly buffer StateBuffer { float state_data[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer OBuffer { ELEM o_data[]; };

void main() {
    const uint id = (gl_WorkGroupID.y * params.groups_x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (id >= params.rows * VALUE_DIM) return;
    const uint row = id / VALUE_DIM, col = id % VALUE_DIM;
    const uint base = row * (VALUE_DIM + 2u);
    float m = -3.0e38;
    for (uint s = 0u; s < params.splits; ++s) m = max(m, state_data[s * params.split_stride + base]);
    float l = 0.0, o = 0.0;
    for (uint s = 0u; s < params.splits; ++s) {
        const uint at = s * params.split_stride + base;
        const float w = exp(state_data[at] - m);
        l += w * state_data[at + 1u];
        o += w * state_data[at + 2u + col];
    }
    const uint t = row % params.n, bh = row / params.n;
    const uint o_base = tensor_row(params.o_strides, bh / params.num_q_heads, bh % params.num_q_heads, t);
    o_data[o_base + col] = STORE_ELEM(o / l);
}
