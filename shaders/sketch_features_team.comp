#version 450
// Polysketch feature map, lane-team variant for CPU Vulkan drivers (lib/team_kernels.hpp says
// why), for the degree-4 random sketch: S(x) = c (x @ G1_0a) * (x @ G1_0b). Same inputs, outputs
// and push constants as sketch_features.comp (SKETCH_RANDOM, LEVELS = 1); the plan uses the
// generic kernel for every other sketch.
//
// A workgroup is 8 teams (subgroups) of 8 lanes and owns 64 consecutive rows; lane l of a team
// owns row row0 + 8t + l for the row-wise work (load, LayerNorm, scale, the local-part row) and
// sketch columns [4 CPL4 l, 4 CPL4 (l + 1)) of all 8 rows of its team. The products x @ G are
// accumulated as 8 rows x 4 CPL4 columns per lane: per 4 input dims the lane loads 4 CPL4 vec4s of
// each transposed weight matrix (its own columns) and receives the 8 rows' inputs by
// subgroupShuffle from a constant lane, so every loaded vec4 feeds 8 rows. No shared memory, no barriers.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint HEAD_DIM = 64;  // h, a multiple of 4
layout(constant_id = 1) const uint SKETCH = 32;    // r, a multiple of 4
layout(constant_id = 2) const uint CPL4 = 1;       // vec4 sketch columns per lane: ceil(r / 32)
// Rows read as vec4s (float32 and every stride a multiple of 4): a specialization constant, not a
// run-time branch, because a CPU driver runs both sides of a branch under a lane mask.
layout(constant_id = 3) const bool X_VEC4 = false;

const uint TEAM = 8u;
const uint H4 = HEAD_DIM / 4u;

layout(std430, binding = 0) readonly buffer XBuffer { ELEM x_data[]; };
#if defined(DATA_F32)
layout(std430, binding = 0) readonly buffer XBuffer4 { vec4 x_data4[]; };
#endif
layout(std430, binding = 1) readonly buffer Weights { vec4 w_vec[]; };  // packed tensors start on vec4s
layout(std430, binding = 2) writeonly buffer SketchOut { vec4 sketch_out4[]; };
layout(std430, binding = 3) writeonly buffer LocalOut { vec4 local_out4[]; };

const uint FLAG_QK_LN = 1u;
const uint FLAG_WRITE_LOCAL = 2u;
const uint FLAG_LOCAL_LN = 4u;

layout(push_constant) uniform Params {
    uint n;
    uint heads;
    float scale;
    uint flags;
    TensorStrides x_strides;
    float node_scale;
    uint ln_scale, ln_bias, local_ln_scale, local_ln_bias;
    uint w[16];  // w[0] = G1_0a^T, w[1] = G1_0b^T (SKETCH rows of HEAD_DIM floats)
} params;

const float LN_EPS = 1e-5;

vec4 weight4(uint float_offset) { return w_vec[float_offset >> 2]; }

// LayerNorm over a row held as H4 vec4s (population variance, eps inside), parameters at the
// given float offsets of the weights.
void layer_norm(inout vec4 v[H4], uint scale_off, uint bias_off) {
    vec4 s = vec4(0.0);
    [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) s += v[d4];
    const float mean = (s.x + s.y + s.z + s.w) / float(HEAD_DIM);
    vec4 q = vec4(0.0);
    [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) q += (v[d4] - mean) * (v[d4] - mean);
    const float inv = inversesqrt((q.x + q.y + q.z + q.w) / float(HEAD_DIM) + LN_EPS);
    [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4)
        v[d4] = (v[d4] - mean) * inv * weight4(scale_off + 4u * d4) + weight4(bias_off + 4u * d4);
}

#define FOR_TEAM_ROWS(BODY) BODY(0u) BODY(1u) BODY(2u) BODY(3u) BODY(4u) BODY(5u) BODY(6u) BODY(7u)

