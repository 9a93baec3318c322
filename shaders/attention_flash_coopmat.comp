#version 450
// Softmax and exact polynomial attention (docs/MATH.md section 2) on cooperative matrices in the
// FlashAttention-2 arrangement, for 16-bit storage whose type is the operand type (float16 data
// with float16 operands, bfloat16 with bfloat16): q, k and v are operands exactly as stored, so
// there is no range pass and no operand scaling. Same bindings, push constants (AttentionTiledPush)
// and key chunks as attention_tiled.comp; the per-row state between chunks is this kernel's own
// (m, l, o with m this kernel's reference, below).
//
// A workgroup owns TILE_M = SG_M * ROW_TILES * CM_M consecutive query rows of one (batch, query
// head); subgroup g owns the SG_ROWS = ROW_TILES * CM_M rows g SG_ROWS .. of them (ROW_TILES row
// tiles of CM_M), all KEY_TILE keys of a step and all dv output columns, so no subgroup ever waits
// for another's rows. Per workgroup:
//
//  Q is staged once and each subgroup keeps its SG_ROWS x h rows as A operands in registers (the Q
//  region of shared memory then holds the subgroups' weight tiles P).
//  Per key tile (KEY_TILE keys; with a causal mask only the tiles up to the workgroup's last row):
//   1. The tile's K and V, loaded into registers during the previous tile's products, are written
//      to shared memory (two workgroup barriers: the previous tile is read; this one is written),
//      then the next tile's global loads are issued into the registers.
//   2. S = Q K^T, one CM_N-key score tile at a time: each K^T operand loaded from shared memory
//      serves the ROW_TILES row tiles (ROW_TILES float32 accumulators live), which are stored to the
//      subgroup's float32 scratch as soon as they are done (score tiles whose keys all lie after a
//      row tile's last row are skipped: the causal diagonal).
//   3. Per row, in float32, by the lanes that own the row (LPR lanes per row, taking runs of 8
//      consecutive keys in turn): scale, mask (keys past the chunk; causal: key > row), the tile's
//      largest value, and the row's reference m (below); the weights into the subgroup's P tile,
//      rounded to the operand type, 8 per 16-byte store, their sum into the lane's part of the
//      row's denominator l. With one row tile a lane keeps
//      its scores in registers between the two passes; with more it reads them from the scratch
//      again (registers for the row tiles' accumulators instead).
//   4. O += P V on cooperative matrices: NT = ceil(dv / CM_N) float32 accumulators per row tile,
//      held across the key tiles; each V operand loaded from shared memory serves every row tile.
//  After the last key tile: O / l (softmax) or O / (1 + l) (polynomial) through the scratch, or
//  the state (m, l, O) of the rows for the next key chunk (FLAG_STORE_STATE).
//
// Why row tiles (ROW_TILES > 1): per subgroup and key tile the K^T and V operands are read from
// shared memory once whatever the rows (2 KEY_TILE h bytes each at h = dv), the scores and weights
// once per row (CM_M KEY_TILE (4 + 4 + 2 + 2) bytes per row tile); with one row tile of 16 rows the
// operand reads are 16 KiB of the 28 KiB a 64 x 64 tile moves through the shared-memory data path
// for 131072 multiply-adds, with two 20 KiB for the same work (docs/MODEL.md, "The
// FlashAttention-2 softmax with row tiles"). The tiling table (planAttentionFlashCoopMat) has both.
//
// The reference m and the accumulators' rescaling. Weights are taken relative to a per-row
// reference that only grows: softmax w = 2^(x log2(e) - m) with m the log2-scaled score that was
// the row's maximum when m was last moved; polynomial w = (s q.k)^p 2^-m with m an integer
// exponent. m moves only when a tile's largest weight would exceed 2^8 (softmax) or 2^15
// (polynomial: float16's largest finite value is below 2^16); then l and O are multiplied by
// 2^(m_old - m_new) (exact for the polynomial's integer exponents). Cooperative-matrix types
// cannot scale their rows by different factors in either extension (KHR and NV expose only
// whole-matrix arithmetic and elements in an implementation-defined order), so a rescale goes
// through shared memory: each accumulator tile is stored to the subgroup's scratch, its rows
// scaled by their lanes, and loaded back. With the reference moving only by more than 8 octaves
// this is rare after a row's first keys (random scores: a few times per row), and it is decided per
// subgroup (subgroupAny), so most key tiles do no element-wise work on O at all. Weights below
// 2^-24 of the reference underflow in float16; they are that much smaller than the row's
// largest weight so far, which l already holds.
//
// Shared memory (the host computes it: attentionFlashCoopMatSharedBytes, tiled_forward.cpp):
// operands (rows padded by 8 elements: 16-byte aligned at 2 bytes, the load/store rule) Q or the
// P tiles, K, V; float32 the score scratch per subgroup (SG_ROWS rows of KEY_TILE + 4), reused for
// the rescale and the output; a float per lane for the row reductions. The operand pool is an
// array of uvec4, eight 16-bit operands each (CM_PACKED; both extensions load operands from it
// with element and stride in its units): Q, K and V rows go in as they were loaded, 16 bytes per
// store, and P 8 weights per store, where one 16-bit store per operand cost 8 shared-memory
// instructions per 16 bytes (docs/MODEL.md, "The FlashAttention-2 softmax with row tiles"). The
// emulated backend reads the same packed pool (coopmat.glsl, CM_LOAD_ROW_A_V) and adds its
// exchange region per subgroup.
//
// llvmpipe's loop budget (attention_tiled.comp): the run-time loops per key tile are the key-tile
// loop and, in the emulated backend, the loops over matrix tiles, staged chunks and a row's keys
// and columns (TILE_LOOP: unrolled on hardware) and the emulation's per-lane loops over matrix
// elements (loads, stores, products). The host bounds the keys per dispatch from
// attentionFlashCoopMatEmulatedIterationsPerKeyTile.
//
// One source for GL_KHR_cooperative_matrix, GL_NV_cooperative_matrix and the emulated backend
// (coopmat.glsl). The workgroup consists of exactly SG_M subgroups of THREADS / SG_M lanes: the host
// pins the subgroup size where it can vary.

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require

