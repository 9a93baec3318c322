#version 450
// Polysketch feature map, first half: the sketch S(x) of every row of q or k (docs/MATH.md sections 3-5).
// A workgroup owns ROWS consecutive rows (ROWS invocations). The tile of rows is staged in shared
// memory with coalesced loads (consecutive invocations read consecutive floats of a row), each
// invocation then applies the optional LayerNorm and the score scale to one row in place, and the
// local rows are written back coalesced. The self-tensoring phi = psi(S) is not materialized
// here: the block-state and output kernels expand psi on the fly (self_tensor.glsl), because psi
// has r(r+1)/2 entries per row against r for S.
//
//   SKETCH_RANDOM, LEVELS = 0:  S(x) = x                                     (degree 2)
//                  LEVELS = 1:  S(x) = c (x @ G1_0a) * (x @ G1_0b)           (degree 4)
//                  LEVELS = 2:  n_i = c (x @ G1_ia) * (x @ G1_ib), S = c (n_0 @ G2_0a) * (n_1 @ G2_0b)
//                  c = node_scale: 1/sqrt(r) (unbiased) or 1/r (google-research "reference").
//   SKETCH_LEARNED:             f_b = FF_b1(FF_b0(x)), FF(y) = gelu(LN(y) @ D1) @ D2,
//                               S(x) = sqrt(r) tanh(f_1 * f_2 / sqrt(r))     (degree 4)
//
// LEVELS = 1 (the p = 4 random sketch) runs as a small product from shared memory: invocation
// (r4, cg) owns 4 rows and the columns cg, cg + 4, ... of a 32-column pass, for both factors (64
// accumulators); the weights of the pass are staged W_CHUNK input columns at a time, so that each
// weight read from shared memory feeds 4 rows and each x read 16 columns. S is written through a
// shared tile, coalesced. The learned sketch with LEARNED_TILE = HC > 0 runs the same way: per FF
// level the LayerNorm'd inputs of the tile sit in shared memory (act), and per chunk of HC hidden
// units invocation (r4, cg) computes 4 rows x HC / 4 units of act @ D1 (the chunk of D1 staged),
// gelu into the shared hidden tile, then adds 4 rows x r / 4 columns of hidden @ D2 (the chunk of
// D2 staged in the same region) to its accumulators: each weight read feeds 4 rows, each input
// read HC / 4 units or r / 4 columns. With one row per invocation and the weights read as uniform
// vec4s (LEARNED_TILE = 0, and the other random sketches) a weight feeds one row: 4 bytes through
// the shared/L1 data path per multiply-add, which bounds that form at a quarter of the FP32 rate
// (docs/MODEL.md, "The learned feature map, tiled").
//
// Outputs (float32 whatever the storage type, rows in [batch][head][token] order):
//   sketch_out: S(x) rows of SKETCH floats, x = LN_qk(row) * scale;
//   local_out (when FLAG_WRITE_LOCAL): the rows the exact local part uses, HEAD_DIM floats:
//             LN_local(row) * scale with FLAG_LOCAL_LN, else x itself.
// Weights: matrices are stored transposed (one output column per contiguous row) so the inner
// product over the input walks memory contiguously; offsets (in floats) arrive as push constants.
//
// Loop bounds: per invocation at most ceil(r / 32) (ceil(h / W_CHUNK) + 2) steps of W_CHUNK
// (LEVELS = 1), 2 r (other random sketches), 4 * 8r (learned, one row per invocation) or, tiled,
// 4 * (8r / HC) chunks of (staging + inputs + staging + units) iterations (the planner counts
// them and keeps one row per invocation on a CPU driver past its budget) of loops that are not
// unrolled, plus the staging loops (ceil(h / ...) each); see the llvmpipe loop limit in
// docs/ARCHITECTURE.md.

// ABLATE (timing only, PSK_ABLATE; interface/sketch_features.h): a part left out, so that a GPU's
// stage times say what each part costs; zero in every plan but a timing's.

#extension GL_EXT_control_flow_attributes : require

#include "sketch_activations.glsl"
#include "storage.glsl"
#include "tensor_strides.glsl"

