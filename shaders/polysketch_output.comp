#version 450
// Polysketch output (docs/MATH.md section 6). One workgroup owns ROWS consecutive query rows inside one
// block l of one (batch, query head) and every value column:
//
//   num_i = phi(q_i)^T Z + local_i,      O_i = num_i[0:dv] / (1 + num_i[dv])
//
//   Z:       CAUSAL: Z_l, the exclusive prefix of the block states (block_scan.comp);
//            full:   the sum of all block states, reduced into block 0 (block_reduce.comp).
//   local_i: CAUSAL only, keys j of block l with j <= i:
//            sketched:    w_ij = <S(q_i), S(k_j)>^2  (= <phi(q_i), phi(k_j)>)
//            LOCAL_EXACT: w_ij = (q'_i . k'_j)^DEGREE with the rows feature_map wrote for the
//                         local part (scaled, own LayerNorm if any).
//
// Work split (a register tile, so that each shared load feeds several multiply-adds and no
// invocation holds a whole row of dv accumulators): invocation (r4, cg), lid = cg + COL_GROUPS r4,
// owns the 4 rows 4 r4 .. 4 r4 + 3 of the tile and COL_VEC4 vec4 columns cg + COL_GROUPS t of the
// value columns (consecutive invocations, consecutive vec4s: conflict-free shared reads). Live per
// invocation: acc[4 t + e] vec4s (16 COL_VEC4 floats), the 4 rows' normalizers, one feature's
// (or key's) operands. Every invocation sums the normalizer column dv for its rows itself (4
// multiply-adds per feature beside 16 COL_VEC4), so no invocation waits on another's.
//
//   phi(q)^T Z: the tile's S(q) rows (contiguous in memory: consecutive invocations load
//     consecutive floats) are staged transposed, sq[a][row], so that entry a of an invocation's 4
//     rows is one vec4: phi_f = coef S_a S_b costs two vec4 loads for 4 rows. Z is staged FEAT_TILE
//     feature rows at a time (coalesced). Per feature: 2 + COL_VEC4 vec4 loads and a scalar, for
//     16 COL_VEC4 + 4 multiply-adds.
//   local part, KEY_TILE = COL_GROUPS KPI keys at a time: the scores q . k of the tile's rows and
//     keys are a small product over the key width, staged WIDTH_CHUNK columns at a time (q rows
//     transposed as above, k rows transposed); invocation (r4, cg) computes its 4 rows x KPI keys
//     cg KPI .. cg KPI + KPI - 1, writes the masked weights w[key][row] to shared memory, and
//     after a barrier every invocation accumulates its rows x columns from w and the staged V tile.
//
// Register tiles: acc and the scores s are sized by literal maxima (MAX_COL_VEC4, MAX_KPI: the
// planner's bounds), flat (acc[4 t + e]), and walked by single loops over those literals, each step
// guarded by the specialization constant (t < COL_VEC4, m < KPI), so that the build's optimizer
// (glslc -O, which unrolls the innermost loop of a nest only) unrolls every loop that indexes them
// and every index is a constant: the arrays become registers before the driver sees them
// (shader_registry_test checks that no function-scope array is left). Sized and walked by the
// constants themselves, in nests, the loops reached NVIDIA's driver rolled and it indexed acc
// dynamically: 114 registers and 272 bytes of local memory at h = 128 on an H200, and the same
// kernel frozen by spirv-opt (constants made literals, loops unrolled, arrays split) ran 0.26x the
// time at h = 64 (21.16 -> 5.42 ms at 32k: docs/PERFORMANCE.md, the fourth run). The guards fold
// away once the driver specializes.
//
// Rows of the transposed tiles are ROWS + 4 floats apart (the staging stores' bank conflicts).
// Loops: ceil(F / FEAT_TILE) tiles and F features, at most ceil(block_size / KEY_TILE) key tiles
// of ceil(key width / WIDTH_CHUNK) chunks: bounded whatever n (llvmpipe's loop limit,
// docs/ARCHITECTURE.md).
// Rows: q-side rows [batch * q_heads + head][n][width], k-side [batch * kv_heads + head][n][width].
// ABLATE (timing only, PSK_ABLATE; interface/polysketch_output.h): a part left out, so that a
// GPU's stage times say what each part costs; zero in every plan but a timing's.

