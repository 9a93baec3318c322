#version 450
// Polysketch feature map, lane-team variant for CPU Vulkan drivers (lib/team_kernels.hpp says
// why), for the degree-4 random sketch: S(x) = c (x @ G1_0a) * (x @ G1_0b). Same inputs, outputs
// and push constants as sketch_features.comp (SKETCH_RANDOM, LEVELS = 1); the plan uses the
// generic kernel for every other sketch.
//
// A workgroup is 8 teams (subgroups) of 8 lanes and owns 128 consecutive rows; lane l of team t
// owns rows row0 + 16 t + l + 8 s (slot s = 0, 1) for the row-wise work (load, LayerNorm, scale,
// the local-part row) and sketch columns [4 CPL4 l, 4 CPL4 (l + 1)) of all 16 rows of its team.
// The products x @ G are accumulated as 16 rows x 4 CPL4 columns per lane: per 8 input dims the
// lane loads 4 CPL4 u64vec4s (8 floats each) of each transposed weight matrix (its own columns)
// and receives the 16 rows' inputs by subgroupShuffle from a constant lane, so every loaded weight
// feeds 16 rows. No shared memory, no barriers.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#include "u64_pairs.glsl"  // first: it enables 64-bit integer types
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x = 64) in;
#include "interface/sketch_features.h"
PSK_DECLARE_SPECS(PSK_SKETCH_FEATURES_TEAM_SPEC)
PSK_DECLARE_BINDINGS(PSK_SKETCH_FEATURES_BINDINGS)

const uint TEAM = 8u;            // lanes per team
const uint RPL = 2u;             // rows per lane (slots)
const uint ROWS = TEAM * RPL;    // rows per team
const uint H4 = HEAD_DIM / 4u;
// Weights 8 floats (one u64vec4) per load: on llvmpipe a load is a loop over the 8 lanes whose
// cost hardly depends on its width. Packed tensors start on 8 floats (sketch_pack.cpp).
const bool PAIRS = H4 % 2u == 0u;
const uint D_STEP = PAIRS ? 2u : 1u;

layout(std430, binding = BINDING_X_ROWS) readonly buffer XBuffer { ELEM x_data[]; };
#if defined(DATA_F32)
layout(std430, binding = BINDING_X_ROWS) readonly buffer XBuffer4 { vec4 x_data4[]; };
layout(std430, binding = BINDING_X_ROWS) readonly buffer XBuffer8 { u64vec4 x_data8[]; };
#endif
layout(std430, binding = BINDING_WEIGHTS) readonly buffer Weights { vec4 w_vec[]; };  // packed tensors start on vec4s
layout(std430, binding = BINDING_WEIGHTS) readonly buffer Weights8 { u64vec4 w_vec8[]; };
layout(std430, binding = BINDING_SKETCH_OUT) writeonly buffer SketchOut { vec4 sketch_out4[]; };
layout(std430, binding = BINDING_LOCAL_OUT) writeonly buffer LocalOut { vec4 local_out4[]; };
layout(std430, binding = BINDING_LOCAL_OUT) writeonly buffer LocalOut8 { u64vec4 local_out8[]; };

const float LN_EPS = 1e-5;

vec4 weight4(uint float_offset) { return w_vec[float_offset >> 2]; }

// Stores a row of H4 vec4s at vec4 index `base4` (8 floats per store where H4 is even).
void store_local(uint base4, vec4 v[H4]) {
    if (PAIRS) {
        [[unroll]] for (uint d4 = 0u; d4 < H4; d4 += 2u) local_out8[(base4 + d4) / 2u] = pack8(v[d4], v[d4 + 1u]);
    } else {
        [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) local_out4[base4 + d4] = v[d4];
    }
}

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

