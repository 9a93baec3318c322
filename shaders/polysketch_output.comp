#version 450
// Polysketch output (SPEC section 6). One workgroup owns ROWS consecutive query rows inside one
// block l of one (batch, query head); each invocation owns one row i:
//
//   num_i = phi(q_i)^T Z + local_i,      O_i = num_i[0:dv] / (1 + num_i[dv])
//
//   Z:       CAUSAL: Z_l, the exclusive prefix of the block states (block_scan.comp);
//            full:   the sum of all block states, reduced into block 0 (block_reduce.comp).
//            phi(q_i) is expanded on the fly from S(q_i) with the pair table; Z is staged
//            FEAT_TILE feature rows at a time in shared memory.
//   local_i: CAUSAL only, keys j of block l with j <= i:
//            sketched:    w_ij = <S(q_i), S(k_j)>^2  (= <phi(q_i), phi(k_j)>)
//            LOCAL_EXACT: w_ij = (q'_i . k'_j)^DEGREE with the rows feature_map wrote for the
//                         local part (scaled, own LayerNorm if any).
//
// Per invocation: ceil(F / FEAT_TILE) iterations over Z tiles (the tile itself is unrolled) plus
// at most block_size keys: bounded, whatever n (llvmpipe loop limit, docs/ARCHITECTURE.md).
// Rows: q-side rows [batch * q_heads + head][n][width], k-side [batch * kv_heads + head][n][width].

#extension GL_EXT_control_flow_attributes : require

#include "self_tensor.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint ROWS = 64;        // query rows per workgroup = invocations
layout(constant_id = 1) const uint SKETCH = 32;      // length of S(q)
layout(constant_id = 2) const uint HEAD_DIM = 64;    // h (local exact rows)
layout(constant_id = 3) const uint VALUE_DIM = 64;   // dv
layout(constant_id = 4) const uint FEAT_TILE = 16;   // Z rows staged per step (<= ROWS)
layout(constant_id = 5) const uint KEY_TILE = 32;    // local keys staged per step
layout(constant_id = 6) const uint DEGREE = 4;       // local exact weights (q.k)^DEGREE
layout(constant_id = 7) const bool CAUSAL = true;
layout(constant_id = 8) const bool LOCAL_EXACT = false;
layout(constant_id = 9) const uint SMEM_FLOATS = 2048;  // max(FEAT_TILE (dv+1), KEY_TILE (KEY_WIDTH + dv))

const uint KEY_WIDTH = LOCAL_EXACT ? HEAD_DIM : SKETCH;
const uint Z_STRIDE = VALUE_DIM + 1u;

layout(std430, binding = 0) readonly buffer QSketch { float q_sketch[]; };
layout(std430, binding = 1) readonly buffer KLocal { float k_local[]; };  // S(k) rows, or k' rows
layout(std430, binding = 2) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = 3) writeonly buffer OBuffer { ELEM o_data[]; };
layout(std430, binding = 4) readonly buffer States { float states[]; };
layout(std430, binding = 5) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = 6) readonly buffer QLocal { float q_local[]; };  // q' rows (LOCAL_EXACT)

layout(push_constant) uniform Params {
    uint n;
    uint block_size;
    uint blocks;
    uint features;
    uint head_ratio;  // Hq / Hkv
    uint q_heads;
    uint kv_heads;
    uint tiles_per_block;  // ceil(block_size / ROWS)
    TensorStrides v_strides;
    TensorStrides o_strides;
} params;

