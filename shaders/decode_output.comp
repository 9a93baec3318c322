#version 450
// Incremental decoding (docs/MATH.md section 7): one polysketch decode step of every sequence in one
// dispatch. The new token joins the state and its output row is computed from it:
//
//   sketched local:  z += phi(k)[v | 1];                   num = phi(q)^T z
//   LOCAL_EXACT:     h += phi(k)[v | 1]; k', v -> block;   num = phi(q)^T z + local,
//                    local = sum over the unfinished block's rows j (this token's included) of
//                    (q' . k'_j)^DEGREE [v_j | 1]; when the token completes the block, z += h, h = 0
//   O = num[0:dv] / (1 + num[dv])
//
// The token's features: SKETCH_RANDOM, every workgroup computes S(q), S(k) (and q', k') of the
// rows it needs from q and k itself (decode_token_sketch.glsl), so a step is this one dispatch;
// SKETCH_LEARNED, the forward's feature map ran before it and its rows are read from binding 0
// (the learned sketch's MLP is ~50 times the random sketch's work per row: recomputed by every
// workgroup it would cost more than the dispatch it saves).
// Work split (docs/DECODING.md, "What a step costs"): per slot (sequence, key/value head),
// gl_WorkGroupID.y, `feature_groups` workgroups each own FEATURE_SLICE features of z (and h) and
// `row_groups` workgroups (LOCAL_EXACT) each own ROW_SLICE rows of the block. A feature workgroup
// reads its rows of z once for all HEAD_RATIO query heads of the slot (GQA), adds the token's
// phi(k)_f [v | 1] into z or h, and owns those rows outright, so the block completion's z += h needs
// no other dispatch. Each workgroup writes its partial [HEAD_RATIO][dv + 1] sums to the workspace;
// the last of the slot's workgroups to finish (an atomic counter per slot) adds them up, in a fixed
// order, and writes the output rows. LOCAL_EXACT: the last slot of a sequence to finish (a counter
// per sequence) advances the sequence's row count in the unfinished block, so a step needs no
// host write of the position.
//
// Binding 0, the step state (words at push offsets): h, the block's k' and v rows (LOCAL_EXACT),
// the learned sketch's feature rows, and the workspace from word `work`: [0, B) rows of each
// sequence's unfinished block before this step; [B, B + B Hkv) the slot counters;
// [B + B Hkv, 2 B + B Hkv) the sequence counters; then the partial sums
// [slot][group][HEAD_RATIO][dv + 1] (float bits). Counters are zero between steps: the last
// workgroup puts its counter back.
// Memory order: a workgroup's partial sums (a coherent buffer) are made visible by
// memoryBarrierBuffer before its counter increment; the last workgroup, having seen every other
// increment, issues memoryBarrierBuffer before reading them.
// Layouts: q [B Hq][HEAD_DIM], k [B Hkv][HEAD_DIM], v [B Hkv][dv], out [B Hq][dv] in the storage
// type (the state and the arithmetic are float32; out is rounded once, as the forward rounds it);
// learned feature rows S(q) [B Hq][SKETCH], S(k) [B Hkv][SKETCH], q' [B Hq][HEAD_DIM],
// k' [B Hkv][HEAD_DIM]; z, h [B Hkv][F][dv + 1]; block rows [B Hkv][BLOCK][HEAD_DIM] and
// [B Hkv][BLOCK][VALUE_DIM].
// Loops per invocation: (HEAD_RATIO + 1) SKETCH / WG inner products of HEAD_DIM / 4 for the
// token's sketch, FEATURE_SLICE over z, ceil(HEAD_RATIO ROW_SLICE / WG) HEAD_DIM for the local
// weights, ROW_SLICE for the local sum, the slot's groups for the sums: far inside llvmpipe's
// loop limit (docs/ARCHITECTURE.md).

#extension GL_EXT_control_flow_attributes : require

#include "self_tensor.glsl"
#include "storage.glsl"

layout(local_size_x_id = 0) in;
#include "interface/decode_output.h"
PSK_DECLARE_SPECS(PSK_DECODE_OUTPUT_SPEC)
PSK_DECLARE_BINDINGS(PSK_DECODE_OUTPUT_BINDINGS)

const uint Z_STRIDE = VALUE_DIM + 1u;
const uint COLS = (Z_STRIDE + WG - 1u) / WG;  // columns of [v | 1] per invocation: lid + m WG
const uint ACC = HEAD_RATIO * COLS;
const uint CHUNK = 8u;  // features or block rows whose loads are issued together
// Slot partials the last workgroup loads together: about 32 values in flight per invocation.
const uint COMBINE_CHUNK = ACC >= 32u ? 1u : ACC <= 2u ? 16u : 32u / ACC;

