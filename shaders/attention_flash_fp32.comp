#version 450
// Softmax and exact polynomial attention (docs/MATH.md section 2) on the FP32 units in the
// FlashAttention-2 arrangement, register-tiled: the baseline kernel of float32 storage and of
// devices without cooperative matrices (any storage type; arithmetic in float32). Same bindings,
// push constants (AttentionTiledPush) and key chunks as attention_tiled.comp; the per-row state
// between chunks is this kernel's own (m, l, o, m this kernel's reference, below).
//
// A workgroup owns ROWS query rows of one (batch, query head) and walks the keys in tiles of
// KEY_TILE. Its THREADS = (ROWS / R) * KEY_GROUPS invocations (R = ROWS_PER_INVOCATION, 4 or 8)
// form RG = ROWS / R row groups of KEY_GROUPS; invocation (rg, g) owns the R rows rg + i RG
// (i < R), and
//  - of the scores, its R rows x the KPI = KEY_TILE / KEY_GROUPS keys g + j KEY_GROUPS of a tile
//    (R x KPI float32 accumulators: per vec4 of h, R q and KPI k vec4 loads feed 4 R KPI
//    multiply-adds);
//  - of the output, its R rows x the vec4 columns g + c KEY_GROUPS of dv (R C4 vec4 accumulators
//    held across the tiles: per key, R/4 P vec4 and C4 V vec4 loads feed 4 R C4 multiply-adds).
// The larger the register tile, the more multiply-adds per byte through the shared-memory data path
// (docs/MODEL.md, "The FP32 FlashAttention-2 baseline"); R = 8 halves the Q and P loads per
// multiply-add of R = 4 and needs twice the registers.
// Interleaving rows and keys by the group counts keeps a warp's shared-memory loads on distinct
// banks: the K rows are h + 4 floats apart, so the KEY_GROUPS lanes of a row group read K rows
// whose vec4s start 4 banks apart; the row groups' Q rows likewise.
//
// Per workgroup: Q (scaled) is staged once. Per key tile (with a causal mask only the tiles up to
// the workgroup's last row):
//   1. K staged (rows h + 4 floats apart, zero past the chunk's keys and past h); barrier.
//   2. Scores from registers and shared memory; masked ones (keys past the chunk; causal: key >
//      q_pos + row) are -inf (softmax) or weigh 0 (polynomial).
//   3. Softmax: each invocation's per-row maximum to shared memory; barrier; the row's new
//      reference m = max(m, the KEY_GROUPS maxima), the accumulators and the invocation's part of
//      the denominator l rescaled by e^(m_old - m), the weights e^(s - m). Polynomial: w = s^p.
//   4. V staged where K was (K is no longer read), the weights P to shared memory (per key and row
//      group, R/4 vec4s: its R rows); barrier.
//   5. O += P V.
// Split keys (params.splits > 1: short query blocks against a long KV cache, the flash-decoding
// arrangement): the z workgroups are batch x split, split s walks its own keys and stores its rows'
// state (m, l, O) in its own region; attention_combine.comp merges the splits into the output.
// After the last tile: the invocations' parts of l summed through shared memory, then O / l
// (softmax) or O / (1 + l) (polynomial), or the state (m, l, O) for the next key chunk
// (FLAG_STORE_STATE). m starts at EMPTY, finite, so that a row that has seen no key yet rescales by
// e^0 = 1 and weighs masked scores e^(-inf) = 0, never NaN.
//
// Loops: only the key-tile loop is a loop; every loop with a trip count known at pipeline creation
// is unrolled (llvmpipe's per-invocation iteration limit; attention_tiled.comp's note).

#extension GL_EXT_control_flow_attributes : require

#include "staging.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x_id = 0) in;
#include "interface/attention_flash_fp32.h"
PSK_DECLARE_SPECS(PSK_ATTENTION_FLASH_FP32_SPEC)
PSK_DECLARE_BINDINGS(PSK_ATTENTION_TILED_BINDINGS)