shared float smem[SMEM_FLOATS];
shared uint pair_tile[FEAT_TILE];

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
    const uint tile_begin = block_begin + tile * ROWS;
    const uint row = tile_begin + lid;
    const bool row_valid = tile * ROWS + lid < params.block_size && row < params.n;
    const uint crow = row_valid ? row : block_begin;  // a valid row to read for idle invocations

    float sq[SKETCH];
    [[unroll]] for (uint d = 0u; d < SKETCH; ++d) sq[d] = q_sketch[(q_seq * params.n + crow) * SKETCH + d];

    float acc[VALUE_DIM];
    [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) acc[d] = 0.0;
    float den = 0.0;

    // ---- phi(q_i)^T Z: everything before this block (causal) or everything (full) ----
    if (!CAUSAL || block > 0u) {
        const uint z_base = (kv_seq * params.blocks + (CAUSAL ? block : 0u)) * params.features * Z_STRIDE;
        for (uint f0 = 0u; f0 < params.features; f0 += FEAT_TILE) {
            const uint flen = min(FEAT_TILE, params.features - f0);
            barrier();
            [[unroll]] for (uint it = 0u; it < (FEAT_TILE * Z_STRIDE + ROWS - 1u) / ROWS; ++it) {
                const uint i = it * ROWS + lid;
                if (i < flen * Z_STRIDE) smem[i] = states[z_base + f0 * Z_STRIDE + i];
            }
            if (lid < flen) pair_tile[lid] = pairs[f0 + lid];
            barrier();
            [[dont_unroll]] for (uint k = 0u; k < flen; ++k) {
                const uint entry = pair_tile[k];
                const float p = pair_coefficient(entry) * sq[pair_first(entry)] * sq[pair_second(entry)];
                [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) acc[d] += p * smem[k * Z_STRIDE + d];
                den += p * smem[k * Z_STRIDE + VALUE_DIM];
            }
        }
    }

    // ---- local part: keys of this block up to the row ----
    if (CAUSAL) {
        float query[KEY_WIDTH];
        if (LOCAL_EXACT) {
            [[unroll]] for (uint d = 0u; d < KEY_WIDTH; ++d) query[d] = q_local[(q_seq * params.n + crow) * HEAD_DIM + d];
        } else {
            [[unroll]] for (uint d = 0u; d < KEY_WIDTH; ++d) query[d] = sq[min(d, SKETCH - 1u)];  // KEY_WIDTH == SKETCH here
        }
        const uint last = min(block_end, tile_begin + ROWS);  // keys past the tile's last row never count
        const uint k_base = kv_seq * params.n * KEY_WIDTH;
        const uint v_base = tensor_row(params.v_strides, batch, kv_head, 0u);
        const uint v_off = KEY_TILE * KEY_WIDTH;  // values follow the keys in smem
        for (uint tile_start = block_begin; tile_start < last; tile_start += KEY_TILE) {
            const uint tile_len = min(KEY_TILE, last - tile_start);
            barrier();
            [[unroll]] for (uint it = 0u; it < (KEY_TILE * KEY_WIDTH + ROWS - 1u) / ROWS; ++it) {
                const uint i = it * ROWS + lid;
                if (i < tile_len * KEY_WIDTH) smem[i] = k_local[k_base + tile_start * KEY_WIDTH + i];
            }
            [[unroll]] for (uint it = 0u; it < (KEY_TILE * VALUE_DIM + ROWS - 1u) / ROWS; ++it) {
                const uint i = it * ROWS + lid;
                if (i < tile_len * VALUE_DIM) {
                    const uint j = i / VALUE_DIM, d = i % VALUE_DIM;
                    smem[v_off + i] = LOAD_ELEM(v_data[v_base + (tile_start + j) * params.v_strides.token + d]);
                }
            }
            barrier();
            const uint visible = row_valid && row >= tile_start ? min(tile_len, row - tile_start + 1u) : 0u;
            for (uint j = 0u; j < visible; ++j) {
                float s = 0.0;
                [[unroll]] for (uint d = 0u; d < KEY_WIDTH; ++d) s += query[d] * smem[j * KEY_WIDTH + d];
                const float w = LOCAL_EXACT ? weight_power(s) : s * s;
                den += w;
                [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) acc[d] += w * smem[v_off + j * VALUE_DIM + d];
            }
        }
    }

    if (!row_valid) return;
    const float inv = 1.0 / (1.0 + den);
    const uint o_base = tensor_row(params.o_strides, batch, q_head, row);
    [[unroll]] for (uint d = 0u; d < VALUE_DIM; ++d) o_data[o_base + d] = STORE_ELEM(acc[d] * inv);
}