void main() {
    const uint head = gl_WorkGroupID.y, batch = gl_WorkGroupID.z;
    const uint lane = gl_SubgroupInvocationID;
    const uint team_begin = gl_WorkGroupID.x * 64u + gl_SubgroupID * TEAM;
    if (team_begin >= params.n) return;  // the whole team is past the end (uniform; no barriers here)
    const uint my_row = team_begin + lane;
    const bool my_valid = my_row < params.n;
    const uint crow = my_valid ? my_row : 0u;  // a row that exists, for idle lanes' reads

    // The lane's own row: load, LayerNorm, scale; the local-part row.
    vec4 raw[H4];
    const uint x_base = tensor_row(params.x_strides, batch, head, crow);
    [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) {
#if defined(DATA_F32)
        if (X_VEC4) {
            raw[d4] = x_data4[x_base / 4u + d4];
            continue;
        }
#endif
        raw[d4] = vec4(LOAD_ELEM(x_data[x_base + 4u * d4]), LOAD_ELEM(x_data[x_base + 4u * d4 + 1u]),
                       LOAD_ELEM(x_data[x_base + 4u * d4 + 2u]), LOAD_ELEM(x_data[x_base + 4u * d4 + 3u]));
    }
    vec4 x[H4];
    [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) x[d4] = raw[d4];
    if ((params.flags & FLAG_QK_LN) != 0u) layer_norm(x, params.ln_scale, params.ln_bias);
    [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) x[d4] *= params.scale;

    const uint out_row = (batch * params.heads + head) * params.n + crow;
    if ((params.flags & FLAG_WRITE_LOCAL) != 0u && my_valid) {
        if ((params.flags & FLAG_LOCAL_LN) != 0u) {
            layer_norm(raw, params.local_ln_scale, params.local_ln_bias);
            [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) local_out4[out_row * H4 + d4] = raw[d4] * params.scale;
        } else {
            [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) local_out4[out_row * H4 + d4] = x[d4];
        }
    }

    // Products of the team's 8 rows with the lane's sketch columns of G1_0a and G1_0b.
    vec4 pa[TEAM][CPL4], pb[TEAM][CPL4];
    [[unroll]] for (uint r = 0u; r < TEAM; ++r)
        [[unroll]] for (uint c = 0u; c < CPL4; ++c) {
            pa[r][c] = vec4(0.0);
            pb[r][c] = vec4(0.0);
        }
    const uint col0 = 4u * CPL4 * lane;  // the lane's first sketch column
    [[dont_unroll]] for (uint d4 = 0u; d4 < H4; ++d4) {
        // wa[c][e] = G^T[col0 + 4c + e][4 d4 .. 4 d4 + 3]: dims of column 4c + e.
        vec4 wa[CPL4][4], wb[CPL4][4];
        [[unroll]] for (uint c = 0u; c < CPL4; ++c)
            [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                const uint col = min(col0 + 4u * c + e, SKETCH - 1u);  // columns past r are never stored
                wa[c][e] = weight4(params.w[0] + col * HEAD_DIM + 4u * d4);
                wb[c][e] = weight4(params.w[1] + col * HEAD_DIM + 4u * d4);
            }
        // x[d4] is indexed by a loop variable here: pick it with a constant-index select chain
        // instead (dynamic register indexing compiles slowly on llvmpipe).
        vec4 xd = x[0];
        [[unroll]] for (uint i = 1u; i < H4; ++i) xd = d4 == i ? x[i] : xd;
#define ROW_PRODUCTS(r)                                                            \
        {                                                                          \
            const vec4 xr = subgroupShuffle(xd, r);                              \
            [[unroll]] for (uint c = 0u; c < CPL4; ++c) {                          \
                pa[r][c] += vec4(dot(xr, wa[c][0]), dot(xr, wa[c][1]), dot(xr, wa[c][2]), dot(xr, wa[c][3])); \
                pb[r][c] += vec4(dot(xr, wb[c][0]), dot(xr, wb[c][1]), dot(xr, wb[c][2]), dot(xr, wb[c][3])); \
            }                                                                      \
        }
        FOR_TEAM_ROWS(ROW_PRODUCTS)
#undef ROW_PRODUCTS
    }

    // S = c (x @ G1_0a) * (x @ G1_0b): the lane stores its columns of every valid team row.
    [[unroll]] for (uint r = 0u; r < TEAM; ++r) {
        const uint row = team_begin + r;
        if (row >= params.n) continue;
        const uint s_row = (batch * params.heads + head) * params.n + row;
        [[unroll]] for (uint c = 0u; c < CPL4; ++c)
            if (col0 + 4u * c < SKETCH) sketch_out4[(s_row * SKETCH + col0) / 4u + c] = params.node_scale * pa[r][c] * pb[r][c];
    }
}