layout(std430, binding = BINDING_Q) readonly buffer QBuffer { ELEM q_data[]; };
// KV_FLOAT32 (the softmax_cache variant): k and v are a decode state's float32 KV cache whatever
// the storage type of q and the output (a forward continuing the cache at q_pos > 0).
#if defined(KV_FLOAT32)
#define KV_ELEM float
#define LOAD_KV(x) (x)
#else
#define KV_ELEM ELEM
#define LOAD_KV(x) LOAD_ELEM(x)
#endif
layout(std430, binding = BINDING_K) readonly buffer KBuffer { KV_ELEM k_data[]; };
layout(std430, binding = BINDING_V) readonly buffer VBuffer { KV_ELEM v_data[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer OBuffer { ELEM o_data[]; };
// Per row: [m, l, o[VALUE_DIM]], rows in [batch][q head][token] order.
layout(std430, binding = BINDING_STATE) buffer StateBuffer { float state_data[]; };

const uint R = ROWS_PER_INVOCATION;            // rows per invocation: 4 or 8
const uint PV4 = R / 4u;                        // vec4s of one key's weights for an invocation's rows
const uint RG = ROWS / R;                       // row groups
const uint KPI = KEY_TILE / KEY_GROUPS;         // keys per invocation in a tile's scores
const uint H4 = (HEAD_DIM + 3u) / 4u;           // vec4s of a q or k row
const uint V4 = (VALUE_DIM + 3u) / 4u;          // vec4s of a v or o row
const uint C4 = (V4 + KEY_GROUPS - 1u) / KEY_GROUPS;  // output vec4 columns per invocation
const uint QS = H4 + 1u;                        // Q and K row stride in vec4s (one of padding)
const uint KV_ROW = QS > V4 ? QS : V4;          // the K / V region's vec4s per key
const float EMPTY = -3.0e38;

shared vec4 q_s[ROWS * QS];
shared vec4 kv_s[KEY_TILE * KV_ROW];
shared vec4 p_s[KEY_TILE * RG * PV4];   // per key and row group, the weights of its R rows
shared float red_s[ROWS * KEY_GROUPS];  // per row, one value per invocation of its row group

float weight_power(float x) {
    // x^p by repeated squaring (p is a power of two).
    float w = x;
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

// The Q, K and V tiles are staged float by float with staging.glsl's STAGED_COPY: consecutive
// lanes read consecutive floats of a row, STAGE_BATCH loads in flight before their stores, rows
// and columns clamped and what is past them selected away (a load under a condition is waited for
// alone: AMD's compiler had this kernel's loads four at a time, 20% in batches).
void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint rg = lid / KEY_GROUPS, g = lid % KEY_GROUPS;
    const uint row0 = gl_WorkGroupID.x * ROWS;
    const uint q_head = params.q_head_base + gl_WorkGroupID.y;
    const uint splits = max(params.splits, 1u);
    const uint batch = params.batch_base + gl_WorkGroupID.z / splits, split = gl_WorkGroupID.z % splits;
    // This split's state rows, and its keys: [key_begin, key_limit) of the call, or of the split.
    const uint state_split = split * params.split_stride;
    const uint split_base = split * params.split_keys;
    const uint key_lo = split_base + params.key_begin;
    const uint key_hi = params.split_keys != 0u ? min(split_base + params.key_limit, split_base + params.split_keys) : params.key_limit;
    const uint kv_head = q_head / params.head_ratio;

    // Q, scaled, once (rows past n are zero; their outputs are never stored).
    const uint q_base = tensor_row(params.q_strides, batch, q_head, 0u);
    STAGED_COPY(ROWS * 4u * H4, THREADS, lid,
                LOAD_ELEM(q_data[q_base + min(row0 + i / (4u * H4), params.n - 1u) * params.q_strides.token + min(i % (4u * H4), HEAD_DIM - 1u)]),
                row0 + i / (4u * H4) < params.n && i % (4u * H4) < HEAD_DIM,
                q_s[(i / (4u * H4)) * QS + (i % (4u * H4)) / 4u][i % 4u] = v * params.scale)

    // This invocation's rows, their running reference m, its part of l, its output columns.
    uint rows[R];
    float m[R], l[R];
    vec4 acc[R][C4];
    [[unroll]] for (uint i = 0u; i < R; ++i) {
        rows[i] = row0 + rg + i * RG;
        const uint state_base = state_split + ((batch * params.num_q_heads + q_head) * params.n + min(rows[i], params.n - 1u)) * (VALUE_DIM + 2u);
        const bool load = (params.flags & FLAG_LOAD_STATE) != 0u;
        m[i] = load ? state_data[state_base] : EMPTY;
        l[i] = load && g == 0u ? state_data[state_base + 1u] : 0.0;
        [[unroll]] for (uint c = 0u; c < C4; ++c) {
            const uint col = 4u * (g + c * KEY_GROUPS);
            acc[i][c] = vec4(0.0);
            if (load && col < VALUE_DIM) [[unroll]] for (uint e = 0u; e < 4u; ++e)
                if (col + e < VALUE_DIM) acc[i][c][e] = state_data[state_base + 2u + col + e];
        }
    }

    // Keys past the workgroup's last row never matter under the causal mask (row i is key
    // position q_pos + i).
    const uint last_row = min(params.n, row0 + ROWS);
    const uint key_end = min(key_hi, CAUSAL ? params.q_pos + last_row : params.n);
    const uint k_base = tensor_row(params.k_strides, batch, kv_head, 0u);
    const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);

    for (uint tile_start = key_lo; tile_start < key_end; tile_start += KEY_TILE) {
        barrier();  // the previous tile's P and V are read; Q is staged
        // 1. K.
        STAGED_COPY(KEY_TILE * 4u * H4, THREADS, lid,
                    LOAD_KV(k_data[k_base + min(tile_start + i / (4u * H4), key_end - 1u) * params.k_strides.token + min(i % (4u * H4), HEAD_DIM - 1u)]),
                    tile_start + i / (4u * H4) < key_end && i % (4u * H4) < HEAD_DIM,
                    kv_s[(i / (4u * H4)) * QS + (i % (4u * H4)) / 4u][i % 4u] = v)
        barrier();

        // 2. Scores: s[i][j] for row rows[i] and key tile_start + g + j KEY_GROUPS.
        float s[R][KPI];
        [[unroll]] for (uint i = 0u; i < R; ++i) [[unroll]] for (uint j = 0u; j < KPI; ++j) s[i][j] = 0.0;
        [[unroll]] for (uint d4 = 0u; d4 < H4; ++d4) {
            vec4 qv[R];
            [[unroll]] for (uint i = 0u; i < R; ++i) qv[i] = q_s[(rg + i * RG) * QS + d4];
            [[unroll]] for (uint j = 0u; j < KPI; ++j) {
                const vec4 kv = kv_s[(g + j * KEY_GROUPS) * QS + d4];
                // Four multiply-adds, not dot() and an add: a compiler may not contract those.
                [[unroll]] for (uint i = 0u; i < R; ++i) {
                    s[i][j] += qv[i].x * kv.x;
                    s[i][j] += qv[i].y * kv.y;
                    s[i][j] += qv[i].z * kv.z;
                    s[i][j] += qv[i].w * kv.w;
                }
            }
        }

        // 3. Weights.
        [[unroll]] for (uint j = 0u; j < KPI; ++j) {
            const uint key = tile_start + g + j * KEY_GROUPS;
            [[unroll]] for (uint i = 0u; i < R; ++i) {
                const bool visible = key < key_end && (!CAUSAL || key <= params.q_pos + rows[i]);
#if defined(KIND_SOFTMAX)
                s[i][j] = visible ? s[i][j] : -1.0 / 0.0;
#else
                s[i][j] = visible ? weight_power(s[i][j]) : 0.0;
#endif
            }
        }
#if defined(KIND_SOFTMAX)
        [[unroll]] for (uint i = 0u; i < R; ++i) {
            float t = s[i][0];
            [[unroll]] for (uint j = 1u; j < KPI; ++j) t = max(t, s[i][j]);
            red_s[(rg + i * RG) * KEY_GROUPS + g] = t;
        }
        barrier();
        [[unroll]] for (uint i = 0u; i < R; ++i) {
            float m_new = m[i];
            [[unroll]] for (uint gg = 0u; gg < KEY_GROUPS; ++gg) m_new = max(m_new, red_s[(rg + i * RG) * KEY_GROUPS + gg]);
            const float correction = exp(m[i] - m_new);
            m[i] = m_new;
            l[i] *= correction;
            [[unroll]] for (uint c = 0u; c < C4; ++c) acc[i][c] *= correction;
            [[unroll]] for (uint j = 0u; j < KPI; ++j) {
                s[i][j] = exp(s[i][j] - m_new);
                l[i] += s[i][j];
            }
        }
#elif defined(KIND_POLYNOMIAL)
        [[unroll]] for (uint i = 0u; i < R; ++i) [[unroll]] for (uint j = 0u; j < KPI; ++j) l[i] += s[i][j];
#else
#error "define KIND_SOFTMAX or KIND_POLYNOMIAL"
#endif

        // 4. V where K was (every invocation is past step 2: the softmax's barrier, or the
        // polynomial's below), and P.
#if defined(KIND_POLYNOMIAL)
        barrier();
#endif
        STAGED_COPY(KEY_TILE * 4u * V4, THREADS, lid,
                    LOAD_KV(v_data[v_base + min(tile_start + i / (4u * V4), key_end - 1u) * params.v_strides.token + min(i % (4u * V4), VALUE_DIM - 1u)]),
                    tile_start + i / (4u * V4) < key_end && i % (4u * V4) < VALUE_DIM,
                    kv_s[(i / (4u * V4)) * V4 + (i % (4u * V4)) / 4u][i % 4u] = v)
        [[unroll]] for (uint j = 0u; j < KPI; ++j) [[unroll]] for (uint h = 0u; h < PV4; ++h)
            p_s[((g + j * KEY_GROUPS) * RG + rg) * PV4 + h] = vec4(s[4u * h][j], s[4u * h + 1u][j], s[4u * h + 2u][j], s[4u * h + 3u][j]);
        barrier();

        // 5. O += P V over the tile's keys (masked and missing keys weigh 0, their V rows are 0).
        [[unroll]] for (uint j = 0u; j < KEY_TILE; ++j) {
            vec4 p[PV4];
            [[unroll]] for (uint h = 0u; h < PV4; ++h) p[h] = p_s[(j * RG + rg) * PV4 + h];
            [[unroll]] for (uint c = 0u; c < C4; ++c) {
                const uint c4 = g + c * KEY_GROUPS;
                if (C4 * KEY_GROUPS == V4 || c4 < V4) {
                    const vec4 v = kv_s[j * V4 + c4];
                    [[unroll]] for (uint h = 0u; h < PV4; ++h) {
                        acc[4u * h][c] += p[h].x * v;
                        acc[4u * h + 1u][c] += p[h].y * v;
                        acc[4u * h + 2u][c] += p[h].z * v;
                        acc[4u * h + 3u][c] += p[h].w * v;
                    }
                }
            }
        }
    }

    // The row's denominator: the sum of its invocations' parts.
    barrier();
    [[unroll]] for (uint i = 0u; i < R; ++i) red_s[(rg + i * RG) * KEY_GROUPS + g] = l[i];
    barrier();
    [[unroll]] for (uint i = 0u; i < R; ++i) {
        float sum = 0.0;
        [[unroll]] for (uint gg = 0u; gg < KEY_GROUPS; ++gg) sum += red_s[(rg + i * RG) * KEY_GROUPS + gg];
        l[i] = sum;
    }

    [[unroll]] for (uint i = 0u; i < R; ++i) {
        if (rows[i] >= params.n) continue;
        if ((params.flags & FLAG_STORE_STATE) != 0u) {
            const uint state_base = state_split + ((batch * params.num_q_heads + q_head) * params.n + rows[i]) * (VALUE_DIM + 2u);
            if (g == 0u) {
                state_data[state_base] = m[i];
                state_data[state_base + 1u] = l[i];
            }
            [[unroll]] for (uint c = 0u; c < C4; ++c) {
                const uint col = 4u * (g + c * KEY_GROUPS);
                [[unroll]] for (uint e = 0u; e < 4u; ++e)
                    if (col + e < VALUE_DIM) state_data[state_base + 2u + col + e] = acc[i][c][e];
            }
            continue;
        }
#if defined(KIND_SOFTMAX)
        const float inv = 1.0 / l[i];
#else
        const float inv = 1.0 / (1.0 + l[i]);  // the "1 +" keeps an all-zero row finite
#endif
        const uint o_base = tensor_row(params.o_strides, batch, q_head, rows[i]);
        [[unroll]] for (uint c = 0u; c < C4; ++c) {
            const uint col = 4u * (g + c * KEY_GROUPS);
            [[unroll]] for (uint e = 0u; e < 4u; ++e)
                if (col + e < VALUE_DIM) o_data[o_base + col + e] = STORE_ELEM(acc[i][c][e] * inv);
        }
    }
}