// Binding 0 is the step state: h and the block rows, the feature rows (read) and, from word
// `work`, the workspace.
layout(std430, binding = BINDING_STEP_STATE) buffer StepState { float st[]; };
layout(std430, binding = BINDING_STEP_STATE) readonly buffer Features { float features[]; };
layout(std430, binding = BINDING_STEP_STATE) coherent buffer Workspace { uint ws[]; };
layout(std430, binding = BINDING_Q_ROWS) readonly buffer QRows { ELEM q_data[]; };
layout(std430, binding = BINDING_K_ROWS) readonly buffer KRows { ELEM k_data[]; };
layout(std430, binding = BINDING_V_ROWS) readonly buffer VRows { ELEM v_data[]; };
layout(std430, binding = BINDING_WEIGHTS) readonly buffer Weights { vec4 w_vec[]; };
layout(std430, binding = BINDING_PAIRS) readonly buffer Pairs { uint pairs[]; };
layout(std430, binding = BINDING_Z) buffer State { float z[]; };
layout(std430, binding = BINDING_OUT) writeonly buffer Out { ELEM o_data[]; };

#define H_SUM(i) st[params.block_sum + (i)]
#define BLOCK_K(i) st[params.block_k + (i)]
#define BLOCK_V(i) st[params.block_v + (i)]

shared float sk[SKETCH];                   // S(k) of the new token
shared float sq[HEAD_RATIO * SKETCH];      // S(q) of the slot's query heads
shared float ql[HEAD_RATIO * HEAD_DIM];    // LOCAL_EXACT: their q'
shared float kl[HEAD_DIM];                 // LOCAL_EXACT: the new token's k'
shared float vv[COLS * WG];                // [v | 1] of the new token (zero past it: unguarded stores)
shared float weights[HEAD_RATIO * ROW_SLICE];
shared float den[HEAD_RATIO];
shared bool last_shared;

#if defined(SKETCH_RANDOM)
#include "decode_token_sketch.glsl"
#elif !defined(SKETCH_LEARNED)
#error "define SKETCH_RANDOM or SKETCH_LEARNED"
#endif

