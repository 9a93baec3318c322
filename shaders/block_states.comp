#version 450
// Block states of polysketch (docs/MATH.md section 6): H_l = phi(K_l)^T [V_l | 1] for every block l of
// every (batch, key/value head), a (features) x (VALUE_DIM + 1) float32 matrix per block.
//
// A workgroup computes one TILE_F x TILE_C tile of one H_l. Per step of KEY_TILE keys it stages
// in shared memory the tile's S(k) rows and value columns with coalesced loads (consecutive
// invocations, consecutive floats), then expands the features phi(S(k_j))_f = coef_f S_a S_b of
// the tile from the staged rows (each invocation its own features, their pairs read from the pair
// table once, before the key loop: self_tensor.glsl), so the key loop has no dependent global
// load; each invocation then accumulates FEATS_PER_THREAD x COLS_PER_THREAD (consecutive
// features, consecutive columns) entries, reading 4 operands per load. The ones column (the
// normalizer, column VALUE_DIM) is the plain feature sum, kept by the invocations of column group
// 0 in the first column tile. Keys past the end of a short last block simply do not exist;
// nothing is padded.
//
// ABLATE (timing only, PSK_ABLATE; interface/block_states.h): a part left out, so that a GPU's
// stage times say what each part costs; zero in every plan but a timing's.
//
// Layouts: sketch rows [batch * kv_heads + head][n][SKETCH]; states
// [batch * kv_heads + head][block][feature][Z_STRIDE] (VALUE_DIM values, the normalizer, zero
// padding to a multiple of 4 floats). Per invocation the key loop runs at
// most block_size times (<= 1024) in the expansion and as often in the accumulation (plus one
// iteration per key tile), well inside llvmpipe's loop budget.

#extension GL_EXT_control_flow_attributes : require

#include "self_tensor.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x_id = 0) in;
#include "interface/block_states.h"
PSK_DECLARE_SPECS(PSK_BLOCK_STATES_SPEC)
#define PSK_STAGE_ROLLED_SPEC  // STAGE_ROLLED is this kernel's specialization constant (generic.stage_rolled)
#include "staging.glsl"
PSK_DECLARE_BINDINGS(PSK_BLOCK_STATES_BINDINGS)

const uint TILE_F = FEAT_GROUPS * FEATS_PER_THREAD;
const uint TILE_C = COL_GROUPS * COLS_PER_THREAD;
// Every column tile inside dv (the plans' dv = 64, 128): the state stores need no guard, which a
// compiler not knowing the tile's columns keeps as a branch around each of them (AMD's: 64 per
// invocation).
const bool COLS_WHOLE = VALUE_DIM % TILE_C == 0u;

layout(std430, binding = BINDING_K_SKETCH) readonly buffer KSketch { float k_sketch[]; };
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = BINDING_PAIRS) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = BINDING_STATES) writeonly buffer States { float states[]; };

const uint TILE_F4 = TILE_F / 4u, FPT4 = FEATS_PER_THREAD / 4u, CPT4 = COLS_PER_THREAD / 4u;
// A staged value row: each column group's CPT4 vec4s and one vec4 of padding (CPT4P), so that
// the column groups a quarter-warp reads at once (a 128-bit shared load is served 8 lanes at a
// time) start on different banks: without it, groups 64 bytes apart (CPT4 = 4) met two by two on
// the same banks, every value load twice the cycles (docs/MODEL.md, "Shared-memory loads of 128
// bits: quarter-warp phases").
const uint CPT4P = CPT4 + 1u, TILE_C4P = COL_GROUPS * CPT4P;
// phi(S(k_j)) of the tile's features and the tile's value columns, as vec4s (one vec4 load
// fetches four operands: on llvmpipe every load costs about the same whatever its width).
shared vec4 phi_tile[KEY_TILE * TILE_F4];
shared vec4 v_tile[KEY_TILE * TILE_C4P];
shared float sk_tile[KEY_TILE * SKETCH];  // the tile's S(k) rows

