#version 450
// Polysketch output (docs/MATH.md section 6), lane-team variant for CPU Vulkan drivers (team_kernels.hpp
// says why). Same result as polysketch_output.comp:
//
//   num_i = phi(q_i)^T Z + local_i,      O_i = num_i[0:dv] / (1 + num_i[dv])
//
// A workgroup is 8 teams (subgroups) of 8 lanes and owns 128 consecutive query rows of one block;
// team t owns the ROWS = 16 rows row0 + 16 t + r, r = 0..15. Lane l of a team:
//   - owns rows row0 + 16 t + l + 8 s (slot s = 0, 1) for everything row-wise (their S(q) or q'
//     rows, their normalizers), and shares row values with the team by subgroupShuffle from a
//     constant lane;
//   - owns value columns [4 C4 l, 4 C4 (l + 1)) of all 16 rows: acc[r][c] (16 x C4 vec4s).
// No shared memory and no barriers: each lane only loads operands no other lane of its team loads
// (its own Z columns, its own keys and value columns), so every vec4 loaded feeds 16 rows. 16
// rows rather than 8: on llvmpipe a load is a loop over the 8 lanes and costs far more than the
// 16 x C4 multiply-adds it feeds (a 4096 x 528 x 64 product: 18-21 GFLOP/s with 8 rows per team,
// 28-31 with 16).
//
// phi(q)^T Z: features are visited as (a, b) with b in aligned groups of 4 (one vec4 of the
// lane's S(q) row), coefficient 0 where b < a; feature index f(a, a) = a, f(a, b > a) =
// R + a R - a (a + 1) / 2 + (b - a - 1) (the pair table's order, self_tensor.glsl). The
// normalizer column of Z is read by lane l for feature l % 4 of the group and shared by broadcast.
//
// Local part (CAUSAL): tiles of 8 KPL keys; lane l scores keys j0 + 8 kk + l (kk < KPL) against the 16
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

#include "u64_pairs.glsl"  // first: it enables 64-bit integer types
#include "self_tensor.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x = 64) in;
#include "interface/polysketch_output.h"
PSK_DECLARE_SPECS(PSK_POLYSKETCH_OUTPUT_TEAM_SPEC)
PSK_DECLARE_BINDINGS(PSK_POLYSKETCH_OUTPUT_BINDINGS)

const uint TEAM = 8u;           // lanes per team
const uint RPL = 2u;            // rows per lane (slots)
const uint ROWS = TEAM * RPL;   // rows per team
const uint GROUP_ROWS = 8u * ROWS;  // rows per workgroup (8 teams)
const uint KPL = 1u;  // keys per lane in a local tile (8 KPL keys): 1 measured faster than 2 or 4 on llvmpipe (fewer live registers)
const uint KEY_WIDTH = LOCAL_EXACT ? HEAD_DIM : SKETCH;
const uint KW4 = KEY_WIDTH / 4u;
const uint R4 = SKETCH / 4u;
const uint ZS4 = Z_STRIDE / 4u;
// Operands in pairs of vec4s, one u64vec4 load each: on llvmpipe a load is a loop over the 8
// lanes whose cost hardly depends on its width, and 32 bytes is the widest a load can be.
const bool Z_PAIRS = C4 % 2u == 0u && Z_STRIDE % 8u == 0u;
const bool K_PAIRS = KW4 % 2u == 0u;
const uint K_STEP = K_PAIRS ? 2u : 1u;

