#version 450
// Polysketch output (SPEC section 6), lane-team variant for CPU Vulkan drivers (team_kernels.hpp
// says why). Same result as polysketch_output.comp:
//
//   num_i = phi(q_i)^T Z + local_i,      O_i = num_i[0:dv] / (1 + num_i[dv])
//
// A workgroup is 8 teams (subgroups) of 8 lanes and owns 64 consecutive query rows of one block;
// team t owns rows row0 + 8t + r, r = 0..7. Lane l of a team:
//   - owns row row0 + 8t + l for everything row-wise (its S(q) or q' row, its share of the
//     normalizer), and shares row values with the team by subgroupShuffle from a constant lane;
//   - owns value columns [4 C4 l, 4 C4 (l + 1)) of all 8 rows: acc[r][c] (8 x C4 vec4s).
// No shared memory and no barriers: each lane only loads operands no other lane of its team loads
// (its own Z columns, its own keys and value columns), so every vec4 loaded feeds 8 rows.
//
// phi(q)^T Z: features are visited as (a, b) with b in aligned groups of 4 (one vec4 of the
// lane's S(q) row), coefficient 0 where b < a; feature index f(a, a) = a, f(a, b > a) =
// R + a R - a (a + 1) / 2 + (b - a - 1) (the pair table's order, self_tensor.glsl). The
// normalizer column of Z is read by lane l for feature l % 4 of the group and shared by broadcast.
//
// Local part (CAUSAL): tiles of 8 KPL keys; lane l scores keys j0 + 8 kk + l (kk < KPL) against the 8
// rows (q rows broadcast from their lanes, its keys' rows loaded as vec4s), weights (q.k)^DEGREE
// (LOCAL_EXACT) or <S(q), S(k)>^2 masked to j <= row, then every lane adds w_rj v_j of its columns
// with w broadcast from the key's lane. Normalizer parts are per-lane sums reduced by subgroupAdd.
//
// Loop bounds per invocation: R (R / 4 + 1) feature groups plus block_size / (8 KPL) key tiles (llvmpipe
// ends all loops of an invocation after 65535 iterations). Layouts as polysketch_output.comp;
// states [kv seq][block][F][Z_STRIDE].

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_arithmetic : require

#include "self_tensor.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint SKETCH = 32;     // R, a multiple of 4
layout(constant_id = 1) const uint HEAD_DIM = 64;   // h (local exact rows), a multiple of 4
layout(constant_id = 2) const uint VALUE_DIM = 64;  // dv, a multiple of 4
layout(constant_id = 3) const uint DEGREE = 4;      // local exact weights (q.k)^DEGREE
layout(constant_id = 4) const bool CAUSAL = true;
layout(constant_id = 5) const bool LOCAL_EXACT = false;
layout(constant_id = 6) const uint Z_STRIDE = 68;   // floats per state row (dv + 1 rounded up to 4)
layout(constant_id = 7) const uint C4 = 2;          // vec4 value columns per lane: ceil(dv / 32)
// v rows read as vec4s (float32 and every v stride a multiple of 4): a specialization constant,
// not a run-time branch, because a CPU driver runs both sides of a branch under a lane mask.
layout(constant_id = 8) const bool V_VEC4 = false;

const uint TEAM = 8u;
const uint KPL = 4u;  // keys per lane in a local tile: a tile is KPL * 8 keys
const uint KEY_WIDTH = LOCAL_EXACT ? HEAD_DIM : SKETCH;
const uint KW4 = KEY_WIDTH / 4u;
const uint R4 = SKETCH / 4u;
const uint ZS4 = Z_STRIDE / 4u;

layout(std430, binding = 0) readonly buffer QSketch { vec4 q_sketch4[]; };
layout(std430, binding = 1) readonly buffer KLocal { vec4 k_local4[]; };  // S(k) rows, or k' rows
layout(std430, binding = 2) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = 3) writeonly buffer OBuffer { ELEM o_data[]; };
layout(std430, binding = 4) readonly buffer States { vec4 states4[]; };
layout(std430, binding = 4) readonly buffer StatesScalar { float states[]; };
layout(std430, binding = 6) readonly buffer QLocal { vec4 q_local4[]; };  // q' rows (LOCAL_EXACT)
#if defined(DATA_F32)
layout(std430, binding = 2) readonly buffer VBuffer4 { vec4 v_data4[]; };
#endif

layout(push_constant) uniform Params {
    uint n;
    uint block_size;
    uint blocks;
    uint features;
    uint head_ratio;  // Hq / Hkv
    uint q_heads;
    uint kv_heads;
    uint tiles_per_block;  // ceil(block_size / 64)
    TensorStrides v_strides;
    TensorStrides o_strides;
} params;