layout(local_size_x_id = 0) in;
#include "interface/attention_flash_coopmat.h"
PSK_DECLARE_SPECS(PSK_ATTENTION_FLASH_COOPMAT_SPEC)
PSK_DECLARE_BINDINGS(PSK_ATTENTION_TILED_BINDINGS)

#define CM_SUBGROUPS SG_M
#include "coopmat.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(std430, binding = BINDING_Q) readonly buffer QBuffer { ELEM q_data[]; };
layout(std430, binding = BINDING_K) readonly buffer KBuffer { ELEM k_data[]; };
layout(std430, binding = BINDING_V) readonly buffer VBuffer { ELEM v_data[]; };
// The same rows 8 elements (16 bytes) per load, where FLAG_ALIGNED_ROWS says they are aligned.
layout(std430, binding = BINDING_Q) readonly buffer QRows { uvec4 q_rows[]; };
layout(std430, binding = BINDING_K) readonly buffer KRows { uvec4 k_rows[]; };
layout(std430, binding = BINDING_V) readonly buffer VRows { uvec4 v_rows[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer OBuffer { ELEM o_data[]; };
// Per row: [reference m, denominator l, accumulator[VALUE_DIM]], rows in [batch][q head][token] order.
layout(std430, binding = BINDING_STATE) buffer StateBuffer { float state_data[]; };

const uint SG_ROWS = ROW_TILES * CM_M;             // rows per subgroup
const uint TILE_M = SG_M * SG_ROWS;
const uint LANES = THREADS / SG_M;                  // the subgroup size the host planned
const uint LPR = LANES >= SG_ROWS ? LANES / SG_ROWS : 1u;  // lanes per row in the per-row steps
const uint ROW_STEP = LANES / LPR;                   // rows the subgroup's lanes take at once
const uint RPL = (SG_ROWS + ROW_STEP - 1u) / ROW_STEP;  // rows per lane
const uint KPL = KEY_TILE / LPR;                     // keys per lane and row
const uint HP = (HEAD_DIM + CM_K - 1u) / CM_K * CM_K;  // q, k columns padded to the product's K
const uint KSTEPS = HP / CM_K;
const uint NT = (VALUE_DIM + CM_N - 1u) / CM_N;      // value column tiles (output accumulators)
const uint NC = NT * CM_N;
const uint ST = KEY_TILE / CM_N;                     // score tiles per subgroup and key tile
const uint PSTEPS = KEY_TILE / CM_K;
const uint CPL = CM_N / LPR;                         // columns per lane of a CM_N-wide tile
const uint PAD = 8u;
const uint LDQ = HP + PAD;        // Q rows (row-major A), K rows (column-major B = K^T)
const uint LDP = KEY_TILE + PAD;  // P rows (row-major A)
const uint LDV = NC + PAD;        // V rows (row-major B)
const uint LDS = KEY_TILE + 4u;   // float32 score rows
const uint HC = HP / 8u, VC = NC / 8u;  // 8-element chunks of a staged K or V row
const uint Q_SIZE = TILE_M * LDQ, P_SIZE = TILE_M * LDP;
const uint OP_Q = 0u;  // Q, then each subgroup's P tile at OP_Q + g SG_ROWS LDP
const uint OP_K = Q_SIZE > P_SIZE ? Q_SIZE : P_SIZE;
const uint OP_V = OP_K + KEY_TILE * LDQ;
const uint OP_POOL = OP_V + KEY_TILE * LDV;
const uint F_POOL = SG_M * SG_ROWS * LDS;
// Scores stay in registers between the per-row passes with one row tile (see step 3).
const bool CACHE_SCORES = ROW_TILES == 1u;
const uint K_ITEMS = (KEY_TILE * HC + THREADS - 1u) / THREADS;  // chunks per invocation and key tile
const uint V_ITEMS = (KEY_TILE * VC + THREADS - 1u) / THREADS;
const uint STATE_ROW = VALUE_DIM + 2u;
const float NEG_INF = -1.0 / 0.0;
// Loops over matrix tiles, the register staging of K and V and a row's keys and columns: unrolled
// on hardware (a few products and 16-byte loads per invocation, indices constant, a row's values
// in registers); loops in the emulated backend, whose few invocations each stage hundreds of
// elements and take whole rows, and whose products are loops of their own: llvmpipe took minutes
// to compile them unrolled, twice the old kernel's time with only the row loops unrolled (their
// iterations are in the host's loop count).
#if defined(COOPMAT_EMULATED)
#define TILE_LOOP [[dont_unroll]]
#else
#define TILE_LOOP [[unroll]]
#endif

shared CM_PACKED op_pool[OP_POOL / 8u];  // eight operands per element (offsets below count operands)
shared float f_pool[CM_SHARED_COUNT(F_POOL, 4u)];
shared float reduce_pool[CM_SHARED_COUNT(SG_M * LANES, 4u)];

// Two elements as the operand type's 16 bits each: exact for data of the operand type, rounded to
// nearest even otherwise (the weights P).
uint pack_pair(float a, float b) {
#if defined(OPERAND_F16)
    return packHalf2x16(vec2(a, b));
#else
    uvec2 u = floatBitsToUint(vec2(a, b));
    u += 0x7FFFu + ((u >> 16) & 1u);  // finite, non-negative weights and exact data: no NaN to keep
    return (u.x >> 16) | (u.y & 0xFFFF0000u);
#endif
}

// `out` = elements d0 .. d0 + 7 of the row at element `base` (zero at and past `width`, and all zero
// unless `valid`): one 16-byte load when the rows are aligned (width is then a multiple of 8), else
// element by element. Without branches (shaders/staging.glsl): `base` must name a row that exists
// whether or not `valid` (the callers clamp it), the column is clamped, and what is not valid is
// selected away after the load, so a compiler has no branch to sink the loads into and keeps a
// tile's loads in flight together (AMD's compiler had 329 of this kernel's 331 loads one by one).
#define LOAD_CHUNK(out, data, rows16, base, d0, width, aligned, valid)                              \
    if (aligned) {                                                                                  \
        const uvec4 x_ = rows16[((base) + min((d0), (width) - 8u)) / 8u];                           \
        out = (valid) && (d0) < (width) ? x_ : uvec4(0u);                                           \
    } else {                                                                                        \
        float e_[8];                                                                                \
        [[unroll]] for (uint e = 0u; e < 8u; ++e) {                                                 \
            const float x_ = LOAD_ELEM(data[(base) + min((d0) + e, (width) - 1u)]);                \
            e_[e] = (valid) && (d0) + e < (width) ? x_ : 0.0;                                       \
        }                                                                                           \
        out = uvec4(pack_pair(e_[0], e_[1]), pack_pair(e_[2], e_[3]), pack_pair(e_[4], e_[5]), pack_pair(e_[6], e_[7])); \
    }

float weight_power(float x) {
    float w = x;  // x^DEGREE by repeated squaring (DEGREE is a power of two)
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

// The largest (or the sum) of v over the LPR lanes of a row (subgroup-uniform control flow).
float row_reduce(float v, bool is_max) {
    if (LPR == 1u) return v;
    const uint lane = gl_SubgroupInvocationID, base = gl_SubgroupID * LANES;
    reduce_pool[base + lane] = v;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    float r = is_max ? NEG_INF : 0.0;
    [[unroll]] for (uint p = 0u; p < LPR; ++p) {
        const float x = reduce_pool[base + lane / LPR * LPR + p];
        r = is_max ? max(r, x) : r + x;
    }
    subgroupBarrier();  // read before the next reduction writes
    return r;
}

void main() {
    // The emulated backend hands shared memory over as NaN, as a GPU might (coopmat.glsl).
    CM_POISON_SHARED_V(op_pool, OP_POOL / 8u);
    CM_POISON_SHARED(f_pool, F_POOL);
    const uint row_begin = gl_WorkGroupID.x * TILE_M;
    const uint q_head = gl_WorkGroupID.y, batch = gl_WorkGroupID.z;
    const uint kv_head = q_head / params.head_ratio;
    const uint lid = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint row_end = min(params.n, row_begin + TILE_M);
    const uint rows = row_end - row_begin;  // >= 1: the grid covers ceil(n / TILE_M) tiles
    const uint sg_row0 = sg * SG_ROWS;      // the subgroup's first row in the tile
    const bool sg_rows = sg_row0 < rows;    // the subgroup has rows (subgroup-uniform)
    const uint sg_last = row_begin + min(sg_row0 + SG_ROWS, rows) - 1u;  // its last row (when sg_rows)
    // Keys past the tile's last row never matter under the causal mask.
    const uint key_end = min(params.key_limit, CAUSAL ? row_end : params.n);
    const uint q_base = tensor_row(params.q_strides, batch, q_head, row_begin);
    const uint k_base = tensor_row(params.k_strides, batch, kv_head, 0u);
    const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);
    const uint state_row0 = (batch * params.num_q_heads + q_head) * params.n + row_begin + sg_row0;
    const bool aligned = (params.flags & FLAG_ALIGNED_ROWS) != 0u;
    const uint part = lane % LPR;             // which keys / columns of its row the lane takes
    const uint scratch = sg * SG_ROWS * LDS;  // the subgroup's float32 scratch
    const uint p_tile = OP_Q + sg * SG_ROWS * LDP;
#if defined(KIND_SOFTMAX)
    const float x_scale = params.scale * 1.4426950408889634;  // s log2(e): weights as powers of two
#elif defined(KIND_POLYNOMIAL)
    const float x_scale = params.scale;
#else
#error "define KIND_SOFTMAX or KIND_POLYNOMIAL"
#endif
    // Row tile mt of the subgroup has rows and one of them sees key `key` (subgroup-uniform): the
    // products of key steps or score tiles starting past its last row are skipped.
#define TILE_SEES(mt, key) \
    (sg_row0 + (mt) * CM_M < rows && (!CAUSAL || (key) <= row_begin + min(sg_row0 + ((mt) + 1u) * CM_M, rows) - 1u))

    // ---- Q staged once; the first key tile's loads issued ----
    for (uint i = lid; i < TILE_M * HC; i += THREADS) {
        const uint r = i / HC, c = i % HC;
        uvec4 chunk;
        LOAD_CHUNK(chunk, q_data, q_rows, q_base + min(r, rows - 1u) * params.q_strides.token, c * 8u, HEAD_DIM, aligned, r < rows)
        op_pool[(OP_Q + r * LDQ) / 8u + c] = chunk;
    }
    uvec4 k_next[K_ITEMS], v_next[V_ITEMS];
    const uint last_key = max(key_end, 1u) - 1u;  // a row every clamped load may read
#define FETCH_KEY_TILE(ks_)                                                                                 \
    TILE_LOOP for (uint it = 0u; it < K_ITEMS; ++it) {                                                     \
        const uint i = it * THREADS + lid, j = i / HC;                                                      \
        LOAD_CHUNK(k_next[it], k_data, k_rows, k_base + min((ks_) + j, last_key) * params.k_strides.token, i % HC * 8u, HEAD_DIM, \
                   aligned, i < KEY_TILE * HC && (ks_) + j < key_end)                                       \
    }                                                                                                       \
    TILE_LOOP for (uint it = 0u; it < V_ITEMS; ++it) {                                                     \
        const uint i = it * THREADS + lid, j = i / VC;                                                      \
        LOAD_CHUNK(v_next[it], v_data, v_rows, v_base + min((ks_) + j, last_key) * params.v_strides.token, i % VC * 8u, VALUE_DIM, \
                   aligned, i < KEY_TILE * VC && (ks_) + j < key_end)                                       \
    }
    FETCH_KEY_TILE(params.key_begin)
    barrier();
    CM_A qa[ROW_TILES * KSTEPS];  // row tile mt's operand kk at qa[mt KSTEPS + kk]
    if (sg_rows) {
        TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt)
            [[unroll]] for (uint kk = 0u; kk < KSTEPS; ++kk)
                CM_LOAD_ROW_A_V(qa[mt * KSTEPS + kk], op_pool, (OP_Q + (sg_row0 + mt * CM_M) * LDQ + kk * CM_K) / 8u, LDQ / 8u);
    }

    // ---- Row state: zero, or the previous key chunk's ----
    float m_ref[RPL], l_part[RPL];
    [[unroll]] for (uint rr = 0u; rr < RPL; ++rr) {
        m_ref[rr] = NEG_INF;
        l_part[rr] = 0.0;
    }
    CM_ACC o_acc[ROW_TILES * NT];  // row tile mt's value tile w at o_acc[mt NT + w]
    [[unroll]] for (uint a = 0u; a < ROW_TILES * NT; ++a) o_acc[a] = CM_ACC_ZERO;
    // Value tile w of the subgroup's rows passes through the scratch as SG_ROWS x CM_N floats (stride
    // CM_N: row tile mt at scratch + mt CM_M CM_N), for the state in, the rescale and the output.
    if ((params.flags & FLAG_LOAD_STATE) != 0u && sg_rows) {
        [[unroll]] for (uint rr = 0u; rr < RPL; ++rr) {
            const uint r = rr * ROW_STEP + lane / LPR;
            if (r < SG_ROWS && sg_row0 + r < rows) {
                m_ref[rr] = state_data[(state_row0 + r) * STATE_ROW];
                l_part[rr] = part == 0u ? state_data[(state_row0 + r) * STATE_ROW + 1u] : 0.0;
            }
        }
        TILE_LOOP for (uint w = 0u; w < NT; ++w) {
            subgroupBarrier();  // the previous tile's load from the scratch is done
            [[unroll]] for (uint rr = 0u; rr < RPL; ++rr) {
                const uint r = rr * ROW_STEP + lane / LPR;
                TILE_LOOP for (uint t = 0u; t < CPL; ++t) {
                    const uint c = part + LPR * t, col = w * CM_N + c;
                    if (r < SG_ROWS)
                        f_pool[scratch + r * CM_N + c] =
                            sg_row0 + r < rows && col < VALUE_DIM ? state_data[(state_row0 + r) * STATE_ROW + 2u + col] : 0.0;
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt)
                CM_LOAD_ROW_ACC(o_acc[mt * NT + w], f_pool, scratch + mt * CM_M * CM_N, CM_N);
        }
    }

    for (uint ks = params.key_begin; ks < key_end; ks += KEY_TILE) {
        const uint klen = min(KEY_TILE, key_end - ks);
        // ---- 1. K and V of this tile from the registers; the next tile's loads issued ----
        barrier();  // every subgroup is done with the previous tile's K, V (and with Q)
        TILE_LOOP for (uint it = 0u; it < K_ITEMS; ++it) {
            const uint i = it * THREADS + lid;
            if (i < KEY_TILE * HC) op_pool[(OP_K + i / HC * LDQ) / 8u + i % HC] = k_next[it];
        }
        TILE_LOOP for (uint it = 0u; it < V_ITEMS; ++it) {
            const uint i = it * THREADS + lid;
            if (i < KEY_TILE * VC) op_pool[(OP_V + i / VC * LDV) / 8u + i % VC] = v_next[it];
        }
        barrier();
        if (ks + KEY_TILE < key_end) {
            FETCH_KEY_TILE(ks + KEY_TILE)
        }
        // The subgroup has rows that see keys of this tile (subgroup-uniform).
        if (!sg_rows || (CAUSAL && ks > sg_last)) continue;

        // ---- 2. S = Q K^T, stored score tile by score tile (tiles past a row tile's last row skipped) ----
        subgroupBarrier();  // the scratch's previous contents are read
        TILE_LOOP for (uint t = 0u; t < ST; ++t) {
            if (t * CM_N < klen && (!CAUSAL || ks + t * CM_N <= sg_last)) {
                CM_ACC s_acc[ROW_TILES];
                TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt) s_acc[mt] = CM_ACC_ZERO;
                TILE_LOOP for (uint kk = 0u; kk < KSTEPS; ++kk) {
                    CM_B kb;
                    CM_LOAD_COL_B_V(kb, op_pool, (OP_K + t * CM_N * LDQ + kk * CM_K) / 8u, LDQ / 8u);  // K^T
                    TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt)
                        if (TILE_SEES(mt, ks + t * CM_N))
                            s_acc[mt] = CM_MULADD(qa[mt * KSTEPS + kk], kb, s_acc[mt]);
                }
                // Tiles skipped here are never read: their keys are masked for every row of theirs.
                TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt)
                    if (TILE_SEES(mt, ks + t * CM_N))
                        CM_STORE_ROW(s_acc[mt], f_pool, scratch + mt * CM_M * LDS + t * CM_N, LDS);
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // ---- 3. Per row: mask, the tile's largest value, the reference, the weights ----
        // x of key j of row r: log2 of its weight before the reference (softmax), or the weight
        // before it (polynomial); keys at and past `visible` are masked.
#if defined(KIND_SOFTMAX)
#define SCORE_X(r_, j_, visible_) ((j_) < (visible_) ? f_pool[scratch + (r_) * LDS + (j_)] * x_scale : NEG_INF)
#else
#define SCORE_X(r_, j_, visible_) ((j_) < (visible_) ? weight_power(f_pool[scratch + (r_) * LDS + (j_)] * x_scale) : 0.0)
#endif
        // The lane's t-th key of a row: runs of 8 consecutive keys, the row's LPR lanes taking turns
        // (so that a lane writes its weights 16 bytes at a time).
#define LANE_KEY(t_) (((t_) / 8u) * 8u * LPR + part * 8u + (t_) % 8u)
        float xs[CACHE_SCORES ? RPL * KPL : 1u];
        uint visible[RPL];
        float corr[RPL];
        bool rescale = false;
        [[unroll]] for (uint rr = 0u; rr < RPL; ++rr) {
            const uint r = rr * ROW_STEP + lane / LPR;
            const uint i = row_begin + sg_row0 + r;  // the row's token
            // Keys j < visible of the tile count for this row (rows past n see none).
            const bool valid = r < SG_ROWS && sg_row0 + r < rows;
            visible[rr] = valid ? klen : 0u;
            if (CAUSAL) visible[rr] = valid && i >= ks ? min(klen, i - ks + 1u) : 0u;
            float top = NEG_INF;
            TILE_LOOP for (uint t = 0u; t < KPL; ++t) {
                const float x = SCORE_X(r, LANE_KEY(t), visible[rr]);
                if (CACHE_SCORES) xs[rr * KPL + t] = x;
                top = max(top, x);
            }
            top = row_reduce(top, true);
            corr[rr] = 1.0;
#if defined(KIND_SOFTMAX)
            // Move the reference when a weight would exceed 2^8.
            if (top > m_ref[rr] + 8.0) {
                corr[rr] = exp2(m_ref[rr] - top);  // 0 for the row's first keys (m = -inf, l = 0, O = 0)
                rescale = rescale || m_ref[rr] > NEG_INF;
                m_ref[rr] = top;
            }
#else
            // Move the reference exponent when a weight would reach 2^15.
            if (top > 0.0) {
                int e;
                frexp(top, e);  // top < 2^e
                if (!(m_ref[rr] > NEG_INF) || float(e) - m_ref[rr] > 15.0) {
                    const float m_new = float(e - 14);
                    corr[rr] = m_ref[rr] > NEG_INF ? ldexp(1.0, int(m_ref[rr] - m_new)) : 0.0;
                    rescale = rescale || m_ref[rr] > NEG_INF;
                    m_ref[rr] = m_new;
                }
            }
#endif
            l_part[rr] *= corr[rr];
        }
        [[unroll]] for (uint rr = 0u; rr < RPL; ++rr) {
            const uint r = rr * ROW_STEP + lane / LPR;
            float sum = 0.0;
            TILE_LOOP for (uint g = 0u; g < KPL / 8u; ++g) {  // a run of 8 keys: one 16-byte store of P
                float w[8];
                [[unroll]] for (uint e = 0u; e < 8u; ++e) {
                    const uint t = g * 8u + e;
                    const float x = CACHE_SCORES ? xs[rr * KPL + t] : SCORE_X(r, LANE_KEY(t), visible[rr]);
#if defined(KIND_SOFTMAX)
                    w[e] = x > NEG_INF ? exp2(x - m_ref[rr]) : 0.0;
#else
                    w[e] = x > 0.0 ? ldexp(x, -int(m_ref[rr])) : 0.0;  // m is finite where a weight is > 0
#endif
                    sum += w[e];
                }
                if (r < SG_ROWS)
                    op_pool[(p_tile + r * LDP + LANE_KEY(g * 8u)) / 8u] =
                        uvec4(pack_pair(w[0], w[1]), pack_pair(w[2], w[3]), pack_pair(w[4], w[5]), pack_pair(w[6], w[7]));
            }
            l_part[rr] += sum;
        }
        if (subgroupAny(rescale)) {
            // O's rows times corr, through the scratch (read by the weights above: the barrier first).
            TILE_LOOP for (uint w = 0u; w < NT; ++w) {
                subgroupBarrier();
                TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt)
                    CM_STORE_ROW(o_acc[mt * NT + w], f_pool, scratch + mt * CM_M * CM_N, CM_N);
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                [[unroll]] for (uint rr = 0u; rr < RPL; ++rr) {
                    const uint r = rr * ROW_STEP + lane / LPR;
                    TILE_LOOP for (uint t = 0u; t < CPL; ++t)
                        if (r < SG_ROWS) f_pool[scratch + r * CM_N + part + LPR * t] *= corr[rr];
                }
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt)
                    CM_LOAD_ROW_ACC(o_acc[mt * NT + w], f_pool, scratch + mt * CM_M * CM_N, CM_N);
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // ---- 4. O += P V (key steps past a row tile's last row skipped) ----
        TILE_LOOP for (uint kk = 0u; kk < PSTEPS; ++kk) {
            if (kk * CM_K < klen && (!CAUSAL || ks + kk * CM_K <= sg_last)) {
                CM_A pa[ROW_TILES];
                TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt)
                    if (TILE_SEES(mt, ks + kk * CM_K))
                        CM_LOAD_ROW_A_V(pa[mt], op_pool, (p_tile + mt * CM_M * LDP + kk * CM_K) / 8u, LDP / 8u);
                TILE_LOOP for (uint w = 0u; w < NT; ++w) {
                    CM_B vb;
                    CM_LOAD_ROW_B_V(vb, op_pool, (OP_V + kk * CM_K * LDV + w * CM_N) / 8u, LDV / 8u);
                    TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt)
                        if (TILE_SEES(mt, ks + kk * CM_K))
                            o_acc[mt * NT + w] = CM_MULADD(pa[mt], vb, o_acc[mt * NT + w]);
                }
            }
        }
    }

    // ---- The output, or the row state for the next key chunk ----
    if (!sg_rows) return;
    const bool store_state = (params.flags & FLAG_STORE_STATE) != 0u;
    float inv[RPL];
    [[unroll]] for (uint rr = 0u; rr < RPL; ++rr) {
        const float l = row_reduce(l_part[rr], false);
        const uint r = rr * ROW_STEP + lane / LPR;
        if (store_state && part == 0u && r < SG_ROWS && sg_row0 + r < rows) {
            state_data[(state_row0 + r) * STATE_ROW] = m_ref[rr];
            state_data[(state_row0 + r) * STATE_ROW + 1u] = l;
        }
#if defined(KIND_SOFTMAX)
        inv[rr] = 1.0 / l;
#else
        // O = o 2^m / (1 + l 2^m); the "1 +" keeps an all-zero row finite.
        inv[rr] = m_ref[rr] > NEG_INF ? 1.0 / (ldexp(1.0, -int(m_ref[rr])) + l) : 0.0;
#endif
    }
    TILE_LOOP for (uint w = 0u; w < NT; ++w) {
        subgroupBarrier();
        TILE_LOOP for (uint mt = 0u; mt < ROW_TILES; ++mt)
            CM_STORE_ROW(o_acc[mt * NT + w], f_pool, scratch + mt * CM_M * CM_N, CM_N);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint rr = 0u; rr < RPL; ++rr) {
            const uint r = rr * ROW_STEP + lane / LPR;
            TILE_LOOP for (uint t = 0u; t < CPL; ++t) {
                const uint c = part + LPR * t, col = w * CM_N + c;
                if (r < SG_ROWS && sg_row0 + r < rows && col < VALUE_DIM) {
                    const float o = f_pool[scratch + r * CM_N + c];
                    if (store_state)
                        state_data[(state_row0 + r) * STATE_ROW + 2u + col] = o;
                    else
                        o_data[tensor_row(params.o_strides, batch, q_head, row_begin + sg_row0 + r) + col] = STORE_ELEM(o * inv[rr]);
                }
            }
        }
    }
}
