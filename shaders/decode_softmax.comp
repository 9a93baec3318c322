#version 450
// Softmax KV-cache decode step (the baseline of incremental decoding) in one dispatch, split over
// the keys as flash decoding splits them: per slot (sequence, key/value head), gl_WorkGroupID.y,
// `groups` workgroups each take a slice of `slice` keys of the sequence's len keys (this step's
// included) for all HEAD_RATIO query heads of the slot (the keys read once for them all):
//
//   s_j = scale q . k_j;  m = max_j s_j;  l = sum_j e^(s_j - m);  acc = sum_j e^(s_j - m) v_j
//
// online, tile by tile (WG keys: their scores in shared memory, the running m, l, acc rescaled by
// e^(m_old - m_new) per tile), and writes (m, l, acc[dv]) per query head to the workspace; the
// last of the slot's workgroups to finish (an atomic counter) merges them in group order,
// M = max m_g, O = sum_g e^(m_g - M) acc_g / sum_g e^(m_g - M) l_g, and writes the output rows.
// A workgroup whose slice starts past len writes the empty partial (m = -3e38, l = 0, acc = 0).
// The token's k, v rows: the workgroup whose slice holds row `len - 1` writes them into the cache
// and uses them from shared memory itself (no other workgroup reads that row), so a step copies
// nothing. The keys per sequence live on the device: the last slot of a sequence to finish
// advances its count (a second counter), so a step records no fill either.
//
// Binding 0, the workspace (words from `work`): [0, B) keys of each sequence before this step;
// [B, B + B Hkv) the slot counters; [B + B Hkv, 2 B + B Hkv) the sequence counters; then the
// partials [slot][group_stride][HEAD_RATIO][dv + 2] (float bits: m, l, acc). Counters are zero
// between steps. Memory order as decode_output.comp: partials, memoryBarrierBuffer, the counter;
// the last workgroup's memoryBarrierBuffer, then the partials.
// Layouts: q [B Hq][HEAD_DIM], k [B Hkv][HEAD_DIM], v [B Hkv][dv], out [B Hq][dv] in the storage
// type; caches [B Hkv][capacity][HEAD_DIM | dv] float32 (slot strides k_slot_stride, v_slot_stride).
// The maxima (a tile's, then the groups'): SUBGROUP_REDUCE, subgroupMax per subgroup and one barrier
// for the subgroups' values (where the device has subgroup arithmetic); else a tree in shared
// memory, log2 WG barriers. On llvmpipe a barrier is a coroutine switch and on a GPU a round
// trip through the workgroup: the tree was 6 of the 8 barriers of a tile.
// Loops per invocation: per tile of WG keys HEAD_DIM / K_CHUNK (scores), log2 WG (the max), WG / V_CHUNK
// (values), the slice at most 1024 / HEAD_RATIO keys (the host's cap); the combine's
// groups / CHUNK: inside llvmpipe's loop limit (docs/ARCHITECTURE.md).

#extension GL_EXT_control_flow_attributes : require
#if defined(SUBGROUP_REDUCE)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

#include "storage.glsl"

layout(local_size_x_id = 0) in;
#include "interface/decode_softmax.h"
PSK_DECLARE_SPECS(PSK_DECODE_SOFTMAX_SPEC)
PSK_DECLARE_BINDINGS(PSK_DECODE_SOFTMAX_BINDINGS)

const uint COLS = (VALUE_DIM + WG - 1u) / WG;  // value columns per invocation: lid + c WG
const uint P_STRIDE = VALUE_DIM + 2u;
// Key elements, value rows or partials whose loads are issued together: a GPU waits one latency
// per chunk instead of one per iteration of a loop that is not unrolled.
const uint CHUNK = 8u;
// Key row elements and value rows loaded together: a key row of HEAD_DIM floats in chunks of up to
// 32 (one latency for h <= 32, two for h = 64), and 16 value rows at a time.
const uint K_CHUNK = HEAD_DIM < 32u ? HEAD_DIM : 32u;
const uint V_CHUNK = 16u;
const float EMPTY = -3.0e38;  // the max of no scores: finite, so that e^(EMPTY - m) is 0, not NaN

