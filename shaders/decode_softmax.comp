#version 450
// Softmax KV-cache decode step (the baseline of incremental decoding), split over the keys so that
// no invocation walks the whole cache (llvmpipe ends every loop of an invocation after 65535
// iterations in total; docs/ARCHITECTURE.md):
//
// PASS_PARTIAL: workgroup (chunk, query head, sequence) takes keys [chunk CHUNK, +CHUNK) of the
//   sequence's len keys and writes (m, l, acc[dv]): m = max_j s_j, l = sum_j e^(s_j - m),
//   acc = sum_j e^(s_j - m) v_j, s_j = scale q . k_j. Per invocation: CHUNK / WG dot products of h,
//   then CHUNK keys for its value columns.
// PASS_COMBINE: workgroup (query head, sequence) merges its ceil(len / CHUNK) partials:
//   M = max m_c, O = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c.
// Layouts: q [B Hq][h], caches [B Hkv][capacity][h | dv] (slot strides k_slot_stride,
// v_slot_stride), partials [B Hq][chunks][dv + 2],
// out [B Hq][dv]; meta[meta_offset + sequence] = len (keys including this step's).

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
#include "interface/decode_softmax.h"
PSK_DECLARE_SPECS(PSK_DECODE_SOFTMAX_SPEC)

const uint COLS = (VALUE_DIM + WG - 1u) / WG;
const uint P_STRIDE = VALUE_DIM + 2u;

#if defined(PASS_PARTIAL)
layout(std430, binding = 0) readonly buffer Q { float q_data[]; };
layout(std430, binding = 1) readonly buffer KCache { float k_cache[]; };
layout(std430, binding = 2) readonly buffer VCache { float v_cache[]; };
layout(std430, binding = 3) readonly buffer Meta { uint meta[]; };
layout(std430, binding = 4) writeonly buffer Partials { float partials[]; };

shared float qs[HEAD_DIM];
shared float scores[CHUNK];
shared float red[WG];

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint chunk = gl_WorkGroupID.x, q_head = params.q_head_base + gl_WorkGroupID.y, seq = params.seq_base + gl_WorkGroupID.z;
    const uint len = meta[params.meta_offset + seq];
    const uint start = chunk * CHUNK;
    if (start >= len) return;  // the whole workgroup leaves: no barrier is skipped by only some
    const uint count = min(CHUNK, len - start);
    const uint row = seq * params.q_heads + q_head;
    const uint slot = seq * params.kv_heads + q_head / params.head_ratio - params.slot_base;

    for (uint d = lid; d < HEAD_DIM; d += WG) qs[d] = q_data[row * HEAD_DIM + d] * params.scale;
    barrier();

    const uint k_base = slot * params.k_slot_stride + start * HEAD_DIM;
    float m_local = -3.0e38;
    for (uint j = lid; j < count; j += WG) {
        float s = 0.0;
        [[dont_unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) s += qs[d] * k_cache[k_base + j * HEAD_DIM + d];
        scores[j] = s;
        m_local = max(m_local, s);
    }
    red[lid] = m_local;
    barrier();
    for (uint st = WG / 2u; st > 0u; st >>= 1u) {
        if (lid < st) red[lid] = max(red[lid], red[lid + st]);
        barrier();
    }
    const float m = red[0];
    barrier();
    float l_local = 0.0;
    for (uint j = lid; j < count; j += WG) {
        const float p = exp(scores[j] - m);
        scores[j] = p;
        l_local += p;
    }
    red[lid] = l_local;
    barrier();
    for (uint st = WG / 2u; st > 0u; st >>= 1u) {
        if (lid < st) red[lid] += red[lid + st];
        barrier();
    }

    float acc[COLS];
    [[unroll]] for (uint c = 0u; c < COLS; ++c) acc[c] = 0.0;
    const uint v_base = slot * params.v_slot_stride + start * VALUE_DIM;
    [[dont_unroll]] for (uint j = 0u; j < count; ++j) {
        const float p = scores[j];
        [[unroll]] for (uint c = 0u; c < COLS; ++c) {
            const uint col = lid + c * WG;
            if (col < VALUE_DIM) acc[c] += p * v_cache[v_base + j * VALUE_DIM + col];
        }
    }
    const uint p_base = (row * params.chunks + chunk) * P_STRIDE;
    if (lid == 0u) {
        partials[p_base] = m;
        partials[p_base + 1u] = red[0];
    }
    [[unroll]] for (uint c = 0u; c < COLS; ++c) {
        const uint col = lid + c * WG;
        if (col < VALUE_DIM) partials[p_base + 2u + col] = acc[c];
    }
}

#elif defined(PASS_COMBINE)
layout(std430, binding = 0) readonly buffer Partials { float partials[]; };
layout(std430, binding = 1) readonly buffer Meta { uint meta[]; };
layout(std430, binding = 2) writeonly buffer Out { float o_data[]; };

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint q_head = gl_WorkGroupID.x, seq = gl_WorkGroupID.y;
    const uint row = seq * params.q_heads + q_head;
    const uint len = meta[params.meta_offset + seq];
    const uint chunks = (len + CHUNK - 1u) / CHUNK;
    const uint p_row = row * params.chunks * P_STRIDE;
    float big = -3.0e38;
    for (uint c = 0u; c < chunks; ++c) big = max(big, partials[p_row + c * P_STRIDE]);
    float l = 0.0;
    float acc[COLS];
    [[unroll]] for (uint k = 0u; k < COLS; ++k) acc[k] = 0.0;
    for (uint c = 0u; c < chunks; ++c) {
        const uint base = p_row + c * P_STRIDE;
        const float e = exp(partials[base] - big);
        l += e * partials[base + 1u];
        [[unroll]] for (uint k = 0u; k < COLS; ++k) {
            const uint col = lid + k * WG;
            if (col < VALUE_DIM) acc[k] += e * partials[base + 2u + col];
        }
    }
    const float inv = 1.0 / l;
    [[unroll]] for (uint k = 0u; k < COLS; ++k) {
        const uint col = lid + k * WG;
        if (col < VALUE_DIM) o_data[row * VALUE_DIM + col] = acc[k] * inv;
    }
}
#else
#error "define PASS_PARTIAL or PASS_COMBINE"
#endif