layout(local_size_x_id = 0) in;
#include "interface/sketch_features.h"
PSK_DECLARE_SPECS(PSK_SKETCH_FEATURES_SPEC)
#define PSK_STAGE_ROLLED_SPEC  // STAGE_ROLLED is this kernel's specialization constant (generic.stage_rolled)
#include "staging.glsl"
PSK_DECLARE_BINDINGS(PSK_SKETCH_FEATURES_BINDINGS)

layout(std430, binding = BINDING_X_ROWS) readonly buffer XBuffer { ELEM x_data[]; };
// Every packed tensor starts on a vec4 (sketch_pack.cpp), so weight rows whose length is a
// multiple of 4 are read 4 floats per load: on llvmpipe a load costs about the same whatever its
// width, and these broadcast reads dominate the kernel.
layout(std430, binding = BINDING_WEIGHTS) readonly buffer Weights { vec4 w_vec[]; };
#define W(i) w_vec[(i) >> 2][(i) & 3u]
layout(std430, binding = BINDING_SKETCH_OUT) writeonly buffer SketchOut { float sketch_out[]; };
layout(std430, binding = BINDING_LOCAL_OUT) writeonly buffer LocalOut { float local_out[]; };
// LEVELS = 2: the two level-1 nodes of each row, [row][2][SKETCH]. They pass through memory (each
// invocation reads back only what it wrote) and are reloaded with constant indices, so that no
// register array is ever indexed dynamically: llvmpipe compiles such arrays extremely slowly.
layout(std430, binding = BINDING_NODES) buffer NodeScratch { float node_scratch[]; };

const float LN_EPS = 1e-5;

// LayerNorm in place over a register array of LEN floats (population variance, eps inside).
#define LAYER_NORM(v, LEN, scale_off, bias_off)                                              \
    {                                                                                        \
        float mean_ = 0.0;                                                                   \
        [[unroll]] for (uint d_ = 0u; d_ < LEN; ++d_) mean_ += v[d_];                        \
        mean_ /= float(LEN);                                                                 \
        float var_ = 0.0;                                                                    \
        [[unroll]] for (uint d_ = 0u; d_ < LEN; ++d_) var_ += (v[d_] - mean_) * (v[d_] - mean_); \
        const float inv_ = inversesqrt(var_ / float(LEN) + LN_EPS);                          \
        [[unroll]] for (uint d_ = 0u; d_ < LEN; ++d_)                                        \
            v[d_] = (v[d_] - mean_) * inv_ * W((scale_off) + d_) + W((bias_off) + d_); \
    }

#if defined(SKETCH_LEARNED)
// One FF level with input length IN (HEAD_DIM or SKETCH): out = gelu(LN(in) @ D1) @ D2, streaming
// over the HIDDEN units so the hidden activations never need storage.
#define FEED_FORWARD(in_v, IN, out_v, ff)                                                    \
    {                                                                                        \
        const uint base_ = 4u * (ff);                                                        \
        LAYER_NORM(in_v, IN, params.w[base_], params.w[base_ + 1u]);                         \
        [[unroll]] for (uint c_ = 0u; c_ < SKETCH; ++c_) out_v[c_] = 0.0;                    \
        const uint d1_ = params.w[base_ + 2u], d2_ = params.w[base_ + 3u];                   \
        [[dont_unroll]] for (uint u_ = 0u; u_ < HIDDEN; ++u_) {                                              \
            float a_;                                                                        \
            DOT_ROW(in_v, IN, d1_ + u_ * IN, a_);                                            \
            const float g_ = gelu_tanh(a_);                                                  \
            if (SKETCH % 4u == 0u) {                                                         \
                [[unroll]] for (uint c4_ = 0u; c4_ < SKETCH / 4u; ++c4_) {                   \
                    const vec4 w4_ = w_vec[((d2_ + u_ * SKETCH) >> 2) + c4_];                \
                    [[unroll]] for (uint e_ = 0u; e_ < 4u; ++e_) out_v[4u * c4_ + e_] += g_ * w4_[e_]; \
                }                                                                            \
            } else {                                                                         \
                [[unroll]] for (uint c_ = 0u; c_ < SKETCH; ++c_) out_v[c_] += g_ * W(d2_ + u_ * SKETCH + c_); \
            }                                                                                \
        }                                                                                    \
    }
#endif