layout(std430, binding = BINDING_Q_SKETCH) readonly buffer QSketch { vec4 q_sketch4[]; };
layout(std430, binding = BINDING_K_LOCAL) readonly buffer KLocal { vec4 k_local4[]; };  // S(k) rows, or k' rows
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer OBuffer { ELEM o_data[]; };
layout(std430, binding = BINDING_STATES) readonly buffer States { vec4 states4[]; };
layout(std430, binding = BINDING_STATES) readonly buffer StatesScalar { float states[]; };
layout(std430, binding = BINDING_Q_LOCAL) readonly buffer QLocal { vec4 q_local4[]; };  // q' rows (LOCAL_EXACT)
// The same buffers 8 floats at a time.
layout(std430, binding = BINDING_K_LOCAL) readonly buffer KLocal8 { u64vec4 k_local8[]; };
layout(std430, binding = BINDING_STATES) readonly buffer States8 { u64vec4 states8[]; };
#if defined(DATA_F32)
layout(std430, binding = BINDING_V) readonly buffer VBuffer4 { vec4 v_data4[]; };
layout(std430, binding = BINDING_V) readonly buffer VBuffer8 { u64vec4 v_data8[]; };
#endif

float weight_power(float x) {
    float w = x;  // x^DEGREE by repeated squaring (DEGREE is a power of two)
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

// The lane's value columns, vec4s [col4, col4 + C4), of the key row starting at element
// `row_offset`, loaded as V_LOAD says. Columns past dv read 0, or (pairs) the row's last pair;
// they are never stored.
void load_value_columns(uint row_offset, uint col4, out vec4 vv[C4]) {
#if defined(DATA_F32)
    if (V_LOAD == 2u) {
        [[unroll]] for (uint c = 0u; c < C4; c += 2u) {
            const u64vec4 u = v_data8[row_offset / 8u + min((col4 + c) / 2u, VALUE_DIM / 8u - 1u)];
            vv[c] = low4(u);
            vv[c + 1u] = high4(u);
        }
        return;
    }
#endif
    [[unroll]] for (uint c = 0u; c < C4; ++c) {
        const uint d = 4u * (col4 + c);
        if (d >= VALUE_DIM) {
            vv[c] = vec4(0.0);
            continue;
        }
#if defined(DATA_F32)
        if (V_LOAD == 1u) {
            vv[c] = v_data4[(row_offset + d) / 4u];
            continue;
        }
#endif
        vv[c] = vec4(LOAD_ELEM(v_data[row_offset + d]), LOAD_ELEM(v_data[row_offset + d + 1u]),
                     LOAD_ELEM(v_data[row_offset + d + 2u]), LOAD_ELEM(v_data[row_offset + d + 3u]));
    }
}

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
    const uint team_offset = tile * GROUP_ROWS + gl_SubgroupID * ROWS;  // first row of the team, in the block
    const uint team_begin = block_begin + team_offset;
    // A team whose rows are all past the block or the sequence has nothing to write (uniform
    // across the subgroup; the kernel has no barriers).
    if (team_offset >= params.block_size || team_begin >= params.n) return;
    const uint team_last = min(block_end, team_begin + ROWS);  // one past the team's last valid row
    const uint col4 = lane * C4;                               // the lane's first value vec4

    // The lane's rows: slot s is team row lane + 8 s; rows past the end read row block_begin.
    uint crow[RPL];
    [[unroll]] for (uint s = 0u; s < RPL; ++s) {
        const uint row = team_begin + lane + TEAM * s;
        crow[s] = row < team_last ? row : block_begin;
    }

    vec4 acc[ROWS][C4];
    [[unroll]] for (uint r = 0u; r < ROWS; ++r)
        [[unroll]] for (uint c = 0u; c < C4; ++c) acc[r][c] = vec4(0.0);
    float den_mine[RPL];  // inter-block normalizer of the lane's own rows
    [[unroll]] for (uint s = 0u; s < RPL; ++s) den_mine[s] = 0.0;

    // ---- phi(q_i)^T Z ----
    if (!CAUSAL || block > 0u || params.prefix_first != 0u) {
        const uint z_row0 = (kv_seq * params.blocks + (CAUSAL ? block : 0u)) * params.features;  // in rows
        // The lane's S(q) rows in registers, read back by the loop indices a and b4 through
        // constant-index select chains: cheaper on llvmpipe than reloading them (a load is a loop
        // over the lanes) and than dynamic register indexing.
        vec4 sq[RPL][R4];
        [[unroll]] for (uint s = 0u; s < RPL; ++s)
            [[unroll]] for (uint i = 0u; i < R4; ++i) sq[s][i] = q_sketch4[(q_seq * params.n + crow[s]) * R4 + i];
        [[dont_unroll]] for (uint a = 0u; a < SKETCH; ++a) {
            float sa[RPL];
            [[unroll]] for (uint s = 0u; s < RPL; ++s) {
                vec4 t = sq[s][0];
                [[unroll]] for (uint i = 1u; i < R4; ++i) t = a / 4u == i ? sq[s][i] : t;
                const uint e = a % 4u;
                sa[s] = e == 0u ? t.x : e == 1u ? t.y : e == 2u ? t.z : t.w;
            }
            const uint f_pairs = SKETCH + a * SKETCH - a * (a + 1u) / 2u;  // f(a, a + 1)
            [[dont_unroll]] for (uint b4 = a / 4u; b4 < R4; ++b4) {
                vec4 sb[RPL];
                [[unroll]] for (uint s = 0u; s < RPL; ++s) {
                    sb[s] = sq[s][0];
                    [[unroll]] for (uint i = 1u; i < R4; ++i) sb[s] = b4 == i ? sq[s][i] : sb[s];
                }
                // The normalizer column of the group's 4 features: lane l loads that of feature
                // e = l % 4 (one scalar load per lane instead of four), the group shares it below.
                const uint bl = 4u * b4 + (lane & 3u);
                const float zden_mine = states[(z_row0 + (bl <= a ? a : f_pairs + (bl - a - 1u))) * Z_STRIDE + VALUE_DIM];
                // The group's 4 features: their phi values (p) and the lane's Z columns (zc),
                // then every accumulator takes its 4 multiply-adds in a row (it is loaded and
                // stored once per group where it does not fit in registers).
                float p[4][RPL];
                vec4 zc[4][C4];
                [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                    const uint b = 4u * b4 + e;
                    const float coef = b < a ? 0.0 : (b == a ? 1.0 : SQRT2);
                    const uint f = b <= a ? a : f_pairs + (b - a - 1u);
                    const float zden = subgroupShuffle(zden_mine, e);
                    [[unroll]] for (uint s = 0u; s < RPL; ++s) {
                        p[e][s] = coef * sa[s] * sb[s][e];
                        den_mine[s] += p[e][s] * zden;
                    }
                    if (Z_PAIRS) {
                        // The lane's columns as C4 / 2 pairs; a pair past the row reads the row's
                        // last pair instead (columns >= VALUE_DIM are never stored).
                        const uint z8 = (z_row0 + f) * (Z_STRIDE / 8u);
                        [[unroll]] for (uint c = 0u; c < C4; c += 2u) {
                            const u64vec4 u = states8[z8 + min((col4 + c) / 2u, Z_STRIDE / 8u - 1u)];
                            zc[e][c] = low4(u);
                            zc[e][c + 1u] = high4(u);
                        }
                    } else {
                        const uint z = (z_row0 + f) * ZS4;
                        [[unroll]] for (uint c = 0u; c < C4; ++c) zc[e][c] = col4 + c < ZS4 ? states4[z + col4 + c] : vec4(0.0);
                    }
                }
                [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                    vec4 x;  // the row's phi values of the 4 features
                    [[unroll]] for (uint e = 0u; e < 4u; ++e) x[e] = subgroupShuffle(p[e][r / TEAM], r % TEAM);
                    [[unroll]] for (uint c = 0u; c < C4; ++c)
                        acc[r][c] += x[0] * zc[0][c] + x[1] * zc[1][c] + x[2] * zc[2][c] + x[3] * zc[3][c];
                }
            }
        }
    }

    // ---- local part: keys of this block up to each row ----
    float den_local[ROWS];  // per-lane partial sums over the lane's keys, one per team row
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) den_local[r] = 0.0;
    if (CAUSAL) {
        // The lane's own query rows (q' or S(q)) in registers, shuffled to the key lanes.
        vec4 q_mine[RPL][KW4];
        [[unroll]] for (uint s = 0u; s < RPL; ++s)
            [[unroll]] for (uint d4 = 0u; d4 < KW4; ++d4)
                q_mine[s][d4] = LOCAL_EXACT ? q_local4[(q_seq * params.n + crow[s]) * KW4 + d4]
                                            : q_sketch4[(q_seq * params.n + crow[s]) * R4 + d4];
        const uint k_base4 = kv_seq * params.n * KW4;
        const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);
        [[dont_unroll]] for (uint j0 = block_begin; j0 < team_last; j0 += KPL * TEAM) {
            // Scores of keys j0 + 8 kk + lane (kk < KPL) against the 16 rows.
            uint kb[KPL];
            float sc[KPL][ROWS];
            [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) {
                kb[kk] = k_base4 + min(j0 + kk * TEAM + lane, team_last - 1u) * KW4;
                [[unroll]] for (uint r = 0u; r < ROWS; ++r) sc[kk][r] = 0.0;
            }
            [[unroll]] for (uint d4 = 0u; d4 < KW4; d4 += K_STEP) {
                vec4 kv[KPL][2];
                [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) {
                    if (K_PAIRS) {
                        const u64vec4 u = k_local8[(kb[kk] + d4) / 2u];  // rows of KW4 (even) vec4s
                        kv[kk][0] = low4(u);
                        kv[kk][1] = high4(u);
                    } else {
                        kv[kk][0] = k_local4[kb[kk] + d4];
                    }
                }
                [[unroll]] for (uint h = 0u; h < K_STEP; ++h)
                    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                        const vec4 q = subgroupShuffle(q_mine[r / TEAM][d4 + h], r % TEAM);
                        [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) sc[kk][r] += dot(q, kv[kk][h]);
                    }
            }
            float w[KPL][ROWS];
            [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) {
                const uint j = j0 + kk * TEAM + lane;
                [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                    const uint row = team_begin + r;
                    const float x = LOCAL_EXACT ? weight_power(sc[kk][r]) : sc[kk][r] * sc[kk][r];
                    w[kk][r] = row < team_last && j <= row ? x : 0.0;
                    den_local[r] += w[kk][r];
                }
            }
            // acc[r] += w_rj v_j for the tile's keys; w of key j0 + 8 kk + m comes from lane m.
            [[unroll]] for (uint kk = 0u; kk < KPL; ++kk) {
                if (j0 + kk * TEAM >= team_last) break;  // uniform: no key of this group is visible
                [[unroll]] for (uint m = 0u; m < TEAM; ++m) {
                    const uint j = min(j0 + kk * TEAM + m, team_last - 1u);
                    vec4 vv[C4];
                    load_value_columns(v_base + j * params.v_strides.token, col4, vv);
                    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                        const float x = subgroupShuffle(w[kk][r], m);
                        [[unroll]] for (uint c = 0u; c < C4; ++c) acc[r][c] += x * vv[c];
                    }
                }
            }
        }
    }

    // ---- normalize and store: lane writes its columns of the team's valid rows ----
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        const uint row = team_begin + r;
        const float den = subgroupShuffle(den_mine[r / TEAM], r % TEAM) + subgroupAdd(den_local[r]);
        if (row < team_last) {
            const float inv = 1.0 / (1.0 + den);
            const uint o_base = tensor_row(params.o_strides, batch, q_head, row);
            [[unroll]] for (uint c = 0u; c < C4; ++c)
                [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                    const uint d = 4u * (col4 + c) + e;
                    if (d < VALUE_DIM) o_data[o_base + d] = STORE_ELEM(acc[r][c][e] * inv);
                }
        }
    }
}
