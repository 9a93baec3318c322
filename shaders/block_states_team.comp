#version 450
// Block states of polysketch, lane-team variant (lib/team_kernels.hpp): the same result as
// block_states.comp, H_l = phi(K_l)^T [V_l | 1] for every block l of every (batch, key/value
// head), written for CPU drivers (llvmpipe) where a subgroup of 8 lanes is one SIMD register.
//
// A workgroup is 8 teams (subgroups) of 8 lanes and owns 128 consecutive features of one block;
// team t owns the 16 features 128 w + 16 t + 0..15 and lane i of the team expands features
// 128 w + 16 t + i + 8 s (slot s = 0, 1). Lane i also owns the value columns [4 C4 i, 4 C4 (i + 1))
// (C4 vec4s; those >= VALUE_DIM are loaded from the row's last vec4 and never stored) and keeps
// the accumulators of its columns for the 16 features of its team. Per key j a lane loads only
// what no other lane of its team loads: its vec4 of the sketch row S(k_j) (the entries of its
// features' pairs then come by subgroupShuffle; rows longer than 32 are read entry by entry) and
// its C4 vec4s of v_j; the 16 features' phi values reach every lane by subgroupShuffle from a constant
// lane (one SIMD permute on llvmpipe), so each loaded vec4 feeds 16 multiply-adds. No shared
// memory, no barriers.
//
// Layouts: sketch rows [batch * kv_heads + head][n][SKETCH] (float32); states
// [batch * kv_heads + head][block][feature][Z_STRIDE]: VALUE_DIM values, the normalizer (the
// feature sum, column VALUE_DIM) and zero padding to Z_STRIDE = VALUE_DIM + 4 floats (VALUE_DIM is
// a multiple of 4 here), so every state row starts on a vec4 and is written as vec4s. Values are
// read as whole vec4s (4 elements of a 16-bit type as a uvec2) when the row base and the token
// stride are multiples of 4 elements, else element by element (two copies of the key loop, so no
// branch inside it). The key loop runs at most block_size (<= 1024) times per invocation, well
// inside llvmpipe's loop budget.
//
// Measured on llvmpipe (2 cores, AVX2): the states of n = 32k, r = 32 (F = 528), dv = 64, 4 heads
// (9 GFLOP) took ~0.66 s with 8 features per team and subgroupBroadcast, 0.53 s with
// subgroupShuffle, against ~1.5 s for block_states.comp. Tried and dropped: the team
// loading the sketch row once (a vec4 per lane) and picking a and b with subgroupShuffle (slower:
// shuffles are per-lane loops too), two keys per loop iteration (no gain).

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#include "u64_pairs.glsl"  // first: it enables 64-bit integer types
#include "self_tensor.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x = 64) in;
#include "interface/block_states.h"
PSK_DECLARE_SPECS(PSK_BLOCK_STATES_TEAM_SPEC)
PSK_DECLARE_BINDINGS(PSK_BLOCK_STATES_BINDINGS)

const uint TEAM = 8u;           // lanes per team
const uint FPL = 2u;            // features per lane (slots)
const uint FEATS = TEAM * FPL;  // features per team

layout(std430, binding = BINDING_K_SKETCH) readonly buffer KSketch { float k_sketch[]; };
layout(std430, binding = BINDING_K_SKETCH) readonly buffer KSketch4 { vec4 k_sketch4[]; };
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
// The same values four at a time (aliases binding 1).
#if defined(DATA_F32)
layout(std430, binding = BINDING_V) readonly buffer VBuffer4 { vec4 v_data4[]; };
// 8 floats per load (pairs of vec4s): on llvmpipe a load is a loop over the lanes whose cost
// hardly depends on its width.
layout(std430, binding = BINDING_V) readonly buffer VBuffer8 { u64vec4 v_data8[]; };
#else
layout(std430, binding = BINDING_V) readonly buffer VBuffer4 { uvec2 v_data4[]; };
#endif
layout(std430, binding = BINDING_PAIRS) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = BINDING_STATES) writeonly buffer States { vec4 states4[]; };

// Four consecutive value elements starting at element index e (a multiple of 4), as floats.
vec4 load_v4(uint e) {
#if defined(DATA_F32)
    return v_data4[e >> 2];
#elif defined(DATA_F16)
    const uvec2 u = v_data4[e >> 2];
    return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
#else
    const uvec2 u = v_data4[e >> 2];
    return vec4(uintBitsToFloat(u.x << 16), uintBitsToFloat(u.x & 0xFFFF0000u), uintBitsToFloat(u.y << 16),
                uintBitsToFloat(u.y & 0xFFFF0000u));
#endif
}

