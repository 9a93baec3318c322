#version 450
// Polysketch output (docs/MATH.md section 6), the row kernel: the generic output as it was before
// polysketch_output.comp became register tiles, kept because on an NVIDIA H200 (32k tokens,
// H = 16, h = dv = 64, float32) it ran the output in 3.25 ms and the tile kernel in 20.66 ms
// (docs/PERFORMANCE.md, "second GPU run"); the plan takes it for h, dv <= 64 on GPUs
// (PSK_GENERIC_OUTPUT picks either). At h = 128 it spilled (34.3 ms): the tile kernel's case.
// One workgroup owns ROWS consecutive query rows inside one
// block l of one (batch, query head); each invocation owns one row i:
//
//   num_i = phi(q_i)^T Z + local_i,      O_i = num_i[0:dv] / (1 + num_i[dv])
//
//   Z:       CAUSAL: Z_l, the exclusive prefix of the block states (block_scan.comp);
//            full:   the sum of all block states, reduced into block 0 (block_reduce.comp).
//            phi(q_i) is expanded on the fly from S(q_i) with the pair table; Z is staged
//            FEAT_TILE feature rows at a time in shared memory, rows padded to whole vec4s.
//   local_i: CAUSAL only, keys j of block l with j <= i:
//            sketched:    w_ij = <S(q_i), S(k_j)>^2  (= <phi(q_i), phi(k_j)>)
//            LOCAL_EXACT: w_ij = (q'_i . k'_j)^DEGREE with the rows feature_map wrote for the
//                         local part (scaled, own LayerNorm if any).
//
// Performance notes (llvmpipe): every load from shared or storage memory costs about the same
// whatever its width (a per-lane loop), so operands are read as vec4s (4 per load), and S(q) is
// kept transposed in shared memory (sq_tile) instead of a register array indexed by the pair
// table's dynamic indices. RPI rows per invocation multiply the reuse of each loaded vec4; the
// plan picks RPI (see planPolysketch for why 1).
// Per invocation: ceil(F / FEAT_TILE) iterations over Z tiles (the tile itself is unrolled) plus
// at most block_size keys: bounded, whatever n (llvmpipe loop limit, docs/ARCHITECTURE.md).
// Rows: q-side rows [batch * q_heads + head][n][width], k-side [batch * kv_heads + head][n][width].
// ABLATE (timing only, PSK_ABLATE; interface/polysketch_output.h): a part left out, so that a
// GPU's stage times say what each part costs; zero in every plan but a timing's.

#extension GL_EXT_control_flow_attributes : require

#include "self_tensor.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x_id = 0) in;
#include "interface/polysketch_output.h"
PSK_DECLARE_SPECS(PSK_POLYSKETCH_OUTPUT_ROWS_SPEC)
#define PSK_STAGE_ROLLED_SPEC  // STAGE_ROLLED is this kernel's specialization constant (generic.stage_rolled)
#include "staging.glsl"
PSK_DECLARE_BINDINGS(PSK_POLYSKETCH_OUTPUT_BINDINGS)

const uint KEY_WIDTH = LOCAL_EXACT ? HEAD_DIM : SKETCH;

layout(std430, binding = BINDING_Q_SKETCH) readonly buffer QSketch { float q_sketch[]; };
layout(std430, binding = BINDING_K_LOCAL) readonly buffer KLocal { float k_local[]; };  // S(k) rows, or k' rows
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer OBuffer { ELEM o_data[]; };
layout(std430, binding = BINDING_STATES) readonly buffer States { float states[]; };
layout(std430, binding = BINDING_PAIRS) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = BINDING_Q_LOCAL) readonly buffer QLocal { float q_local[]; };  // q' rows (LOCAL_EXACT)

shared vec4 smem4[SMEM_FLOATS / 4u];
const uint ZS4 = Z_STRIDE / 4u;  // Z row in vec4s (dv + 1 padded)
const uint KW4 = (KEY_WIDTH + 3u) / 4u;   // local key row in vec4s
const uint VD4 = (VALUE_DIM + 3u) / 4u;   // local value row in vec4s
shared uint pair_tile[FEAT_TILE];
// S(q) rows as [a][invocation][r] floats (RPI in {1, 2, 4}): with RPI = 4, one vec4 per (a, invocation).
shared vec4 sq_tile[(SKETCH * ROWS * RPI + 3u) / 4u];