// Inner product of a register array of LEN floats with the contiguous weight row at `off`
// (a multiple of 4 whenever LEN is: rows of a packed tensor start on vec4s).
#define DOT_ROW(v, LEN, off, result)                                                         \
    {                                                                                        \
        result = 0.0;                                                                        \
        if ((LEN) % 4u == 0u) {                                                              \
            const uint o4_ = (off) >> 2;                                                     \
            [[unroll]] for (uint d4_ = 0u; d4_ < (LEN) / 4u; ++d4_)                          \
                result += dot(vec4(v[4u * d4_], v[4u * d4_ + 1u], v[4u * d4_ + 2u], v[4u * d4_ + 3u]), w_vec[o4_ + d4_]); \
        } else {                                                                             \
            [[unroll]] for (uint d_ = 0u; d_ < LEN; ++d_) result += v[d_] * W((off) + d_);   \
        }                                                                                    \
    }

const uint XS = HEAD_DIM + 1u;  // staged row stride: odd, so one row per invocation reads conflict-free
const uint CW = 32u;           // LEVELS = 1: sketch columns per pass (8 per invocation, interleaved by 4)
const uint GS = 2u * CW + 1u;  // a staged weight row: CW columns of each factor, padded
const uint SS = CW + 1u;       // a staged S row
const uint GT_FLOATS = W_CHUNK * GS > ROWS * SS ? W_CHUNK * GS : ROWS * SS;
shared float xs[ROWS * XS];
#if defined(SKETCH_RANDOM)
shared float gt[GT_FLOATS];
#else
// The tiled learned sketch (LEARNED_TILE = HC > 0): a level's LayerNorm'd inputs (AIN columns at
// most: h, then r), the chunk's hidden activations, and one staging region that holds the chunk
// of D1 ([input][unit]) and then the chunk of D2 ([unit][column]). Rows are padded to odd strides
// (consecutive rows on different banks). Sized 1 when LEARNED_TILE = 0.
const uint HC = LEARNED_TILE > 0u ? LEARNED_TILE : 4u;
const uint AIN = HEAD_DIM > SKETCH ? HEAD_DIM : SKETCH;
const uint AS = AIN + 1u;
const uint HS = HC + 1u;
const uint OS = SKETCH + 1u;
const uint WT_FLOATS = AIN * HS > HC * OS ? AIN * HS : HC * OS;
const uint HC4 = HC / 4u;                 // hidden units per invocation and chunk
const uint OC = (SKETCH + 3u) / 4u;       // sketch columns per invocation (r a multiple of 4 when tiled)
shared float act[LEARNED_TILE != 0u ? ROWS * AS : 1u];
shared float hid[LEARNED_TILE != 0u ? ROWS * HS : 1u];
shared float wt[LEARNED_TILE != 0u ? WT_FLOATS : 1u];
#endif
shared vec2 row_stats[ROWS];

