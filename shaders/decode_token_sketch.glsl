// The decode step's own feature map of its one token (decode_output.comp, random sketches): every
// workgroup of a slot evaluates, from the token's q rows of the slot's HEAD_RATIO query heads and
// its k row, what the forward's feature map (sketch_features.comp) would write for them: S(q),
// S(k) and, LOCAL_EXACT, q' and k'. The same float32 formulas in the same order (LayerNorm sums
// sequential, inner products four terms at a time), so the rows agree with the forward's to a few
// ulps. The work is (HEAD_RATIO + 1) rows of 2 r inner products of length h (4 of h and 2 of r for
// p = 8): a few thousand multiply-adds per workgroup, against the launch of a separate feature map
// dispatch that it replaces (docs/DECODING.md, "What a step costs").
//
// Expects before inclusion: storage.glsl, the decode_output.h specialization and push constants,
// the buffers q_data, k_data (the storage type) and w_vec (the packed sketch, vec4), and the
// shared arrays sq, sk, ql, kl of decode_output.comp, which token_sketch fills.
#ifndef PSK_DECODE_TOKEN_SKETCH_GLSL
#define PSK_DECODE_TOKEN_SKETCH_GLSL

// Rows of the token a slot needs: r < HEAD_RATIO the query heads, r = HEAD_RATIO the key head.
const uint TOKEN_ROWS = HEAD_RATIO + 1u;
const float LN_EPS = 1e-5;

#define W(i) w_vec[(i) >> 2][(i) & 3u]

// Invocation steps over the rows' elements; the array is padded to them, so the loads' stores take
// no guard.
const uint TOKEN_X_STEPS = (TOKEN_ROWS * HEAD_DIM + WG - 1u) / WG;
shared float token_x[TOKEN_X_STEPS * WG];  // the rows, raw, then LN_qk(row) * scale
shared float row_mean[TOKEN_ROWS], row_inv[TOKEN_ROWS];
// p = 8: the two level-1 nodes of every row, [row][2][SKETCH] (one float otherwise).
shared float token_nodes[(LEVELS / 2u) * TOKEN_ROWS * 2u * SKETCH + 1u];

// Inner product of shared row `x0` (LEN floats of token_x or token_nodes) with the packed weight
// row at `off`, as sketch_features.comp's DOT_ROW sums it.
float dot_token_x(uint x0, uint off) {
    float result = 0.0;
    if (HEAD_DIM % 4u == 0u) {
        const uint o4 = off >> 2;
        for (uint d4 = 0u; d4 < HEAD_DIM / 4u; ++d4)
            result += dot(vec4(token_x[x0 + 4u * d4], token_x[x0 + 4u * d4 + 1u], token_x[x0 + 4u * d4 + 2u], token_x[x0 + 4u * d4 + 3u]),
                          w_vec[o4 + d4]);
    } else {
        for (uint d = 0u; d < HEAD_DIM; ++d) result += token_x[x0 + d] * W(off + d);
    }
    return result;
}
float dot_token_nodes(uint x0, uint off) {
    float result = 0.0;
    if (SKETCH % 4u == 0u) {
        const uint o4 = off >> 2;
        for (uint d4 = 0u; d4 < SKETCH / 4u; ++d4)
            result += dot(vec4(token_nodes[x0 + 4u * d4], token_nodes[x0 + 4u * d4 + 1u], token_nodes[x0 + 4u * d4 + 2u],
                               token_nodes[x0 + 4u * d4 + 3u]),
                          w_vec[o4 + d4]);
    } else {
        for (uint d = 0u; d < SKETCH; ++d) result += token_nodes[x0 + d] * W(off + d);
    }
    return result;
}

void store_token_sketch(uint r, uint c, float s) {
    if (r < HEAD_RATIO) sq[r * SKETCH + c] = s;
    else sk[c] = s;
}