void main() {
    const uint ftile = gl_WorkGroupID.x % params.feature_tiles;
    const uint ctile = gl_WorkGroupID.x / params.feature_tiles;
    const uint block = gl_WorkGroupID.y, seq = gl_WorkGroupID.z;
    const uint batch = seq / params.kv_heads, head = seq % params.kv_heads;
    const uint lid = gl_LocalInvocationID.x;
    const uint cg = lid % COL_GROUPS, fg = lid / COL_GROUPS;
    const uint c0 = ctile * TILE_C;

    // Expansion: invocation lid expands features lid, lid + THREADS, ... of the tile for every key;
    // their pairs (zero coefficient past F) once, here.
    const uint feats_mine = (TILE_F + THREADS - 1u) / THREADS;
    uint pair_of[(TILE_F + THREADS - 1u) / THREADS];
    float coef_of[(TILE_F + THREADS - 1u) / THREADS];
    [[unroll]] for (uint q = 0u; q < feats_mine; ++q) {
        const uint f = ftile * TILE_F + q * THREADS + lid;
        pair_of[q] = f < params.features ? pairs[f] : 0u;
        coef_of[q] = f < params.features ? pair_coefficient(pair_of[q]) : 0.0;
    }

    float acc[FEATS_PER_THREAD][COLS_PER_THREAD];
    float ones[FEATS_PER_THREAD];
    [[unroll]] for (uint k = 0u; k < FEATS_PER_THREAD; ++k) {
        ones[k] = 0.0;
        [[unroll]] for (uint m = 0u; m < COLS_PER_THREAD; ++m) acc[k][m] = 0.0;
    }

    const uint key_begin = block * params.block_size;
    const uint key_end = min(params.n, key_begin + params.block_size);
    const uint sk_base = seq * params.n * SKETCH;
    const uint v_base = tensor_row(params.v_strides, batch, head, 0u);

    for (uint tile_start = key_begin; tile_start < key_end; tile_start += KEY_TILE) {
        const uint tile_len = min(KEY_TILE, key_end - tile_start);
        barrier();  // the previous tile is no longer being read
        // The whole tile (a constant count: no guard on the stores, staging.glsl), rows past the
        // tile's keys zero, which nothing reads.
        STAGED_COPY(KEY_TILE * SKETCH, THREADS, lid, k_sketch[sk_base + (tile_start + min(i / SKETCH, tile_len - 1u)) * SKETCH + i % SKETCH],
                    (ABLATE & 4u) == 0u && i / SKETCH < tile_len, sk_tile[i] = v)
        [[unroll]] for (uint it = 0u; it < (KEY_TILE * TILE_C + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            const uint j = i / TILE_C, cc = i % TILE_C, c = c0 + cc;
            const uint at = j * TILE_C4P * 4u + (cc / COLS_PER_THREAD) * CPT4P * 4u + cc % COLS_PER_THREAD;  // padded row
            // Without branches (staging.glsl): every lane loads a valid element and stores; rows past
            // the tile hold zeros, which nothing reads.
            const float x = LOAD_ELEM(v_data[v_base + (tile_start + min(j, tile_len - 1u)) * params.v_strides.token + min(c, VALUE_DIM - 1u)]);
            v_tile[at / 4u][at % 4u] = (ABLATE & 4u) == 0u && j < tile_len && c < VALUE_DIM ? x : 0.0;
        }
        barrier();
        [[unroll]] for (uint q = 0u; q < feats_mine; ++q) {
            const uint fl = q * THREADS + lid;
            if (fl < TILE_F) {
                const uint a = pair_first(pair_of[q]), b = pair_second(pair_of[q]);
                for (uint j = 0u; j < tile_len; ++j)
                    phi_tile[j * TILE_F4 + fl / 4u][fl % 4u] =
                        (ABLATE & 2u) != 0u ? coef_of[q] : coef_of[q] * sk_tile[j * SKETCH + a] * sk_tile[j * SKETCH + b];
            }
        }
        barrier();
        for (uint j = 0u; j < ((ABLATE & 1u) != 0u ? 0u : tile_len); ++j) {
            float vv[COLS_PER_THREAD];
            [[unroll]] for (uint m4 = 0u; m4 < CPT4; ++m4) {
                const vec4 v = v_tile[j * TILE_C4P + cg * CPT4P + m4];
                [[unroll]] for (uint e = 0u; e < 4u; ++e) vv[4u * m4 + e] = v[e];
            }
            [[unroll]] for (uint k4 = 0u; k4 < FPT4; ++k4) {
                const vec4 p4 = phi_tile[j * TILE_F4 + fg * FPT4 + k4];
                [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                    const uint k = 4u * k4 + e;
                    ones[k] += p4[e];
                    [[unroll]] for (uint m = 0u; m < COLS_PER_THREAD; ++m) acc[k][m] += p4[e] * vv[m];
                }
            }
        }
    }

    const uint row_stride = Z_STRIDE;
    const uint state_base = (seq * params.blocks + block) * params.features * row_stride;
    [[unroll]] for (uint k = 0u; k < FEATS_PER_THREAD; ++k) {
        const uint f = ftile * TILE_F + fg * FEATS_PER_THREAD + k;
        if (f >= params.features) continue;
        const uint row_base = state_base + f * row_stride;
        [[unroll]] for (uint m = 0u; m < COLS_PER_THREAD; ++m) {
            const uint c = c0 + cg * COLS_PER_THREAD + m;
            if (COLS_WHOLE || c < VALUE_DIM) states[row_base + c] = acc[k][m];
        }
        if (ctile == 0u && cg == 0u) {
            states[row_base + VALUE_DIM] = ones[k];
            for (uint c = VALUE_DIM + 1u; c < Z_STRIDE; ++c) states[row_base + c] = 0.0;  // padding
        }
    }
}