layout(std430, binding = BINDING_WORKSPACE) coherent buffer Workspace { uint ws[]; };
layout(std430, binding = BINDING_Q_ROWS) readonly buffer QRows { ELEM q_data[]; };
layout(std430, binding = BINDING_K_ROWS) readonly buffer KRows { ELEM k_data[]; };
layout(std430, binding = BINDING_V_ROWS) readonly buffer VRows { ELEM v_data[]; };
layout(std430, binding = BINDING_K_CACHE) buffer KCache { float k_cache[]; };
layout(std430, binding = BINDING_V_CACHE) buffer VCache { float v_cache[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer Out { ELEM o_data[]; };

shared float qs[HEAD_RATIO * HEAD_DIM];  // scale q of the slot's query heads
shared float k_new[HEAD_DIM];
shared float v_new[VALUE_DIM];
shared float tile[HEAD_RATIO * WG];      // the tile's scores, then their exponentials
shared float reduce[HEAD_RATIO * WG];    // the tile's max per head (a tree), then the groups' max
shared bool last_shared;

// v[g] becomes the workgroup's largest v[g], for every query head g and in every invocation
// (through `reduce`; the caller puts a barrier before its next write of `reduce`).
void workgroup_max(inout float v[HEAD_RATIO]) {
#if defined(SUBGROUP_REDUCE)
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) {
        const float sub = subgroupMax(v[g]);
        if (subgroupElect()) reduce[g * WG + gl_SubgroupID] = sub;
    }
    barrier();
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) {
        v[g] = EMPTY;
        for (uint s = 0u; s < gl_NumSubgroups; ++s) v[g] = max(v[g], reduce[g * WG + s]);
    }
#else
    const uint lid = gl_LocalInvocationID.x;
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) reduce[g * WG + lid] = v[g];
    barrier();
    for (uint stride = WG / 2u; stride > 0u; stride >>= 1u) {  // a tree (WG is a power of two)
        if (lid < stride) [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) reduce[g * WG + lid] = max(reduce[g * WG + lid], reduce[g * WG + lid + stride]);
        barrier();
    }
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) v[g] = reduce[g * WG];
#endif
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint group = gl_WorkGroupID.x, slot = params.slot_base + gl_WorkGroupID.y;
    const uint seq = slot / params.kv_heads;
    const uint q_row0 = seq * params.q_heads + (slot % params.kv_heads) * HEAD_RATIO;
    const uint before = ws[params.work + seq];
    // A full cache (only a replayed step can find one: the host checks the others) takes no new
    // row: the step attends to the stored keys, and the token is counted as refused.
    const bool full = before >= params.capacity;
    const uint len = full ? before : before + 1u;
    const uint start = group * params.slice;
    const uint count = start < len ? min(params.slice, len - start) : 0u;
    const uint cache_slot = slot - params.cache_slot_base;
    const uint k_base = cache_slot * params.k_slot_stride, v_base = cache_slot * params.v_slot_stride;
    const bool owns_token = !full && before >= start && before < start + params.slice;

    for (uint i = lid; i < HEAD_RATIO * HEAD_DIM; i += WG) qs[i] = LOAD_ELEM(q_data[q_row0 * HEAD_DIM + i]) * params.scale;
    if (owns_token) {  // uniform in the workgroup
        for (uint d = lid; d < HEAD_DIM; d += WG) {
            const float x = LOAD_ELEM(k_data[slot * HEAD_DIM + d]);
            k_new[d] = x;
            k_cache[k_base + before * HEAD_DIM + d] = x;
        }
        for (uint c = lid; c < VALUE_DIM; c += WG) {
            const float x = LOAD_ELEM(v_data[slot * VALUE_DIM + c]);
            v_new[c] = x;
            v_cache[v_base + before * VALUE_DIM + c] = x;
        }
    }
    // The token's cache rows ordered before the loads below: they never use those rows (k_new and
    // v_new stand in), but with a cache of capacity 1 the stand-in row they load is row 0 itself.
    memoryBarrierBuffer();
    barrier();

    float m_run[HEAD_RATIO], l_run[HEAD_RATIO], acc[HEAD_RATIO * COLS];
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) {
        m_run[g] = EMPTY;
        l_run[g] = 0.0;
        [[unroll]] for (uint c = 0u; c < COLS; ++c) acc[g * COLS + c] = 0.0;
    }
    [[dont_unroll]] for (uint t0 = 0u; t0 < count; t0 += WG) {  // uniform: count is the workgroup's
        const uint n = min(WG, count - t0);
        // The scores of key t0 + lid for every query head. Without branches (shaders/staging.glsl:
        // a load under a condition, or in one arm of one, is waited for alone): every lane loads a
        // key row that exists and that this dispatch does not write (lanes past n: the tile's last
        // key; the token's own key: a stored row in its place, or row 1 of a cache the token
        // starts, stale and selected away for k_new) and selects afterwards; the scores of lanes
        // past n are stored and never read.
        {
            const uint j = start + t0 + min(lid, n - 1u);
            const uint jl = j != before ? j : before > 0u ? before - 1u : min(1u, params.capacity - 1u);
            float s[HEAD_RATIO];
            [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) s[g] = 0.0;
            [[dont_unroll]] for (uint d0 = 0u; d0 < HEAD_DIM; d0 += K_CHUNK) {
                float kc[K_CHUNK];
                [[unroll]] for (uint u = 0u; u < K_CHUNK; ++u) kc[u] = k_cache[k_base + jl * HEAD_DIM + min(d0 + u, HEAD_DIM - 1u)];
                [[unroll]] for (uint u = 0u; u < K_CHUNK; ++u) {
                    const uint d = min(d0 + u, HEAD_DIM - 1u);
                    const float kt = k_new[d];
                    const float k = j == before ? kt : kc[u];
                    if (d0 + u < HEAD_DIM) [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) s[g] += qs[g * HEAD_DIM + d] * k;
                }
            }
            [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) tile[g * WG + lid] = s[g];
        }
        // The tile's max per head: each invocation's own scores (it wrote them), then the workgroup's.
        float m_new[HEAD_RATIO];
        [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) m_new[g] = lid < n ? tile[g * WG + lid] : EMPTY;
        workgroup_max(m_new);
        [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) m_new[g] = max(m_run[g], m_new[g]);
        if (lid < n) [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) tile[g * WG + lid] = exp(tile[g * WG + lid] - m_new[g]);
        barrier();
        // Rescale the running sums, then add the tile's keys in order.
        [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) {
            const float r = exp(m_run[g] - m_new[g]);
            m_run[g] = m_new[g];
            l_run[g] *= r;
            [[unroll]] for (uint c = 0u; c < COLS; ++c) acc[g * COLS + c] *= r;
        }
        [[dont_unroll]] for (uint u0 = 0u; u0 < n; u0 += V_CHUNK) {
            // Branch-free as the scores: rows past n (not summed below) and the token's row (from
            // v_new) read a stored row in their place.
            float vc[V_CHUNK * COLS];
            [[unroll]] for (uint u = 0u; u < V_CHUNK; ++u) {
                const uint j = start + t0 + min(u0 + u, n - 1u);
                const uint jl = j != before ? j : before > 0u ? before - 1u : min(1u, params.capacity - 1u);
                [[unroll]] for (uint c = 0u; c < COLS; ++c) {
                    const uint col = min(lid + c * WG, VALUE_DIM - 1u);
                    const float xv = v_cache[v_base + jl * VALUE_DIM + col];
                    const float xt = v_new[col];
                    vc[u * COLS + c] = j == before ? xt : xv;
                }
            }
            [[unroll]] for (uint u = 0u; u < V_CHUNK; ++u)
                if (u0 + u < n)
                    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) {
                        const float p = tile[g * WG + u0 + u];
                        l_run[g] += p;
                        [[unroll]] for (uint c = 0u; c < COLS; ++c) acc[g * COLS + c] += p * vc[u * COLS + c];
                    }
        }
        barrier();  // the next tile overwrites `tile` and `reduce`
    }

    // This workgroup's partials, then its count; the slot's last workgroup combines.
    const uint slots = params.batch * params.kv_heads;
    const uint partial0 = params.work + 2u * params.batch + slots + slot * params.group_stride * HEAD_RATIO * P_STRIDE;
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) {
        const uint p = partial0 + (group * HEAD_RATIO + g) * P_STRIDE;
        if (lid == 0u) {
            ws[p] = floatBitsToUint(m_run[g]);
            ws[p + 1u] = floatBitsToUint(l_run[g]);
        }
        [[unroll]] for (uint c = 0u; c < COLS; ++c) {
            const uint col = lid + c * WG;
            if (col < VALUE_DIM) ws[p + 2u + col] = floatBitsToUint(acc[g * COLS + c]);
        }
    }
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u) last_shared = atomicAdd(ws[params.work + params.batch + slot], 1u) == params.groups - 1u;
    barrier();
    if (!last_shared) return;
    memoryBarrierBuffer();

    // The slot's partials in group order (fixed, whatever order the workgroups finished in):
    // the groups' max per head (each invocation over every WG-th group, then a tree), then the
    // sums, CHUNK groups' loads at a time.
    float bigs[HEAD_RATIO];
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) {
        bigs[g] = EMPTY;
        for (uint s = lid; s < params.groups; s += WG) bigs[g] = max(bigs[g], uintBitsToFloat(ws[partial0 + (s * HEAD_RATIO + g) * P_STRIDE]));
    }
    workgroup_max(bigs);
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) {
        const float big = bigs[g];
        float l = 0.0, o[COLS];
        [[unroll]] for (uint c = 0u; c < COLS; ++c) o[c] = 0.0;
        [[dont_unroll]] for (uint s0 = 0u; s0 < params.groups; s0 += CHUNK) {
            // Every load reads a partial that exists (clamped group and column), so none waits
            // alone under its condition; the sum below takes the live ones.
            float mc[CHUNK], lc[CHUNK], ac[CHUNK * COLS];
            [[unroll]] for (uint u = 0u; u < CHUNK; ++u) {
                const uint p = partial0 + (min(s0 + u, params.groups - 1u) * HEAD_RATIO + g) * P_STRIDE;
                mc[u] = uintBitsToFloat(ws[p]);
                lc[u] = uintBitsToFloat(ws[p + 1u]);
                [[unroll]] for (uint c = 0u; c < COLS; ++c) ac[u * COLS + c] = uintBitsToFloat(ws[p + 2u + min(lid + c * WG, VALUE_DIM - 1u)]);
            }
            [[unroll]] for (uint u = 0u; u < CHUNK; ++u)
                if (s0 + u < params.groups) {
                    const float e = exp(mc[u] - big);
                    l += e * lc[u];
                    [[unroll]] for (uint c = 0u; c < COLS; ++c) o[c] += e * ac[u * COLS + c];
                }
        }
        const float inv = 1.0 / l;
        [[unroll]] for (uint c = 0u; c < COLS; ++c) {
            const uint col = lid + c * WG;
            if (col < VALUE_DIM) o_data[(q_row0 + g) * VALUE_DIM + col] = STORE_ELEM(o[c] * inv);
        }
    }
    if (lid == 0u) {
        ws[params.work + params.batch + slot] = 0u;  // ready for the next step
        // The sequence's last slot advances its key count.
        const uint seq_counter = params.work + params.batch + slots + seq;
        if (atomicAdd(ws[seq_counter], 1u) == params.kv_heads - 1u) {
            ws[params.work + seq] = len;
            ws[seq_counter] = 0u;
            if (full) atomicAdd(ws[params.dropped], 1u);
        }
    }
}