#extension GL_EXT_control_flow_attributes : require

#include "self_tensor.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x_id = 0) in;
#include "interface/polysketch_output.h"
PSK_DECLARE_SPECS(PSK_POLYSKETCH_OUTPUT_SPEC)
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

const uint RS4 = (ROWS + 4u) / 4u;           // a transposed tile's row (one entry of every query row), in vec4s
const uint RS = 4u * RS4;
const uint ZS4 = Z_STRIDE / 4u;
const uint SLICE4 = COL_GROUPS * COL_VEC4;  // vec4 columns the workgroup's slices cover (>= ceil(dv / 4))
const uint ZW4 = ZS4 > SLICE4 ? ZS4 : SLICE4;        // a staged Z row, in vec4s (zero past Z_STRIDE)
const uint KPI = KEY_TILE / COL_GROUPS;     // keys per invocation in the scores (KEY_TILE is a multiple of 4 when KPI is)
// Literal bounds of the register tiles (see "Register tiles" above): planGenericOutput keeps
// COL_VEC4 <= 4 and KPI <= 4.
const uint MAX_COL_VEC4 = 4u, MAX_KPI = 4u;

// One pool, in floats; the phi(q)^T Z phase and the local phase use it in turn.
const uint SQ_OFF = 0u;                            // S(q)^T: SKETCH x RS
const uint Z_OFF = SKETCH * RS;                    // Z tile: FEAT_TILE x 4 ZW4
const uint QC_OFF = 0u;                            // q chunk^T: WIDTH_CHUNK x RS
const uint KC_OFF = WIDTH_CHUNK * RS;              // k chunk^T: WIDTH_CHUNK x KEY_TILE
const uint W_OFF = KC_OFF + WIDTH_CHUNK * KEY_TILE;  // weights: KEY_TILE x RS
const uint V_OFF = W_OFF + KEY_TILE * RS;          // V tile: KEY_TILE x 4 SLICE4
shared vec4 pool[SMEM_FLOATS / 4u];
shared uint pair_tile[FEAT_TILE];
#define POOL(i) pool[(i) >> 2][(i) & 3u]