// Mean and 1 / sqrt(variance + eps) of staged row `row` (population variance, as LAYER_NORM).
vec2 staged_row_stats(uint row) {
    float mean = 0.0;
    for (uint d = 0u; d < HEAD_DIM; ++d) mean += xs[row * XS + d];
    mean /= float(HEAD_DIM);
    float var = 0.0;
    for (uint d = 0u; d < HEAD_DIM; ++d) var += (xs[row * XS + d] - mean) * (xs[row * XS + d] - mean);
    return vec2(mean, inversesqrt(var / float(HEAD_DIM) + LN_EPS));
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint row0 = gl_WorkGroupID.x * ROWS;
    const uint row = row0 + lid;
    const uint rows_here = min(ROWS, params.n - min(params.n, row0));
    const uint head = gl_WorkGroupID.y, batch = gl_WorkGroupID.z;
    const uint out_row0 = (batch * params.heads + head) * params.n + row0;
    const uint out_row = out_row0 + lid;

    // The tile's rows, coalesced (zeros past n), STAGE_BATCH loads in flight per invocation.
    STAGED_COPY(ROWS * HEAD_DIM, ROWS, lid,
                LOAD_ELEM(x_data[tensor_row(params.x_strides, batch, head, row0 + min(i / HEAD_DIM, max(rows_here, 1u) - 1u)) + i % HEAD_DIM]),
                (ABLATE & 2u) == 0u && i / HEAD_DIM < rows_here, xs[(i / HEAD_DIM) * XS + i % HEAD_DIM] = v)
    barrier();
    if ((ABLATE & 4u) == 0u && (params.flags & (FLAG_WRITE_LOCAL | FLAG_LOCAL_LN)) == (FLAG_WRITE_LOCAL | FLAG_LOCAL_LN)) {
        row_stats[lid] = staged_row_stats(lid);
        barrier();
        for (uint i = lid; i < rows_here * HEAD_DIM; i += ROWS) {
            const uint r = i / HEAD_DIM, d = i % HEAD_DIM;
            const vec2 st = row_stats[r];
            local_out[out_row0 * HEAD_DIM + i] =
                ((xs[r * XS + d] - st.x) * st.y * W(params.local_ln_scale + d) + W(params.local_ln_bias + d)) * params.scale;
        }
        barrier();
    }
    // The invocation's row in place: x = LN_qk(row) * scale.
    {
        const vec2 st = (params.flags & FLAG_QK_LN) != 0u ? staged_row_stats(lid) : vec2(0.0, 1.0);
        for (uint d = 0u; d < HEAD_DIM; ++d) {
            const float v = xs[lid * XS + d];
            xs[lid * XS + d] = ((params.flags & FLAG_QK_LN) != 0u ? (v - st.x) * st.y * W(params.ln_scale + d) + W(params.ln_bias + d) : v) *
                               params.scale;
        }
    }
    barrier();
    if ((ABLATE & 4u) == 0u && (params.flags & (FLAG_WRITE_LOCAL | FLAG_LOCAL_LN)) == FLAG_WRITE_LOCAL) {
        for (uint i = lid; i < rows_here * HEAD_DIM; i += ROWS) local_out[out_row0 * HEAD_DIM + i] = xs[(i / HEAD_DIM) * XS + i % HEAD_DIM];
    }

#if defined(SKETCH_RANDOM)
    if (LEVELS == 0u) {
        for (uint i = lid; i < rows_here * HEAD_DIM; i += ROWS) sketch_out[out_row0 * SKETCH + i] = xs[(i / HEAD_DIM) * XS + i % HEAD_DIM];
        return;
    }
    if (LEVELS == 1u) {
        const uint r4 = lid / 4u, cg = lid % 4u;
        for (uint c0 = 0u; c0 < SKETCH; c0 += CW) {
            float a[4][8], b[4][8];  // [row 4 r4 + e][column c0 + cg + 4 m]
            [[unroll]] for (uint e = 0u; e < 4u; ++e)
                [[unroll]] for (uint m = 0u; m < 8u; ++m) {
                    a[e][m] = 0.0;
                    b[e][m] = 0.0;
                }
            for (uint d0 = 0u; d0 < HEAD_DIM; d0 += W_CHUNK) {
                barrier();
                // gt[d][g CW + cc] = G_g[column c0 + cc][input d0 + d] (zero past r or h); consecutive invocations, consecutive d.
                // i = (g CW + cc) W_CHUNK + d.
                STAGED_COPY(2u * CW * W_CHUNK, ROWS, lid,
                            W(params.w[i / W_CHUNK / CW] + min(c0 + (i / W_CHUNK) % CW, SKETCH - 1u) * HEAD_DIM + min(d0 + i % W_CHUNK, HEAD_DIM - 1u)),
                            c0 + (i / W_CHUNK) % CW < SKETCH && d0 + i % W_CHUNK < HEAD_DIM,
                            gt[(i % W_CHUNK) * GS + i / W_CHUNK] = v)
                barrier();
                for (uint d = 0u; d < ((ABLATE & 1u) != 0u ? 0u : W_CHUNK); ++d) {
                    const uint dx = min(d0 + d, HEAD_DIM - 1u);  // past h the weights are zero
                    float xv[4];
                    [[unroll]] for (uint e = 0u; e < 4u; ++e) xv[e] = xs[(4u * r4 + e) * XS + dx];
                    [[unroll]] for (uint m = 0u; m < 8u; ++m) {
                        const float wa = gt[d * GS + cg + 4u * m], wb = gt[d * GS + CW + cg + 4u * m];
                        [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                            a[e][m] += xv[e] * wa;
                            b[e][m] += xv[e] * wb;
                        }
                    }
                }
            }
            barrier();
            [[unroll]] for (uint e = 0u; e < 4u; ++e)
                [[unroll]] for (uint m = 0u; m < 8u; ++m) gt[(4u * r4 + e) * SS + cg + 4u * m] = params.node_scale * a[e][m] * b[e][m];
            barrier();
            const uint cols = min(CW, SKETCH - c0);
            for (uint i = lid; i < rows_here * cols; i += ROWS) {
                const uint r = i / cols, cc = i % cols;
                sketch_out[(out_row0 + r) * SKETCH + c0 + cc] = gt[r * SS + cc];
            }
        }
        return;
    }
#endif
#if defined(SKETCH_LEARNED)
    if (LEARNED_TILE != 0u) {
        const uint r4 = lid / 4u, cg = lid % 4u;  // rows 4 r4 .. 4 r4 + 3; units / columns cg + 4 m
        float f1[4][OC], o[4][OC];
        [[dont_unroll]] for (uint branch = 0u; branch < 2u; ++branch) {
            [[dont_unroll]] for (uint level = 0u; level < 2u; ++level) {
                const uint base = 4u * (2u * branch + level);
                const uint in_len = level == 0u ? HEAD_DIM : SKETCH;
                // act = LN(the level's input): x, or level 0's sums (already in act), one row per invocation.
                barrier();  // the sums are in act; the previous level's reads of act are done
                {
                    float mean = 0.0;
                    for (uint d = 0u; d < in_len; ++d) mean += level == 0u ? xs[lid * XS + d] : act[lid * AS + d];
                    mean /= float(in_len);
                    float var = 0.0;
                    for (uint d = 0u; d < in_len; ++d) {
                        const float v = (level == 0u ? xs[lid * XS + d] : act[lid * AS + d]) - mean;
                        var += v * v;
                    }
                    const float inv = inversesqrt(var / float(in_len) + LN_EPS);
                    for (uint d = 0u; d < in_len; ++d) {
                        const float v = level == 0u ? xs[lid * XS + d] : act[lid * AS + d];
                        act[lid * AS + d] = (v - mean) * inv * W(params.w[base] + d) + W(params.w[base + 1u] + d);
                    }
                }
                [[unroll]] for (uint e = 0u; e < 4u; ++e)
                    [[unroll]] for (uint m = 0u; m < OC; ++m) o[e][m] = 0.0;
                const uint d1 = params.w[base + 2u], d2 = params.w[base + 3u];
                [[dont_unroll]] for (uint u0 = 0u; u0 < HIDDEN; u0 += HC) {
                    barrier();  // act is written (first chunk); wt and hid of the previous chunk are read
                    // D1^T is packed HIDDEN x in (unit u's weights contiguous): consecutive invocations, consecutive inputs.
                    STAGED_COPY(in_len * HC, ROWS, lid, W(d1 + min(u0 + i / in_len, HIDDEN - 1u) * in_len + i % in_len), u0 + i / in_len < HIDDEN,
                                wt[(i % in_len) * HS + i / in_len] = v)
                    barrier();
                    float h[4][HC4];
                    [[unroll]] for (uint e = 0u; e < 4u; ++e)
                        [[unroll]] for (uint m = 0u; m < HC4; ++m) h[e][m] = 0.0;
                    for (uint d = 0u; d < in_len; ++d) {
                        float xv[4];
                        [[unroll]] for (uint e = 0u; e < 4u; ++e) xv[e] = act[(4u * r4 + e) * AS + d];
                        [[unroll]] for (uint m = 0u; m < HC4; ++m) {
                            const float w = wt[d * HS + cg + 4u * m];
                            [[unroll]] for (uint e = 0u; e < 4u; ++e) h[e][m] += xv[e] * w;
                        }
                    }
                    barrier();  // the D1 chunk is read: D2's takes its place
                    [[unroll]] for (uint e = 0u; e < 4u; ++e)
                        [[unroll]] for (uint m = 0u; m < HC4; ++m) hid[(4u * r4 + e) * HS + cg + 4u * m] = gelu_tanh(h[e][m]);
                    // D2 is packed HIDDEN x r, row-major: rows u0 .. of this chunk.
                    STAGED_COPY(HC * SKETCH, ROWS, lid, W(d2 + min(u0 + i / SKETCH, HIDDEN - 1u) * SKETCH + i % SKETCH), u0 + i / SKETCH < HIDDEN,
                                wt[(i / SKETCH) * OS + i % SKETCH] = v)
                    barrier();
                    for (uint u = 0u; u < HC; ++u) {
                        float hv[4];
                        [[unroll]] for (uint e = 0u; e < 4u; ++e) hv[e] = hid[(4u * r4 + e) * HS + u];
                        [[unroll]] for (uint m = 0u; m < OC; ++m) {
                            const float w = wt[u * OS + cg + 4u * m];
                            [[unroll]] for (uint e = 0u; e < 4u; ++e) o[e][m] += hv[e] * w;
                        }
                    }
                }
                if (level == 0u) {
                    barrier();  // every product has read act
                    [[unroll]] for (uint e = 0u; e < 4u; ++e)
                        [[unroll]] for (uint m = 0u; m < OC; ++m) act[(4u * r4 + e) * AS + cg + 4u * m] = o[e][m];
                }
            }
            if (branch == 0u) f1 = o;
        }
        // S = sqrt(r) tanh(f_1 * f_2 / sqrt(r)) through act, written out coalesced.
        const float root_r = sqrt(float(SKETCH));
        barrier();
        [[unroll]] for (uint e = 0u; e < 4u; ++e)
            [[unroll]] for (uint m = 0u; m < OC; ++m)
                act[(4u * r4 + e) * AS + cg + 4u * m] = root_r * stable_tanh(f1[e][m] * o[e][m] / root_r);
        barrier();
        for (uint i = lid; i < rows_here * SKETCH; i += ROWS) sketch_out[out_row0 * SKETCH + i] = act[(i / SKETCH) * AS + i % SKETCH];
        return;
    }
#endif
    if (row >= params.n) return;  // no barriers past this point
    float x[HEAD_DIM];
    [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) x[d] = xs[lid * XS + d];

    const uint s_base = out_row * SKETCH;
#if defined(SKETCH_RANDOM)
    {  // LEVELS == 2
        const uint n_base = out_row * 2u * SKETCH;
        [[dont_unroll]] for (uint c = 0u; c < SKETCH; ++c) {
            float a, b, e, f;
            DOT_ROW(x, HEAD_DIM, params.w[0] + c * HEAD_DIM, a);
            DOT_ROW(x, HEAD_DIM, params.w[1] + c * HEAD_DIM, b);
            DOT_ROW(x, HEAD_DIM, params.w[2] + c * HEAD_DIM, e);
            DOT_ROW(x, HEAD_DIM, params.w[3] + c * HEAD_DIM, f);
            node_scratch[n_base + c] = params.node_scale * a * b;
            node_scratch[n_base + SKETCH + c] = params.node_scale * e * f;
        }
        float n0[SKETCH], n1[SKETCH];
        [[unroll]] for (uint d = 0u; d < SKETCH; ++d) {
            n0[d] = node_scratch[n_base + d];
            n1[d] = node_scratch[n_base + SKETCH + d];
        }
        [[dont_unroll]] for (uint c = 0u; c < SKETCH; ++c) {
            float a, b;
            DOT_ROW(n0, SKETCH, params.w[4] + c * SKETCH, a);
            DOT_ROW(n1, SKETCH, params.w[5] + c * SKETCH, b);
            sketch_out[s_base + c] = params.node_scale * a * b;
        }
    }
#elif defined(SKETCH_LEARNED)
    float f1[SKETCH], f2[SKETCH], mid[SKETCH];
    {
        float in0[HEAD_DIM];
        [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) in0[d] = x[d];
        FEED_FORWARD(in0, HEAD_DIM, mid, 0u);
        FEED_FORWARD(mid, SKETCH, f1, 1u);
    }
    {
        float in0[HEAD_DIM];
        [[unroll]] for (uint d = 0u; d < HEAD_DIM; ++d) in0[d] = x[d];
        FEED_FORWARD(in0, HEAD_DIM, mid, 2u);
        FEED_FORWARD(mid, SKETCH, f2, 3u);
    }
    const float root_r = sqrt(float(SKETCH));
    [[unroll]] for (uint c = 0u; c < SKETCH; ++c) sketch_out[s_base + c] = root_r * stable_tanh(f1[c] * f2[c] / root_r);
#else
#error "define SKETCH_RANDOM or SKETCH_LEARNED"
#endif
}