float weight_power(float x) {
    float w = x;  // x^DEGREE by repeated squaring (DEGREE is a power of two)
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

void main() {
    const uint block = gl_WorkGroupID.x / params.tiles_per_block;
    const uint tile = gl_WorkGroupID.x % params.tiles_per_block;
    const uint q_head = gl_WorkGroupID.y, batch = gl_WorkGroupID.z;
    const uint kv_head = q_head / params.head_ratio;
    const uint q_seq = batch * params.q_heads + q_head;
    const uint kv_seq = batch * params.kv_heads + kv_head;
    const uint lid = gl_LocalInvocationID.x;

    const uint block_begin = block * params.block_size;
    const uint block_end = min(params.n, block_begin + params.block_size);
    const uint tile_begin = block_begin + tile * ROWS * RPI;
    // Row r of this invocation: tile_begin + lid + r ROWS (adjacent invocations, adjacent rows).
    bool row_valid[RPI];
    uint crow[RPI];
    [[unroll]] for (uint r = 0u; r < RPI; ++r) {
        const uint in_block = tile * ROWS * RPI + lid + r * ROWS;
        row_valid[r] = in_block < params.block_size && block_begin + in_block < params.n;
        crow[r] = row_valid[r] ? block_begin + in_block : block_begin;  // a valid row to read for idle rows
    }

    // S(q) of the invocation's rows, transposed into shared memory so that entry a of all RPI rows
    // is one vec4 (component r = row r): phi(q)_f = coef S_a S_b then costs two loads for all
    // rows, and no register array is indexed dynamically (slow to compile on llvmpipe).
    [[unroll]] for (uint d = 0u; d < SKETCH; ++d) {
        [[unroll]] for (uint r = 0u; r < RPI; ++r) {
            const uint fi = (d * ROWS + lid) * RPI + r;
            sq_tile[fi / 4u][fi % 4u] = q_sketch[(q_seq * params.n + crow[r]) * SKETCH + d];
        }
    }

    float acc[RPI][VALUE_DIM];
    float den[RPI];
    [[unroll]] for (uint r = 0u; r < RPI; ++r) {
        den[r] = 0.0;
        [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) acc[r][d] = 0.0;
    }

    // ---- phi(q_i)^T Z: everything before this block (causal) or everything (full) ----
    if ((ABLATE & 1u) == 0u && (!CAUSAL || block > 0u || params.prefix_first != 0u)) {
        const uint z_base = (kv_seq * params.blocks + (CAUSAL ? block : 0u)) * params.features * Z_STRIDE;
        for (uint f0 = 0u; f0 < params.features; f0 += FEAT_TILE) {
            const uint flen = min(FEAT_TILE, params.features - f0);
            barrier();
            // The whole tile (staging.glsl: a constant count, so no guard on the stores and the loads
            // in flight together), features past flen zero, which nothing reads.
            STAGED_COPY(FEAT_TILE * Z_STRIDE, ROWS, lid, states[z_base + f0 * Z_STRIDE + min(i, flen * Z_STRIDE - 1u)],
                        (ABLATE & 32u) == 0u && i < flen * Z_STRIDE, smem4[(i / Z_STRIDE) * ZS4 + (i % Z_STRIDE) / 4u][(i % Z_STRIDE) % 4u] = v)
            [[unroll]] for (uint it = 0u; it < (FEAT_TILE + ROWS - 1u) / ROWS; ++it) {
                const uint i = it * ROWS + lid;
                if (i < flen) pair_tile[i] = pairs[f0 + i];
            }
            barrier();
            [[dont_unroll]] for (uint k = 0u; k < flen; ++k) {
                const uint entry = pair_tile[k];
                const uint a = pair_first(entry), b = pair_second(entry);
                const float coef = pair_coefficient(entry);
                float p[RPI];
                if ((ABLATE & 16u) != 0u) {
                    [[unroll]] for (uint r = 0u; r < RPI; ++r) p[r] = coef;
                } else if (RPI == 4u) {
                    const vec4 p4 = coef * sq_tile[a * ROWS + lid] * sq_tile[b * ROWS + lid];
                    [[unroll]] for (uint r = 0u; r < RPI; ++r) p[r] = p4[r];
                } else {
                    [[unroll]] for (uint r = 0u; r < RPI; ++r) {
                        const uint fa = (a * ROWS + lid) * RPI + r, fb = (b * ROWS + lid) * RPI + r;
                        p[r] = coef * sq_tile[fa / 4u][fa % 4u] * sq_tile[fb / 4u][fb % 4u];
                    }
                }
                [[unroll]] for (uint d4 = 0u; d4 < ZS4; ++d4) {
                    const vec4 z = smem4[k * ZS4 + d4];  // one load, four operands, RPI rows
                    [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                        const uint d = 4u * d4 + e;
                        [[unroll]] for (uint r = 0u; r < RPI; ++r) {
                            if (d < VALUE_DIM) acc[r][d] += p[r] * z[e];
                            else if (d == VALUE_DIM) den[r] += p[r] * z[e];
                        }
                    }
                }
            }
        }
    }

    // ---- local part: keys of this block up to the row ----
    if (CAUSAL && (ABLATE & 2u) == 0u) {
        vec4 query4[RPI][KW4];
        [[unroll]] for (uint r = 0u; r < RPI; ++r) {
            [[unroll]] for (uint d4 = 0u; d4 < KW4; ++d4) {
                [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                    const uint d = min(4u * d4 + e, KEY_WIDTH - 1u);
                    const float x = LOCAL_EXACT ? q_local[(q_seq * params.n + crow[r]) * HEAD_DIM + d]
                                                : q_sketch[(q_seq * params.n + crow[r]) * SKETCH + min(d, SKETCH - 1u)];  // KEY_WIDTH == SKETCH
                    query4[r][d4][e] = 4u * d4 + e < KEY_WIDTH ? x : 0.0;
                }
            }
        }
        const uint last = min(block_end, tile_begin + ROWS * RPI);  // keys past the tile's last row never count
        const uint k_base = kv_seq * params.n * KEY_WIDTH;
        const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);
        const uint v_off4 = KEY_TILE * KW4;  // values follow the keys in smem4
        // The invocation's last row that exists bounds its key loop; earlier rows mask later keys.
        uint my_last = 0u;
        bool any_valid = false;
        [[unroll]] for (uint r = 0u; r < RPI; ++r) {
            if (row_valid[r]) my_last = crow[r];
            any_valid = any_valid || row_valid[r];
        }
        for (uint tile_start = block_begin; tile_start < last; tile_start += KEY_TILE) {
            const uint tile_len = min(KEY_TILE, last - tile_start);
            barrier();
            // Whole tiles of keys and values (as the Z tile above), rows past tile_len zero.
            STAGED_COPY(KEY_TILE * KW4 * 4u, ROWS, lid,
                        k_local[k_base + (tile_start + min(i / (KW4 * 4u), tile_len - 1u)) * KEY_WIDTH + min(i % (KW4 * 4u), KEY_WIDTH - 1u)],
                        (ABLATE & 64u) == 0u && i / (KW4 * 4u) < tile_len && i % (KW4 * 4u) < KEY_WIDTH, smem4[i / 4u][i % 4u] = v)
            STAGED_COPY(KEY_TILE * VD4 * 4u, ROWS, lid,
                        LOAD_ELEM(v_data[v_base + (tile_start + min(i / (VD4 * 4u), tile_len - 1u)) * params.v_strides.token +
                                         min(i % (VD4 * 4u), VALUE_DIM - 1u)]),
                        (ABLATE & 64u) == 0u && i / (VD4 * 4u) < tile_len && i % (VD4 * 4u) < VALUE_DIM, smem4[v_off4 + i / 4u][i % 4u] = v)
            barrier();
            const uint visible = any_valid && my_last >= tile_start ? min(tile_len, my_last - tile_start + 1u) : 0u;
            for (uint j = 0u; j < visible; ++j) {
                float s[RPI];
                [[unroll]] for (uint r = 0u; r < RPI; ++r) s[r] = 0.0;
                [[unroll]] for (uint d4 = 0u; d4 < KW4; ++d4) {
                    const vec4 kv = smem4[j * KW4 + d4];
                    [[unroll]] for (uint r = 0u; r < RPI; ++r) s[r] += dot(query4[r][d4], kv);
                }
                float w[RPI];
                [[unroll]] for (uint r = 0u; r < RPI; ++r) {
                    const float x = LOCAL_EXACT ? weight_power(s[r]) : s[r] * s[r];
                    w[r] = row_valid[r] && tile_start + j <= crow[r] ? x : 0.0;
                    den[r] += w[r];
                }
                [[unroll]] for (uint d4 = 0u; d4 < VD4; ++d4) {
                    const vec4 v = smem4[v_off4 + j * VD4 + d4];
                    [[unroll]] for (uint e = 0u; e < 4u; ++e)
                        [[unroll]] for (uint r = 0u; r < RPI; ++r)
                            if (4u * d4 + e < VALUE_DIM) acc[r][4u * d4 + e] += w[r] * v[e];
                }
            }
        }
    }

    [[unroll]] for (uint r = 0u; r < RPI; ++r) {
        if (!row_valid[r]) continue;
        const float inv = 1.0 / (1.0 + den[r]);
        const uint o_base = tensor_row(params.o_strides, batch, q_head, crow[r]);
        [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) o_data[o_base + d] = STORE_ELEM(acc[r][d] * inv);
    }
}