float weight_power(float x) {
    float w = x;  // x^DEGREE by repeated squaring (DEGREE is a power of two)
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

// Value columns [4 c4, 4 c4 + 4) of key row `row` (element offset of the row's first value).
vec4 load_values(uint row_offset, uint c4) {
    const uint c = 4u * c4;
    if (c >= VALUE_DIM) return vec4(0.0);
#if defined(DATA_F32)
    if (V_VEC4) return v_data4[(row_offset + c) / 4u];
#endif
    return vec4(LOAD_ELEM(v_data[row_offset + c]), LOAD_ELEM(v_data[row_offset + c + 1u]),
                LOAD_ELEM(v_data[row_offset + c + 2u]), LOAD_ELEM(v_data[row_offset + c + 3u]));
}

// Applies BODY(r) for the 8 rows of a team; r is a literal, (a constant lane index makes the shuffle one permute).
#define FOR_TEAM_ROWS(BODY) BODY(0u) BODY(1u) BODY(2u) BODY(3u) BODY(4u) BODY(5u) BODY(6u) BODY(7u)

void main() {
    const uint block = gl_WorkGroupID.x / params.tiles_per_block;
    const uint tile = gl_WorkGroupID.x % params.tiles_per_block;
    const uint q_head = gl_WorkGroupID.y, batch = gl_WorkGroupID.z;
    const uint kv_head = q_head / params.head_ratio;
    const uint q_seq = batch * params.q_heads + q_head;
    const uint kv_seq = batch * params.kv_heads + kv_head;
    const uint lane = gl_SubgroupInvocationID;

    const uint block_begin = block * params.block_size;
    const uint block_end = min(params.n, block_begin + params.block_size);
    const uint team_begin = block_begin + tile * 64u + gl_SubgroupID * TEAM;  // first row of the team
    // A team whose rows are all past the block or the sequence has nothing to write (uniform
    // across the subgroup; the kernel has no barriers).
    if (tile * 64u + gl_SubgroupID * TEAM >= params.block_size || team_begin >= params.n) return;
    const uint my_row = team_begin + lane;
    const bool my_valid = tile * 64u + gl_SubgroupID * TEAM + lane < params.block_size && my_row < params.n;
    const uint crow = my_valid ? my_row : block_begin;  // a row that exists, for idle lanes' reads
    const uint col4 = lane * C4;                         // the lane's first value vec4

    vec4 acc[TEAM][C4];
    [[unroll]] for (uint r = 0u; r < TEAM; ++r)
        [[unroll]] for (uint c = 0u; c < C4; ++c) acc[r][c] = vec4(0.0);
    float den_mine = 0.0;  // inter-block normalizer of the lane's own row

    // ---- phi(q_i)^T Z ----
    if (!CAUSAL || block > 0u) {
        const uint z_row0 = (kv_seq * params.blocks + (CAUSAL ? block : 0u)) * params.features;  // in rows
        const uint sq4 = (q_seq * params.n + crow) * R4;  // the lane's S(q) row, in vec4s
        [[dont_unroll]] for (uint a = 0u; a < SKETCH; ++a) {
            const float sa = q_sketch4[sq4 + a / 4u][a % 4u];
            const uint f_pairs = SKETCH + a * SKETCH - a * (a + 1u) / 2u;  // f(a, a + 1)
            [[dont_unroll]] for (uint b4 = a / 4u; b4 < R4; ++b4) {
                const vec4 sb = q_sketch4[sq4 + b4];
                // The normalizer column of the group's 4 features: lane l loads that of feature
                // e = l % 4 (one scalar load per lane instead of four), the group shares it below.
                const uint bl = 4u * b4 + (lane & 3u);
                const float zden_mine = states[(z_row0 + (bl <= a ? a : f_pairs + (bl - a - 1u))) * Z_STRIDE + VALUE_DIM];
#define Z_FEATURE(e)                                                                   \
                {                                                                      \
                    const uint b = 4u * b4 + e;                                        \
                    const float coef = b < a ? 0.0 : (b == a ? 1.0 : SQRT2);           \
                    const uint f = b <= a ? a : f_pairs + (b - a - 1u);                \
                    const float p = coef * sa * sb[e];                                 \
                    den_mine += p * subgroupShuffle(zden_mine, e);                   \
                    const uint z = (z_row0 + f) * ZS4;                                 \
                    vec4 zc[C4];                                                       \
                    [[unroll]] for (uint c = 0u; c < C4; ++c) zc[c] = col4 + c < ZS4 ? states4[z + col4 + c] : vec4(0.0); \
                    FOR_TEAM_ROWS(ACCUMULATE_Z)                                        \
                }
#define ACCUMULATE_Z(r)                                                                \
                    {                                                                  \
                        const float x = subgroupShuffle(p, r);                       \
                        [[unroll]] for (uint c = 0u; c < C4; ++c) acc[r][c] += x * zc[c]; \
                    }
                Z_FEATURE(0u) Z_FEATURE(1u) Z_FEATURE(2u) Z_FEATURE(3u)
#undef ACCUMULATE_Z
#undef Z_FEATURE
            }
        }
    }

    // ---- local part: keys of this block up to each row ----
    float den_local[TEAM];  // per-lane partial sums over the lane's keys, one per team row
    [[unroll]] for (uint r = 0u; r < TEAM; ++r) den_local[r] = 0.0;
    if (CAUSAL) {
        // The lane's own query row (q' or S(q)) in registers, broadcast to the key lanes.
        vec4 q_mine[KW4];
        [[unroll]] for (uint d4 = 0u; d4 < KW4; ++d4)
            q_mine[d4] = LOCAL_EXACT ? q_local4[(q_seq * params.n + crow) * KW4 + d4] : q_sketch4[(q_seq * params.n + crow) * R4 + d4];
        const uint team_last = min(block_end, team_begin + TEAM);  // keys past the team's last row never count
        const uint k_base4 = kv_seq * params.n * KW4;
        const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);
        [[dont_unroll]] for (uint j0 = block_begin; j0 < team_last; j0 += KPL * TEAM) {
            // Scores of keys j0 + 8 kk + lane (kk < KPL) against the 8 rows.
            uint kb[KPL];
            float s[KPL][TEAM];
            [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) {
                kb[kk] = k_base4 + min(j0 + kk * TEAM + lane, team_last - 1u) * KW4;
                [[unroll]] for (uint r = 0u; r < TEAM; ++r) s[kk][r] = 0.0;
            }
            [[unroll]] for (uint d4 = 0u; d4 < KW4; ++d4) {
                vec4 kv[KPL];
                [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) kv[kk] = k_local4[kb[kk] + d4];
#define SCORE(r)                                                             \
                {                                                            \
                    const vec4 q = subgroupShuffle(q_mine[d4], r);         \
                    [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) s[kk][r] += dot(q, kv[kk]); \
                }
                FOR_TEAM_ROWS(SCORE)
#undef SCORE
            }
            float w[KPL][TEAM];
            [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) {
                const uint j = j0 + kk * TEAM + lane;
                [[unroll]] for (uint r = 0u; r < TEAM; ++r) {
                    const uint row = team_begin + r;  // valid rows only: row < team_last
                    const float x = LOCAL_EXACT ? weight_power(s[kk][r]) : s[kk][r] * s[kk][r];
                    w[kk][r] = row < team_last && j <= row ? x : 0.0;
                    den_local[r] += w[kk][r];
                }
            }
            // acc[r] += w_rj v_j for the tile's keys; w of key j0 + 8 kk + m comes from lane m.
            [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) {
                if (j0 + kk * TEAM >= team_last) break;  // uniform: no key of this group is visible
#define ADD_VALUES(m)                                                                      \
                {                                                                          \
                    const uint j = min(j0 + kk * TEAM + m, team_last - 1u);                \
                    vec4 vv[C4];                                                           \
                    [[unroll]] for (uint c = 0u; c < C4; ++c)                              \
                        vv[c] = load_values(v_base + j * params.v_strides.token, col4 + c); \
                    [[unroll]] for (uint r = 0u; r < TEAM; ++r) {                          \
                        const float x = subgroupShuffle(w[kk][r], m);                    \
                        [[unroll]] for (uint c = 0u; c < C4; ++c) acc[r][c] += x * vv[c];  \
                    }                                                                      \
                }
                FOR_TEAM_ROWS(ADD_VALUES)
#undef ADD_VALUES
            }
        }
    }

    // ---- normalize and store: lane writes its columns of the team's valid rows ----
#define STORE_ROW(r)                                                                             \
    {                                                                                            \
        const uint row = team_begin + r;                                                         \
        const float den = subgroupShuffle(den_mine, r) + subgroupAdd(den_local[r]);            \
        if (tile * 64u + gl_SubgroupID * TEAM + r < params.block_size && row < params.n) {       \
            const float inv = 1.0 / (1.0 + den);                                                 \
            const uint o_base = tensor_row(params.o_strides, batch, q_head, row);                \
            [[unroll]] for (uint c = 0u; c < C4; ++c)                                            \
                [[unroll]] for (uint e = 0u; e < 4u; ++e) {                                      \
                    const uint d = 4u * (col4 + c) + e;                                          \
                    if (d < VALUE_DIM) o_data[o_base + d] = STORE_ELEM(acc[r][c][e] * inv);      \
                }                                                                                \
        }                                                                                        \
    }
    FOR_TEAM_ROWS(STORE_ROW)
#undef STORE_ROW
}