// Fills sq, sk (and ql, kl) for the slot whose query heads start at row q_row0 of q and whose key
// row is row `slot` of k. Called by the whole workgroup (it has barriers); ends with one.
void token_sketch(uint lid, uint q_row0, uint slot) {
    // Every element's q and k loads (clamped rows, the one not wanted selected away) issued before
    // any store, which takes no guard: one memory latency, not one per step and row kind (a load
    // under a condition, or whose store is, is waited for alone: shaders/staging.glsl).
    float x_loaded[TOKEN_X_STEPS];
    [[unroll]] for (uint t = 0u; t < TOKEN_X_STEPS; ++t) {
        const uint i = min(lid + t * WG, TOKEN_ROWS * HEAD_DIM - 1u);
        const uint r = i / HEAD_DIM, d = i % HEAD_DIM;
        const float xq = LOAD_ELEM(q_data[(q_row0 + min(r, HEAD_RATIO - 1u)) * HEAD_DIM + d]);
        const float xk = LOAD_ELEM(k_data[slot * HEAD_DIM + d]);
        x_loaded[t] = r < HEAD_RATIO ? xq : xk;
    }
    [[unroll]] for (uint t = 0u; t < TOKEN_X_STEPS; ++t) token_x[lid + t * WG] = x_loaded[t];
    barrier();
    const bool qk_ln = (params.flags & DECODE_FLAG_QK_LN) != 0u;
    const bool local_ln = LOCAL_EXACT && (params.flags & DECODE_FLAG_LOCAL_LN) != 0u;
    if (qk_ln || local_ln) {  // uniform: the barrier is reached by all or none
        // One invocation per row: the LayerNorm's sums in the forward's order. Both LayerNorms of a
        // row share its mean and variance; only their scales and biases differ.
        if (lid < TOKEN_ROWS) {
            const uint x0 = lid * HEAD_DIM;
            float mean = 0.0;
            for (uint d = 0u; d < HEAD_DIM; ++d) mean += token_x[x0 + d];
            mean /= float(HEAD_DIM);
            float var = 0.0;
            for (uint d = 0u; d < HEAD_DIM; ++d) var += (token_x[x0 + d] - mean) * (token_x[x0 + d] - mean);
            row_mean[lid] = mean;
            row_inv[lid] = inversesqrt(var / float(HEAD_DIM) + LN_EPS);
        }
        barrier();
    }
    for (uint i = lid; i < TOKEN_ROWS * HEAD_DIM; i += WG) {  // each element by the invocation that loaded it
        const uint r = i / HEAD_DIM, d = i % HEAD_DIM;
        const float raw = token_x[i];
        const float s = r < HEAD_RATIO ? params.scale : 1.0;  // k is never scaled
        float x = raw;
        if (qk_ln) x = (raw - row_mean[r]) * row_inv[r] * W(params.ln_scale + d) + W(params.ln_bias + d);
        x *= s;
        if (LOCAL_EXACT) {
            const float xl =
                local_ln ? ((raw - row_mean[r]) * row_inv[r] * W(params.local_ln_scale + d) + W(params.local_ln_bias + d)) * s : x;
            if (r < HEAD_RATIO) ql[i] = xl;
            else kl[d] = xl;
        }
        token_x[i] = x;
    }
    barrier();
    if (LEVELS == 0u) {  // p = 2: S(x) = x (SKETCH = HEAD_DIM)
        for (uint i = lid; i < TOKEN_ROWS * SKETCH; i += WG) store_token_sketch(i / SKETCH, i % SKETCH, token_x[i]);
    } else if (LEVELS == 1u) {  // p = 4: S(x)_c = node_scale (x . G1_0a[c]) (x . G1_0b[c])
        for (uint i = lid; i < TOKEN_ROWS * SKETCH; i += WG) {
            const uint r = i / SKETCH, c = i % SKETCH, x0 = r * HEAD_DIM;
            const float a = dot_token_x(x0, params.w[0] + c * HEAD_DIM), b = dot_token_x(x0, params.w[1] + c * HEAD_DIM);
            store_token_sketch(r, c, params.node_scale * a * b);
        }
    } else {  // p = 8: two level-1 nodes, then S(x)_c = node_scale (n_0 . G2_0a[c]) (n_1 . G2_0b[c])
        for (uint i = lid; i < TOKEN_ROWS * SKETCH; i += WG) {
            const uint r = i / SKETCH, c = i % SKETCH, x0 = r * HEAD_DIM;
            const float a = dot_token_x(x0, params.w[0] + c * HEAD_DIM), b = dot_token_x(x0, params.w[1] + c * HEAD_DIM);
            const float e = dot_token_x(x0, params.w[2] + c * HEAD_DIM), f = dot_token_x(x0, params.w[3] + c * HEAD_DIM);
            token_nodes[r * 2u * SKETCH + c] = params.node_scale * a * b;
            token_nodes[r * 2u * SKETCH + SKETCH + c] = params.node_scale * e * f;
        }
        barrier();
        for (uint i = lid; i < TOKEN_ROWS * SKETCH; i += WG) {
            const uint r = i / SKETCH, c = i % SKETCH, n0 = r * 2u * SKETCH;
            const float a = dot_token_nodes(n0, params.w[4] + c * SKETCH), b = dot_token_nodes(n0 + SKETCH, params.w[5] + c * SKETCH);
            store_token_sketch(r, c, params.node_scale * a * b);
        }
    }
    barrier();
}

#endif