float weight_power(float x) {
    // x^DEGREE (2, 4 or 8: attention_config.cpp) without a loop, so that the loop over the
    // register tile that calls it is an innermost one (see "Register tiles").
    float w = x * x;
    if (DEGREE >= 4u) w *= w;
    if (DEGREE >= 8u) w *= w;
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
    const uint cg = lid % COL_GROUPS, r4 = lid / COL_GROUPS;

    const uint block_begin = block * params.block_size;
    const uint block_end = min(params.n, block_begin + params.block_size);
    const uint tile_begin = block_begin + tile * ROWS;
    if (tile_begin >= block_end) return;  // the whole workgroup: a short last block
    const uint tile_rows = min(ROWS, block_end - tile_begin);
    const uint q_row0 = q_seq * params.n + tile_begin;  // the tile's first q-side row

    vec4 acc[4u * MAX_COL_VEC4];  // acc[4 t + e], t < COL_VEC4: row 4 r4 + e, columns 4 (cg + COL_GROUPS t) .. + 3
    vec4 den = vec4(0.0);         // component e: row 4 r4 + e
    [[unroll]] for (uint i = 0u; i < 4u * MAX_COL_VEC4; ++i) acc[i] = vec4(0.0);
    vec4 cols[MAX_COL_VEC4];      // one staged row's vec4s of the invocation's columns (Z, then V)

    // ---- phi(q_i)^T Z: everything before this block (causal) or everything (full) ----
    if ((ABLATE & 1u) == 0u && (!CAUSAL || block > 0u || params.prefix_first != 0u)) {
        STAGED_COPY(ROWS * SKETCH, THREADS, lid, q_sketch[(q_row0 + min(i / SKETCH, tile_rows - 1u)) * SKETCH + i % SKETCH],
                    i / SKETCH < tile_rows, POOL(SQ_OFF + (i % SKETCH) * RS + i / SKETCH) = v)
        const uint z_base = (kv_seq * params.blocks + (CAUSAL ? block : 0u)) * params.features * Z_STRIDE;
        for (uint f0 = 0u; f0 < params.features; f0 += FEAT_TILE) {
            const uint flen = min(FEAT_TILE, params.features - f0);
            barrier();
            STAGED_COPY(FEAT_TILE * ZW4 * 4u, THREADS, lid,
                        states[z_base + (f0 + min(i / (ZW4 * 4u), flen - 1u)) * Z_STRIDE + min(i % (ZW4 * 4u), Z_STRIDE - 1u)],
                        (ABLATE & 32u) == 0u && i / (ZW4 * 4u) < flen && i % (ZW4 * 4u) < Z_STRIDE, POOL(Z_OFF + i) = v)
            for (uint i = lid; i < flen; i += THREADS) pair_tile[i] = pairs[f0 + i];
            barrier();
            for (uint k = 0u; k < flen; ++k) {
                const uint entry = pair_tile[k];
                const vec4 phi = (ABLATE & 16u) != 0u ? vec4(pair_coefficient(entry))
                                                      : pair_coefficient(entry) * pool[SQ_OFF / 4u + pair_first(entry) * RS4 + r4] *
                                                            pool[SQ_OFF / 4u + pair_second(entry) * RS4 + r4];
                den += phi * POOL(Z_OFF + k * ZW4 * 4u + VALUE_DIM);
                [[unroll]] for (uint t = 0u; t < MAX_COL_VEC4; ++t)
                    if (t < COL_VEC4) cols[t] = pool[Z_OFF / 4u + k * ZW4 + cg + COL_GROUPS * t];
                [[unroll]] for (uint i = 0u; i < 4u * MAX_COL_VEC4; ++i)
                    if (i / 4u < COL_VEC4) acc[i] += phi[i % 4u] * cols[i / 4u];
            }
        }
    }

    // ---- local part: keys of this block up to the tile's last row ----
    if (CAUSAL && (ABLATE & 2u) == 0u) {
        const uint last = min(block_end, tile_begin + ROWS);  // keys past the tile's last row never count
        const uint k_row0 = kv_seq * params.n;
        const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);
        for (uint tile_start = block_begin; tile_start < last; tile_start += KEY_TILE) {
            const uint tile_len = min(KEY_TILE, last - tile_start);
            vec4 s[MAX_KPI];  // s[m][e], m < KPI: row 4 r4 + e, key cg KPI + m
            [[unroll]] for (uint m = 0u; m < MAX_KPI; ++m) s[m] = vec4(0.0);
            for (uint d0 = 0u; d0 < KEY_WIDTH; d0 += WIDTH_CHUNK) {
                const uint dlen = min(WIDTH_CHUNK, KEY_WIDTH - d0);
                barrier();
                // q rows (q' or S(q)) and k rows of the chunk, transposed; i = row WIDTH_CHUNK + d.
                STAGED_COPY(ROWS * WIDTH_CHUNK, THREADS, lid,
                            LOCAL_EXACT ? q_local[(q_row0 + min(i / WIDTH_CHUNK, tile_rows - 1u)) * KEY_WIDTH + d0 + min(i % WIDTH_CHUNK, dlen - 1u)]
                                        : q_sketch[(q_row0 + min(i / WIDTH_CHUNK, tile_rows - 1u)) * KEY_WIDTH + d0 + min(i % WIDTH_CHUNK, dlen - 1u)],
                            (ABLATE & 64u) == 0u && i / WIDTH_CHUNK < tile_rows && i % WIDTH_CHUNK < dlen,
                            POOL(QC_OFF + (i % WIDTH_CHUNK) * RS + i / WIDTH_CHUNK) = v)
                STAGED_COPY(KEY_TILE * WIDTH_CHUNK, THREADS, lid,
                            k_local[(k_row0 + tile_start + min(i / WIDTH_CHUNK, tile_len - 1u)) * KEY_WIDTH + d0 + min(i % WIDTH_CHUNK, dlen - 1u)],
                            (ABLATE & 64u) == 0u && i / WIDTH_CHUNK < tile_len && i % WIDTH_CHUNK < dlen,
                            POOL(KC_OFF + (i % WIDTH_CHUNK) * KEY_TILE + i / WIDTH_CHUNK) = v)
                if (d0 == 0u) {
                    STAGED_COPY(KEY_TILE * SLICE4 * 4u, THREADS, lid,
                                LOAD_ELEM(v_data[v_base + (tile_start + min(i / (SLICE4 * 4u), tile_len - 1u)) * params.v_strides.token +
                                                 min(i % (SLICE4 * 4u), VALUE_DIM - 1u)]),
                                (ABLATE & 64u) == 0u && i / (SLICE4 * 4u) < tile_len && i % (SLICE4 * 4u) < VALUE_DIM,
                                POOL(V_OFF + i) = v)
                }
                barrier();
                for (uint d = 0u; d < WIDTH_CHUNK; ++d) {  // zero past dlen
                    const vec4 q = pool[QC_OFF / 4u + d * RS4 + r4];
                    if (KPI % 4u == 0u) {  // KPI = MAX_KPI = 4: the invocation's keys as one vec4
                        const vec4 k4 = pool[(KC_OFF + d * KEY_TILE + cg * KPI) / 4u];
                        [[unroll]] for (uint m = 0u; m < MAX_KPI; ++m) s[m] += q * k4[m];
                    } else {
                        [[unroll]] for (uint m = 0u; m < MAX_KPI; ++m)
                            if (m < KPI) s[m] += q * POOL(KC_OFF + d * KEY_TILE + cg * KPI + m);
                    }
                }
            }
            // Weights of the invocation's rows and keys, masked (rows of the tile, keys of the tile, key <= row).
            float wv[4u * MAX_KPI];  // wv[4 m + e]: row 4 r4 + e, key cg KPI + m
            [[unroll]] for (uint i = 0u; i < 4u * MAX_KPI; ++i) {
                const uint m = i / 4u, e = i % 4u, j = cg * KPI + m, row = 4u * r4 + e;
                const float x = LOCAL_EXACT ? weight_power(s[m][e]) : s[m][e] * s[m][e];
                wv[i] = m < KPI && row < tile_rows && j < tile_len && tile_start + j <= tile_begin + row ? x : 0.0;
            }
            [[unroll]] for (uint m = 0u; m < MAX_KPI; ++m)
                if (m < KPI) pool[W_OFF / 4u + (cg * KPI + m) * RS4 + r4] = vec4(wv[4u * m], wv[4u * m + 1u], wv[4u * m + 2u], wv[4u * m + 3u]);
            barrier();
            for (uint j = 0u; j < tile_len; ++j) {
                const vec4 w = pool[W_OFF / 4u + j * RS4 + r4];
                den += w;
                [[unroll]] for (uint t = 0u; t < MAX_COL_VEC4; ++t)
                    if (t < COL_VEC4) cols[t] = pool[V_OFF / 4u + j * SLICE4 + cg + COL_GROUPS * t];
                [[unroll]] for (uint i = 0u; i < 4u * MAX_COL_VEC4; ++i)
                    if (i / 4u < COL_VEC4) acc[i] += w[i % 4u] * cols[i / 4u];
            }
        }
    }

    const vec4 inv = 1.0 / (1.0 + den);
    // One loop over acc's elements (acc[i][x], i = 4 t + e): unrolled, constant indices.
    [[unroll]] for (uint k = 0u; k < 16u * MAX_COL_VEC4; ++k) {
        const uint i = k / 4u, x = k % 4u, t = i / 4u, e = i % 4u;
        const uint row = 4u * r4 + e, col = 4u * (cg + COL_GROUPS * t) + x;
        if (t < COL_VEC4 && row < tile_rows && col < VALUE_DIM)
            o_data[tensor_row(params.o_strides, batch, q_head, tile_begin + row) + col] = STORE_ELEM(acc[i][x] * inv[e]);
    }
}