// Value elements [e, e + 8) (e a multiple of 8) as two vec4s.
void load_v8(uint e, out vec4 lo, out vec4 hi) {
#if defined(DATA_F32)
    const u64vec4 u = v_data8[e >> 3];
    lo = low4(u);
    hi = high4(u);
#else
    lo = load_v4(e);
    hi = load_v4(e + 4u);
#endif
}

vec4 load_v1(uint e) {
    return vec4(LOAD_ELEM(v_data[e]), LOAD_ELEM(v_data[e + 1u]), LOAD_ELEM(v_data[e + 2u]), LOAD_ELEM(v_data[e + 3u]));
}

// S(k) rows with at most 32 entries are read as one vec4 per lane (lane i: entries 4i..4i+3) and
// each lane takes the entries of its features by subgroupShuffle: one load per key instead of
// four scalar loads (measured 13% faster for the whole kernel on llvmpipe, r = 32).
const bool ROW_SHUFFLE = SKETCH <= 32u;

// Entry a (< 32) of the sketch row of which every lane holds its vec4 `mine`.
float row_entry(vec4 mine, uint a) {
    const uint src = a >> 2;
    const vec4 t = vec4(subgroupShuffle(mine.x, src), subgroupShuffle(mine.y, src), subgroupShuffle(mine.z, src), subgroupShuffle(mine.w, src));
    const uint comp = a & 3u;
    return comp == 0u ? t.x : comp == 1u ? t.y : comp == 2u ? t.z : t.w;
}