float weight_power(float x) {
    float w = x;  // x^DEGREE by repeated squaring (DEGREE is a power of two)
    [[unroll]] for (uint e = 1u; e < DEGREE; e *= 2u) w *= w;
    return w;
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint group = gl_WorkGroupID.x, slot = gl_WorkGroupID.y;
    const uint seq = slot / params.kv_heads;
    const uint q_row0 = seq * params.q_heads + (slot % params.kv_heads) * HEAD_RATIO;
    const uint groups = params.feature_groups + params.row_groups;
    // Rows of the unfinished block before this token; the token is row `before`.
    const uint before = LOCAL_EXACT ? ws[params.work + seq] : 0u;
    const uint rows = before + 1u;

    // [v | 1]: every lane loads (a clamped column) and stores without a guard, so the loads are in
    // flight together with the token's q and k rows below (shaders/staging.glsl).
    [[unroll]] for (uint m = 0u; m < COLS; ++m) {
        const uint c = lid + m * WG;
        const float x = LOAD_ELEM(v_data[slot * VALUE_DIM + min(c, VALUE_DIM - 1u)]);
        vv[c] = c < VALUE_DIM ? x : c == VALUE_DIM ? 1.0 : 0.0;
    }
#if defined(SKETCH_RANDOM)
    token_sketch(lid, q_row0, slot);
#else
    for (uint d = lid; d < SKETCH; d += WG) sk[d] = features[params.k_sketch + slot * SKETCH + d];
    for (uint i = lid; i < HEAD_RATIO * SKETCH; i += WG) sq[i] = features[params.q_sketch + q_row0 * SKETCH + i];
    if (LOCAL_EXACT) {
        for (uint i = lid; i < HEAD_RATIO * HEAD_DIM; i += WG) ql[i] = features[params.q_local + q_row0 * HEAD_DIM + i];
        for (uint d = lid; d < HEAD_DIM; d += WG) kl[d] = features[params.k_local + slot * HEAD_DIM + d];
    }
    barrier();
#endif

    float acc[ACC];
    [[unroll]] for (uint i = 0u; i < ACC; ++i) acc[i] = 0.0;

    if (group < params.feature_groups) {
        // Features [f0, f1) of z (and h): the token joins them, then phi(q)^T z over them. CHUNK
        // features at a time: their loads are issued together, so a chunk waits for one load
        // latency instead of one per feature (a GPU does not overlap the iterations of a loop
        // that is not unrolled).
        const uint f0 = group * FEATURE_SLICE, f1 = min(f0 + FEATURE_SLICE, params.features);
        const bool completes = LOCAL_EXACT && rows == BLOCK;
        const uint base = slot * params.features * Z_STRIDE;
        [[dont_unroll]] for (uint fc = f0; fc < f1; fc += CHUNK) {
            uint entry[CHUNK];
            float zc[CHUNK * COLS], hc[CHUNK * COLS];
            // Without branches (shaders/staging.glsl): every load reads a feature and column this
            // workgroup owns (clamped: the slice's last feature, the last column), and what is not
            // live is selected away after it, so no load waits alone under a condition.
            [[unroll]] for (uint u = 0u; u < CHUNK; ++u) {
                const uint f = fc + u, fl = min(f, f1 - 1u);
                entry[u] = pairs[fl];
                [[unroll]] for (uint m = 0u; m < COLS; ++m) {
                    const uint c = lid + m * WG;
                    const bool live = f < f1 && c < Z_STRIDE;
                    const uint at = base + fl * Z_STRIDE + min(c, Z_STRIDE - 1u);
                    const float zl = z[at];
                    zc[u * COLS + m] = live ? zl : 0.0;
                    if (LOCAL_EXACT) {
                        const float hl = H_SUM(at);
                        hc[u * COLS + m] = live ? hl : 0.0;
                    } else {
                        hc[u * COLS + m] = 0.0;
                    }
                }
            }
            [[unroll]] for (uint u = 0u; u < CHUNK; ++u) {
                const uint f = fc + u;
                if (f < f1) {
                    const float coef = pair_coefficient(entry[u]);
                    const uint a = pair_first(entry[u]), b = pair_second(entry[u]);
                    const float pk = coef * sk[a] * sk[b];
                    float pq[HEAD_RATIO];
                    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) pq[g] = coef * sq[g * SKETCH + a] * sq[g * SKETCH + b];
                    [[unroll]] for (uint m = 0u; m < COLS; ++m) {
                        const uint c = lid + m * WG;
                        if (c < Z_STRIDE) {
                            const uint at = base + f * Z_STRIDE + c;
                            const float add = pk * vv[c];
                            float zf = zc[u * COLS + m];
                            if (!LOCAL_EXACT) {
                                zf = zf + add;  // j <= i includes the token itself
                                z[at] = zf;
                            }
                            [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) acc[g * COLS + m] += pq[g] * zf;
                            if (LOCAL_EXACT) {
                                const float hf = hc[u * COLS + m] + add;
                                if (completes) {  // the block is complete: its sum joins z
                                    z[at] = zf + hf;
                                    H_SUM(at) = 0.0;
                                } else {
                                    H_SUM(at) = hf;
                                }
                            }
                        }
                    }
                }
            }
        }
    } else if (LOCAL_EXACT) {
        // Rows [j0, j1) of the unfinished block, the token's row `before` from the step's own k', v.
        const uint j0 = (group - params.feature_groups) * ROW_SLICE, j1 = min(j0 + ROW_SLICE, rows);
        const uint k_base = slot * BLOCK * HEAD_DIM, v_base = slot * BLOCK * VALUE_DIM;
        if (before >= j0 && before < j0 + ROW_SLICE) {  // the token's rows join the block
            for (uint d = lid; d < HEAD_DIM; d += WG) BLOCK_K(k_base + before * HEAD_DIM + d) = kl[d];
            for (uint c = lid; c < VALUE_DIM; c += WG) BLOCK_V(v_base + before * VALUE_DIM + c) = vv[c];
        }
        if (j0 < j1) {  // uniform in the workgroup: the barrier below is reached by all or none
            for (uint i = lid; i < HEAD_RATIO * ROW_SLICE; i += WG) {
                const uint g = i / ROW_SLICE, j = j0 + i % ROW_SLICE;
                float w = 0.0;
                if (j < j1) {
                    // The key row's loads unrolled (issued together), the products summed in order.
                    float s = 0.0;
                    if (j == before) {
                        [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) s += ql[g * HEAD_DIM + d] * kl[d];
                    } else {
                        [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) s += ql[g * HEAD_DIM + d] * BLOCK_K(k_base + j * HEAD_DIM + d);
                    }
                    w = weight_power(s);
                }
                weights[i] = w;
            }
            barrier();
            [[dont_unroll]] for (uint jc = j0; jc < j1; jc += CHUNK) {  // CHUNK value rows' loads at a time
                // Branch-free: every lane loads a row this dispatch does not write (j itself
                // where it is finished, j < before; else a finished row, or row 1 of a block the
                // token starts, stale and selected away) and selects afterwards; the token's row
                // comes from vv (the block row `before` is written by this workgroup above, and
                // is not read back).
                float xc[CHUNK * COLS];
                [[unroll]] for (uint u = 0u; u < CHUNK; ++u) {
                    const uint j = jc + u;
                    const uint jl = j < before ? j : before > 0u ? before - 1u : min(1u, BLOCK - 1u);
                    [[unroll]] for (uint m = 0u; m < COLS; ++m) {
                        const uint c = lid + m * WG;
                        // Both operands read, then selects of values (a load in one arm of a
                        // conditional is sunk into it and waited for alone).
                        const float xv = BLOCK > 1u ? BLOCK_V(v_base + jl * VALUE_DIM + min(c, VALUE_DIM - 1u)) : 0.0;
                        const float xt = vv[c];
                        xc[u * COLS + m] = c < VALUE_DIM ? (j == before ? xt : xv) : c == VALUE_DIM ? 1.0 : 0.0;  // rows past j1: not summed below
                    }
                }
                [[unroll]] for (uint u = 0u; u < CHUNK; ++u) {
                    const uint j = jc + u;
                    if (j < j1)
                        [[unroll]] for (uint m = 0u; m < COLS; ++m)
                            [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g)
                                acc[g * COLS + m] += weights[g * ROW_SLICE + j - j0] * xc[u * COLS + m];
                }
            }
        }
    }

    // This workgroup's partial sums, then its count; the slot's last workgroup combines.
    const uint slots = params.batch * params.kv_heads;
    const uint partial0 = params.work + 2u * params.batch + slots + slot * groups * HEAD_RATIO * Z_STRIDE;
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g)
        [[unroll]] for (uint m = 0u; m < COLS; ++m) {
            const uint c = lid + m * WG;
            if (c < Z_STRIDE) ws[partial0 + (group * HEAD_RATIO + g) * Z_STRIDE + c] = floatBitsToUint(acc[g * COLS + m]);
        }
    memoryBarrierBuffer();
    barrier();
    if (lid == 0u) last_shared = atomicAdd(ws[params.work + params.batch + slot], 1u) == groups - 1u;
    barrier();
    if (!last_shared) return;
    memoryBarrierBuffer();

    // The slot's sums in group order (fixed, whatever order the workgroups finished in), the
    // partials of COMBINE_CHUNK groups loaded together (clamped to the last group, the surplus
    // selected away): one memory latency per chunk, not one per group and column.
    [[unroll]] for (uint i = 0u; i < ACC; ++i) acc[i] = 0.0;
    [[dont_unroll]] for (uint s0 = 0u; s0 < groups; s0 += COMBINE_CHUNK) {
        float part[COMBINE_CHUNK * ACC];
        [[unroll]] for (uint u = 0u; u < COMBINE_CHUNK; ++u) {
            const uint s = min(s0 + u, groups - 1u);
            [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g)
                [[unroll]] for (uint m = 0u; m < COLS; ++m) {
                    const uint c = min(lid + m * WG, Z_STRIDE - 1u);
                    part[u * ACC + g * COLS + m] = uintBitsToFloat(ws[partial0 + (s * HEAD_RATIO + g) * Z_STRIDE + c]);
                }
        }
        [[unroll]] for (uint u = 0u; u < COMBINE_CHUNK; ++u)
            [[unroll]] for (uint i = 0u; i < ACC; ++i) acc[i] += s0 + u < groups ? part[u * ACC + i] : 0.0;
    }
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g)
        [[unroll]] for (uint m = 0u; m < COLS; ++m)
            if (lid + m * WG == VALUE_DIM) den[g] = acc[g * COLS + m];
    barrier();
    [[unroll]] for (uint g = 0u; g < HEAD_RATIO; ++g) {
        const float inv = 1.0 / (1.0 + den[g]);
        [[unroll]] for (uint m = 0u; m < COLS; ++m) {
            const uint c = lid + m * WG;
            if (c < VALUE_DIM) o_data[(q_row0 + g) * VALUE_DIM + c] = STORE_ELEM(acc[g * COLS + m] * inv);
        }
    }
    if (lid == 0u) {
        ws[params.work + params.batch + slot] = 0u;  // ready for the next step
        // Once per step: the count a state of replayable steps reads back for its positions.
        if (slot == 0u) atomicAdd(ws[params.steps], 1u);
        if (LOCAL_EXACT) {
            // The sequence's last slot advances its row count (the block restarts when complete).
            const uint seq_counter = params.work + params.batch + slots + seq;
            if (atomicAdd(ws[seq_counter], 1u) == params.kv_heads - 1u) {
                ws[params.work + seq] = rows == BLOCK ? 0u : rows;
                ws[seq_counter] = 0u;
            }
        }
    }
}