void main() {
    const uint head = gl_WorkGroupID.y, batch = gl_WorkGroupID.z;
    const uint lane = gl_SubgroupInvocationID;
    const uint team_begin = gl_WorkGroupID.x * (8u * ROWS) + gl_SubgroupID * ROWS;
    if (team_begin >= params.n) return;  // the whole team is past the end (uniform; no barriers here)

    // The lane's own rows: load, LayerNorm, scale; the local-part rows.
    vec4 x[RPL][H4];
    [[unroll]] for (uint s = 0u; s < RPL; ++s) {
        const uint my_row = team_begin + lane + TEAM * s;
        const bool my_valid = my_row < params.n;
        const uint crow = my_valid ? my_row : 0u;  // a row that exists, for idle lanes' reads
        vec4 raw[H4];
        const uint x_base = tensor_row(params.x_strides, batch, head, crow);
#if defined(DATA_F32)
        if (X_LOAD == 2u) {
            [[unroll]] for (uint d4 = 0u; d4 < H4; d4 += 2u) {
                const u64vec4 u = x_data8[x_base / 8u + d4 / 2u];
                raw[d4] = low4(u);
                raw[d4 + 1u] = high4(u);
            }
        } else if (X_LOAD == 1u) {
            [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) raw[d4] = x_data4[x_base / 4u + d4];
        } else
#endif
        {
            [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4)
                raw[d4] = vec4(LOAD_ELEM(x_data[x_base + 4u * d4]), LOAD_ELEM(x_data[x_base + 4u * d4 + 1u]),
                               LOAD_ELEM(x_data[x_base + 4u * d4 + 2u]), LOAD_ELEM(x_data[x_base + 4u * d4 + 3u]));
        }
        [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) x[s][d4] = raw[d4];
        if ((params.flags & FLAG_QK_LN) != 0u) layer_norm(x[s], params.ln_scale, params.ln_bias);
        [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) x[s][d4] *= params.scale;

        const uint out_row = (batch * params.heads + head) * params.n + crow;
        if ((params.flags & FLAG_WRITE_LOCAL) != 0u && my_valid) {
            if ((params.flags & FLAG_LOCAL_LN) != 0u) {
                layer_norm(raw, params.local_ln_scale, params.local_ln_bias);
                [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) raw[d4] *= params.scale;
                store_local(out_row * H4, raw);
            } else {
                store_local(out_row * H4, x[s]);
            }
        }
    }

    // Products of the team's 16 rows with the lane's sketch columns of G1_0a and G1_0b.
    vec4 pa[ROWS][CPL4], pb[ROWS][CPL4];
    [[unroll]] for (uint r = 0u; r < ROWS; ++r)
        [[unroll]] for (uint c = 0u; c < CPL4; ++c) {
            pa[r][c] = vec4(0.0);
            pb[r][c] = vec4(0.0);
        }
    const uint col0 = 4u * CPL4 * lane;  // the lane's first sketch column
    [[dont_unroll]] for (uint d4 = 0u; d4 < H4; d4 += D_STEP) {
        // wa[c][e][h] = G^T[col0 + 4c + e][4 (d4 + h) .. 4 (d4 + h) + 3]: dims of column 4c + e.
        vec4 wa[CPL4][4][2], wb[CPL4][4][2];
        [[unroll]] for (uint c = 0u; c < CPL4; ++c)
            [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                const uint col = min(col0 + 4u * c + e, SKETCH - 1u);  // columns past r are never stored
                if (PAIRS) {
                    const u64vec4 ua = w_vec8[(params.w[0] + col * HEAD_DIM + 4u * d4) / 8u];
                    const u64vec4 ub = w_vec8[(params.w[1] + col * HEAD_DIM + 4u * d4) / 8u];
                    wa[c][e][0] = low4(ua);
                    wa[c][e][1] = high4(ua);
                    wb[c][e][0] = low4(ub);
                    wb[c][e][1] = high4(ub);
                } else {
                    wa[c][e][0] = weight4(params.w[0] + col * HEAD_DIM + 4u * d4);
                    wb[c][e][0] = weight4(params.w[1] + col * HEAD_DIM + 4u * d4);
                }
            }
        [[unroll]] for (uint h = 0u; h < D_STEP; ++h) {
            // x[s][d4 + h] is indexed by a loop variable here: pick it with a constant-index
            // select chain instead (dynamic register indexing compiles slowly on llvmpipe).
            vec4 xd[RPL];
            [[unroll]] for (uint s = 0u; s < RPL; ++s) {
                xd[s] = x[s][0];
                [[unroll]] for (uint i = 1u; i < H4; ++i) xd[s] = d4 + h == i ? x[s][i] : xd[s];
            }
            [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                const vec4 xr = subgroupShuffle(xd[r / TEAM], r % TEAM);
                [[unroll]] for (uint c = 0u; c < CPL4; ++c) {
                    pa[r][c] += vec4(dot(xr, wa[c][0][h]), dot(xr, wa[c][1][h]), dot(xr, wa[c][2][h]), dot(xr, wa[c][3][h]));
                    pb[r][c] += vec4(dot(xr, wb[c][0][h]), dot(xr, wb[c][1][h]), dot(xr, wb[c][2][h]), dot(xr, wb[c][3][h]));
                }
            }
        }
    }

    // S = c (x @ G1_0a) * (x @ G1_0b): the lane stores its columns of every valid team row.
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        const uint row = team_begin + r;
        if (row >= params.n) continue;
        const uint s_row = (batch * params.heads + head) * params.n + row;
        [[unroll]] for (uint c = 0u; c < CPL4; ++c)
            if (col0 + 4u * c < SKETCH) sketch_out4[(s_row * SKETCH + col0) / 4u + c] = params.node_scale * pa[r][c] * pb[r][c];
    }
}