void main() {
    const uint block = gl_WorkGroupID.y, seq = gl_WorkGroupID.z;
    const uint batch = seq / params.kv_heads, head = seq % params.kv_heads;
    const uint lane = gl_SubgroupInvocationID;
    const uint f0 = gl_WorkGroupID.x * (8u * FEATS) + gl_SubgroupID * FEATS;  // the team's first feature
    if (f0 >= params.features) return;  // the whole team is past the last feature (uniform; no barriers here)

    uint pa[FPL], pb[FPL];  // the pair (a, b) of the lane's features f0 + lane + 8 s
    float coef[FPL];
    [[unroll]] for (uint s = 0u; s < FPL; ++s) {
        const uint f = f0 + lane + TEAM * s;
        const uint entry = f < params.features ? pairs[f] : 0u;
        pa[s] = pair_first(entry);
        pb[s] = pair_second(entry);
        coef[s] = f < params.features ? pair_coefficient(entry) : 0.0;
    }

    const uint col0 = lane * 4u * C4;  // this lane's first value column
    bool col_ok[4];
    [[unroll]] for (uint c = 0u; c < 4u; ++c) col_ok[c] = c < C4 && col0 + 4u * c < VALUE_DIM;

    vec4 acc[FEATS][4];
    [[unroll]] for (uint r = 0u; r < FEATS; ++r)
        [[unroll]] for (uint c = 0u; c < 4u; ++c) acc[r][c] = vec4(0.0);
    float norm[FPL];
    [[unroll]] for (uint s = 0u; s < FPL; ++s) norm[s] = 0.0;

    const uint key_begin = block * params.block_size;
    const uint key_end = min(params.n, key_begin + params.block_size);
    const uint v_base = tensor_row(params.v_strides, batch, head, 0u);
    const uint v_token = params.v_strides.token;
    const bool v_vec4 = (v_base & 3u) == 0u && (v_token & 3u) == 0u;
    // Pairs of vec4s in one load: float32, even C4, whole pairs in a row, 8-float aligned rows.
#if defined(DATA_F32)
    const bool v_vec8 = C4 % 2u == 0u && VALUE_DIM % 8u == 0u && (v_base & 7u) == 0u && (v_token & 7u) == 0u;
#else
    const bool v_vec8 = false;
#endif

    // Columns past VALUE_DIM (only in the last lanes when VALUE_DIM < 32 C4) read the row's last
    // vec4 instead: in bounds, never stored, and no divergent branch in the key loop.
    uint col[4];
    [[unroll]] for (uint c = 0u; c < 4u; ++c) col[c] = min(col0 + 4u * c, VALUE_DIM - 4u);
    uint col8[2];  // the same for pairs (v_vec8: VALUE_DIM % 8 == 0)
    [[unroll]] for (uint c = 0u; c < 2u; ++c) col8[c] = min(col0 + 8u * c, VALUE_DIM - 8u);

    // Loaders for PSK_TEAM_KEY_LOOP: the lane's C4 value vec4s of the row at element v_row.
#define PSK_LOAD_BY4(load)                                                                         \
    [[unroll]] for (uint c = 0u; c < 4u; ++c) v4[c] = c < C4 ? load(v_row + col[c]) : vec4(0.0);
#define PSK_LOAD_V4 PSK_LOAD_BY4(load_v4)
#define PSK_LOAD_V1 PSK_LOAD_BY4(load_v1)
#define PSK_LOAD_V8                                                                                \
    [[unroll]] for (uint c = 0u; c < 4u; c += 2u)                                                  \
        if (c < C4) load_v8(v_row + col8[c / 2u], v4[c], v4[c + 1u]); else { v4[c] = vec4(0.0); v4[c + 1u] = vec4(0.0); }

    // One key at rows s_row, v_row: this lane's two phi values and its value columns, then 16
    // shuffles x C4 vec4 multiply-adds.
#define PSK_TEAM_KEY_LOOP(LOAD_V)                                                                  \
    {                                                                                              \
        uint s_row = (seq * params.n + key_begin) * SKETCH;                                        \
        uint v_row = v_base + key_begin * v_token;                                                 \
        [[dont_unroll]] for (uint j = key_begin; j < key_end; ++j) {                               \
            float p[FPL];                                                                          \
            if (ROW_SHUFFLE) {                                                                     \
                const vec4 mine = k_sketch4[(s_row >> 2) + min(lane, SKETCH / 4u - 1u)];           \
                [[unroll]] for (uint s = 0u; s < FPL; ++s)                                         \
                    p[s] = coef[s] * row_entry(mine, pa[s]) * row_entry(mine, pb[s]);              \
            } else {                                                                               \
                [[unroll]] for (uint s = 0u; s < FPL; ++s)                                         \
                    p[s] = coef[s] * k_sketch[s_row + pa[s]] * k_sketch[s_row + pb[s]];            \
            }                                                                                      \
            [[unroll]] for (uint s = 0u; s < FPL; ++s) norm[s] += p[s];                            \
            vec4 v4[4];                                                                            \
            LOAD_V                                                                                 \
            [[unroll]] for (uint r = 0u; r < FEATS; ++r) {                                         \
                const float x = subgroupShuffle(p[r / TEAM], r % TEAM);                            \
                [[unroll]] for (uint c = 0u; c < 4u; ++c)                                          \
                    if (c < C4) acc[r][c] += x * v4[c];                                            \
            }                                                                                      \
            s_row += SKETCH;                                                                       \
            v_row += v_token;                                                                      \
        }                                                                                          \
    }
    if (v_vec8) PSK_TEAM_KEY_LOOP(PSK_LOAD_V8) else if (v_vec4) PSK_TEAM_KEY_LOOP(PSK_LOAD_V4) else PSK_TEAM_KEY_LOOP(PSK_LOAD_V1)
#undef PSK_TEAM_KEY_LOOP
#undef PSK_LOAD_BY4
#undef PSK_LOAD_V4
#undef PSK_LOAD_V1
#undef PSK_LOAD_V8

    // Row f0 + r: every lane writes its columns; lane r % 8 adds the normalizer and the zero padding.
    const uint state_base = (seq * params.blocks + block) * params.features * Z_STRIDE;
    [[unroll]] for (uint r = 0u; r < FEATS; ++r) {
        if (f0 + r < params.features) {
            const uint row4 = (state_base + (f0 + r) * Z_STRIDE) >> 2;
            [[unroll]] for (uint c = 0u; c < 4u; ++c)
                if (col_ok[c]) states4[row4 + (col0 >> 2) + c] = acc[r][c];
        }
    }
    [[unroll]] for (uint s = 0u; s < FPL; ++s) {
        const uint f = f0 + lane + TEAM * s;
        if (f < params.features) {
            states4[(state_base + f * Z_STRIDE + VALUE_DIM) >> 2] = vec4(norm[s], 0.0, 0.0, 0.0);
            [[unroll]] for (uint c = VALUE_DIM + 4u; c < Z_STRIDE; c += 4u) states4[(state_base + f * Z_STRIDE + c) >> 2] = vec4(0.0);
        }
    }
}
