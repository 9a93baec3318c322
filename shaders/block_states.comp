#version 450
// Block states of polysketch (SPEC section 6): H_l = phi(K_l)^T [V_l | 1] for every block l of
// every (batch, key/value head), a (features) x (VALUE_DIM + 1) float32 matrix per block.
//
// A workgroup computes one TILE_F x TILE_C tile of one H_l: it stages KEY_TILE keys at a time
// (their sketch rows S(k_j) and the tile's value columns) in shared memory, and each invocation
// accumulates FEATS_PER_THREAD x COLS_PER_THREAD entries, expanding the packed features
// psi(S(k_j))_f = coef_f S_a S_b on the fly from the pair table (self_tensor.glsl). The ones
// column (the normalizer, column VALUE_DIM) is the plain feature sum, kept by the invocations of
// column group 0 in the first column tile. Keys past the end of a short last block simply do not
// exist; nothing is padded.
//
// Layouts: sketch rows [batch * kv_heads + head][n][SKETCH]; states
// [batch * kv_heads + head][block][feature][VALUE_DIM + 1]. Per invocation the key loop runs at
// most block_size times (<= 1024), well inside llvmpipe's loop budget.

#extension GL_EXT_control_flow_attributes : require

#include "self_tensor.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint THREADS = 64;          // FEAT_GROUPS * COL_GROUPS
layout(constant_id = 1) const uint SKETCH = 32;           // length of S(k)
layout(constant_id = 2) const uint VALUE_DIM = 64;        // dv
layout(constant_id = 3) const uint FEAT_GROUPS = 16;
layout(constant_id = 4) const uint FEATS_PER_THREAD = 4;
layout(constant_id = 5) const uint COL_GROUPS = 4;
layout(constant_id = 6) const uint COLS_PER_THREAD = 16;
layout(constant_id = 7) const uint KEY_TILE = 32;

const uint TILE_F = FEAT_GROUPS * FEATS_PER_THREAD;
const uint TILE_C = COL_GROUPS * COLS_PER_THREAD;

layout(std430, binding = 0) readonly buffer KSketch { float k_sketch[]; };
layout(std430, binding = 1) readonly buffer VBuffer { ELEM v_data[]; };
layout(std430, binding = 2) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = 3) writeonly buffer States { float states[]; };

layout(push_constant) uniform Params {
    uint n;
    uint block_size;
    uint blocks;         // t = ceil(n / block_size)
    uint features;       // F = SKETCH (SKETCH + 1) / 2
    uint kv_heads;
    uint feature_tiles;  // ceil(F / TILE_F)
    TensorStrides v_strides;
} params;

shared float sk_tile[KEY_TILE * SKETCH];
shared float v_tile[KEY_TILE * TILE_C];

void main() {
    const uint ftile = gl_WorkGroupID.x % params.feature_tiles;
    const uint ctile = gl_WorkGroupID.x / params.feature_tiles;
    const uint block = gl_WorkGroupID.y, seq = gl_WorkGroupID.z;
    const uint batch = seq / params.kv_heads, head = seq % params.kv_heads;
    const uint lid = gl_LocalInvocationID.x;
    const uint cg = lid % COL_GROUPS, fg = lid / COL_GROUPS;
    const uint c0 = ctile * TILE_C;

    uint first[FEATS_PER_THREAD], second[FEATS_PER_THREAD];
    float coef[FEATS_PER_THREAD];
    [[unroll]] for (uint k = 0u; k < FEATS_PER_THREAD; ++k) {
        const uint f = ftile * TILE_F + fg * FEATS_PER_THREAD + k;
        const uint entry = f < params.features ? pairs[f] : 0u;
        first[k] = pair_first(entry);
        second[k] = pair_second(entry);
        coef[k] = f < params.features ? pair_coefficient(entry) : 0.0;
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
        [[unroll]] for (uint it = 0u; it < (KEY_TILE * SKETCH + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            if (i < tile_len * SKETCH) sk_tile[i] = k_sketch[sk_base + tile_start * SKETCH + i];
        }
        [[unroll]] for (uint it = 0u; it < (KEY_TILE * TILE_C + THREADS - 1u) / THREADS; ++it) {
            const uint i = it * THREADS + lid;
            if (i < tile_len * TILE_C) {
                const uint j = i / TILE_C, c = c0 + i % TILE_C;
                v_tile[i] = c < VALUE_DIM ? LOAD_ELEM(v_data[v_base + (tile_start + j) * params.v_strides.token + c]) : 0.0;
            }
        }
        barrier();
        for (uint j = 0u; j < tile_len; ++j) {
            float vv[COLS_PER_THREAD];
            [[unroll]] for (uint m = 0u; m < COLS_PER_THREAD; ++m) vv[m] = v_tile[j * TILE_C + cg + m * COL_GROUPS];
            [[unroll]] for (uint k = 0u; k < FEATS_PER_THREAD; ++k) {
                const float p = coef[k] * sk_tile[j * SKETCH + first[k]] * sk_tile[j * SKETCH + second[k]];
                ones[k] += p;
                [[unroll]] for (uint m = 0u; m < COLS_PER_THREAD; ++m) acc[k][m] += p * vv[m];
            }
        }
    }

    const uint row_stride = VALUE_DIM + 1u;
    const uint state_base = (seq * params.blocks + block) * params.features * row_stride;
    [[unroll]] for (uint k = 0u; k < FEATS_PER_THREAD; ++k) {
        const uint f = ftile * TILE_F + fg * FEATS_PER_THREAD + k;
        if (f >= params.features) continue;
        const uint row_base = state_base + f * row_stride;
        [[unroll]] for (uint m = 0u; m < COLS_PER_THREAD; ++m) {
            const uint c = c0 + cg + m * COL_GROUPS;
            if (c < VALUE_DIM) states[row_base + c] = acc[k][m];
        }
        if (ctile == 0u && cg == 0u) states[row_base + VALUE_DIM] = ones[k];
    }
}
