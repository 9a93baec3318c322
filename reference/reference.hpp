// polysketch CPU reference: a plain float64 implementation of docs/MATH.md sections 2 to 7.
//
// This is the oracle that the GPU conformance tests compare against, so it is written for clarity,
// not speed: every formula is evaluated the way docs/MATH.md states it, in double precision, with no
// tiling, no fusion and no cleverness beyond what docs/MATH.md itself prescribes (the block algorithm
// of section 6 is implemented literally because its intermediates, H_l and Z_l, are what the GPU
// shaders produce and get tested against).
//
// Conventions used throughout:
// - Tensors are dense row-major std::vector<double> in BHND order:
//     q [B][Hq][n][h], k [B][Hkv][n][h], v [B][Hkv][n][dv], out [B][Hq][n][dv].
//   (BNHD is a GPU-side stride concern; tests transpose into BHND before calling these.)
// - Grouped-query attention: query head i reads key/value head i / (Hq / Hkv).
// - "Matrix" arguments are row-major std::vector<double>; a weight G applies as x @ G, so its rows
//   are input features (docs/MATH.md section 8).
// - Invalid arguments (inconsistent sizes, odd degree, missing sketch tensors, ...) throw
//   std::invalid_argument. The reference never silently guesses.
//
// Order of q/k preprocessing (docs/MATH.md sections 2 and 5): LayerNorm first (it normalizes q and k), then
// q is multiplied by the score scale s. k is never scaled. A sketch therefore sees S(s * LN(q)) and
// S(LN(k)); exact weights are (s * LN(q) . LN(k))^p.
//
// Dependencies: the C++17 standard library only.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace psk::ref {

// ------------------------------------------------------------------------------------------------
// Shapes
// ------------------------------------------------------------------------------------------------

// Shapes of one attention call (see the layout conventions above).
struct Shape {
    int B = 1, Hq = 1, Hkv = 1, n = 1, h = 1, dv = 1;

    std::size_t qSize() const { return std::size_t(B) * Hq * n * h; }
    std::size_t kSize() const { return std::size_t(B) * Hkv * n * h; }
    std::size_t vSize() const { return std::size_t(B) * Hkv * n * dv; }
    std::size_t outSize() const { return std::size_t(B) * Hq * n * dv; }
    // The key/value head that query head `qHead` reads.
    int kvHeadOf(int qHead) const { return qHead / (Hq / Hkv); }
};

// ------------------------------------------------------------------------------------------------
// Small building blocks
// ------------------------------------------------------------------------------------------------

// LayerNorm with learned scale and bias (docs/MATH.md sections 4 and 5). Population variance (divide by
// len), eps inside the square root: y = (x - mean) / sqrt(var + eps) * scale + bias.
struct LayerNormParams {
    std::vector<double> scale, bias;
    double eps = 1e-5;
};
std::vector<double> layerNorm(const LayerNormParams&, const double* x, int len);

// gelu, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
double geluTanh(double x);

// Self-tensoring in packed symmetric form (docs/MATH.md section 3). For u of length r returns psi(u) of
// length r(r+1)/2:
//   psi(u) = [u_0^2, u_1^2, ..., u_{r-1}^2]                      (r squares first, then)
//         ++ [sqrt(2) u_a u_b for a < b, a-major]                 (r(r-1)/2 cross terms)
// where "a-major" means the pairs are ordered (0,1),(0,2),...,(0,r-1),(1,2),(1,3),...,(r-2,r-1).
// <psi(u), psi(w)> = <u, w>^2 exactly (it is u (x) u with the symmetric pairs merged).
std::vector<double> selfTensorPacked(const std::vector<double>& u);
// Length of psi for a sketch of length r: r(r+1)/2.
inline int packedSize(int r) { return r * (r + 1) / 2; }

// ------------------------------------------------------------------------------------------------
// docs/MATH.md section 2: exact attention kinds
// ------------------------------------------------------------------------------------------------
// `scale` is s (the caller supplies the default, 1/sqrt(h) for softmax, 1 otherwise). The optional
// qkNorm (length-h LayerNorm shared by q and k) is applied before s; nullptr means none. It is an
// extension of the contract's signature (defaulted) so tests can compare polysketch with LN to the exact
// kernels with the same LN.

// O_i = sum_j softmax_j(s q_i . k_j) v_j.
void softmaxAttention(const Shape&, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, double scale, bool causal,
                      std::vector<double>& out, const LayerNormParams* qkNorm = nullptr);

// w_ij = (s q_i . k_j)^p, O_i = (sum_j w_ij v_j) / (1 + sum_j w_ij). p must be even and >= 2.
void polynomialAttention(const Shape&, const std::vector<double>& q, const std::vector<double>& k,
                         const std::vector<double>& v, double scale, int degree, bool causal,
                         std::vector<double>& out, const LayerNormParams* qkNorm = nullptr);

// ------------------------------------------------------------------------------------------------
// docs/MATH.md section 3: random polynomial sketch
// ------------------------------------------------------------------------------------------------
// Degree p = 2m, m = 2^L. Node (l, i), l = 1..L, 0 <= i < m / 2^l, holds g["g{l}_{i}a"] and
// g["g{l}_{i}b"], each h x r at level 1 and r x r above (row-major, applied as x @ G).
//
// Unbiased scaling (referenceScaling = false):
//     node(l, i) = sqrt(1/r) * (child(2i) @ G_a) * (child(2i+1) @ G_b)
// so that E <S(q), S(k)> = <q, k>^m.
// Reference scaling (referenceScaling = true, the google-research code): every G is divided by
// sqrt(r) and the sqrt(1/r) factor is dropped:
//     node(l, i) = (child(2i) @ (G_a / sqrt(r))) * (child(2i+1) @ (G_b / sqrt(r)))
// Per node this is node_unbiased(children) / sqrt(r), and the factor compounds through the tree:
// p = 4: S_ref = S_unbiased / sqrt(r);  p = 8: S_ref = S_unbiased / r^(3/2).
// Degree 2 (m = 1): no matrices, S(x) = x (length h); `r` is ignored.
struct RandomSketch {
    int degree = 4;
    int h = 0;
    int r = 0;
    bool referenceScaling = false;
    std::map<std::string, std::vector<double>> g;  // "g1_0a" -> h*r (level 1) or r*r (above)
};
// Name of the tensor of node (level, index), side 'a' or 'b': "g{level}_{index}{side}".
std::string randomSketchTensorName(int level, int index, char side);
// S(x) for one vector x of length h: length r (degree 2: x itself, length h).
std::vector<double> sketchRandom(const RandomSketch&, const double* x);

// ------------------------------------------------------------------------------------------------
// docs/MATH.md section 4: learned sketch, degree 4
// ------------------------------------------------------------------------------------------------
// FF(x) = Dense_2(gelu(Dense_1(LN(x)))), no biases. Level 0 maps h -> 8r -> r (in = h), level 1
// maps r -> 8r -> r (in = r). Branch f_b(x) = FF[b][1](FF[b][0](x)).
// S(x) = sqrt(r) * tanh(f_1(x) * f_2(x) / sqrt(r)), so |S(x)_a| < sqrt(r).
struct FeedForward {
    LayerNormParams ln;          // length in
    std::vector<double> dense1;  // in x 8r
    std::vector<double> dense2;  // 8r x r
    int in = 0;
};
struct LearnedSketch {
    int h = 0, r = 0;
    FeedForward f[2][2];  // [branch f1, f2][level 0, 1]
};
// One FF block (exposed for per-shader tests). x has length ff.in; returns length r.
std::vector<double> feedForward(const FeedForward& ff, int r, const double* x);
// S(x) for one vector x of length h: length r.
std::vector<double> sketchLearned(const LearnedSketch&, const double* x);

// ------------------------------------------------------------------------------------------------
// docs/MATH.md sections 5 and 6: polysketch attention
// ------------------------------------------------------------------------------------------------
// The feature map is phi(x) = psi(S(x)) (packed self-tensoring), F = r(r+1)/2 features.
struct PolysketchConfig {
    // S(x) for one already scaled and normalized vector of length h. Must return the same length
    // r for every x. Build with sketchFunction() below or any lambda.
    std::function<std::vector<double>(const double* x)> sketch;
    int degree = 4;      // p: used by the local exact weights (s q . k)^p
    double scale = 1;    // s
    bool causal = true;
    // Causal only: exact polynomial weights inside each block. Ignored in full mode (docs/MATH.md section 6 defines
    // full mode as phi(q_i)^T Z with Z the sum of all block states, nothing local).
    bool localExact = false;
    int blockSize = 256;  // b; only changes the result in local exact mode
    // LayerNorm applied to q and k (length h) before sketching, nullptr = none.
    const LayerNormParams* qkNorm = nullptr;
    // Separate LayerNorm for the local exact part; nullptr = the local part sees the same q, k as
    // the sketch part (qkNorm if given, else raw).
    const LayerNormParams* localNorm = nullptr;
};

// Wrap a sketch as PolysketchConfig::sketch. The sketch is copied into the function object, so
// the returned function does not depend on the argument's lifetime.
std::function<std::vector<double>(const double*)> sketchFunction(const RandomSketch&);
std::function<std::vector<double>(const double*)> sketchFunction(const LearnedSketch&);

// Full polysketch attention (docs/MATH.md section 6). out is resized to shape.outSize().
//   causal: row i of block l: num_i = phi(q_i)^T Z_l + local_i, O_i = num_i[0:dv] / (1 + num_i[dv])
//     local_i = sum_{j in block l, j <= i} w_ij [v_j | 1] with
//       w_ij = <S(s q_i), S(k_j)>^2            (sketched local; equals <phi(q_i), phi(k_j)>)
//       w_ij = (s q'_i . k'_j)^p               (local exact; q', k' through localNorm, else qkNorm)
//   full:   num_i = phi(q_i)^T (sum_l H_l).
void polysketchAttention(const Shape&, const std::vector<double>& q, const std::vector<double>& k,
                         const std::vector<double>& v, const PolysketchConfig&,
                         std::vector<double>& out);

// ---- Building blocks exposed for per-shader unit tests of the GPU code -------------------------

// Rows as the sketch sees them: each of the n rows of x (n x h, row-major) goes through `ln` (if
// non-null) and is then multiplied by `scale`. For q use (qkNorm, s); for k use (qkNorm, 1).
std::vector<double> prepareRows(const double* x, int n, int h, const LayerNormParams* ln,
                                double scale);

// Packed feature rows phi(x_j) = psi(S(x_j)) for n rows of length h (already prepared): n x F
// row-major. F is returned through `features` (r(r+1)/2 with r = the sketch's output length).
std::vector<double> featureRows(const std::function<std::vector<double>(const double*)>& sketch,
                                const double* x, int n, int h, int& features);

// Block states of one (batch, kv head): phiK is n x F (packed key features), v is n x dv.
// Returns t = ceil(n / blockSize) matrices, each F x (dv + 1) row-major:
//   H_l[f][c] = sum_{j in block l} phiK[j][f] * [v_j | 1][c]
// (column dv is the ones column that carries the normalizer). The last block may be short.
std::vector<std::vector<double>> blockStates(const std::vector<double>& phiK,
                                             const std::vector<double>& v, int n, int F, int dv,
                                             int blockSize);

// Exclusive prefix over blocks: Z_l = sum_{j < l} H_j (Z_0 is all zeros), same sizes as H.
std::vector<std::vector<double>> exclusivePrefix(const std::vector<std::vector<double>>& H);

// ------------------------------------------------------------------------------------------------
// docs/MATH.md section 7: incremental decoding (causal only)
// ------------------------------------------------------------------------------------------------
// The state of one attention call after `length` tokens, per (batch, kv head) slot
// s = b * Hkv + kvHead:
//   z[s]:   F x (dv + 1), row-major.
//           sketched-local mode: sum of phi(k_j)[v_j | 1] over ALL consumed tokens (the sketched
//           local part is the same inner product, so completed and unfinished blocks merge);
//           local-exact mode:    sum of H_l over COMPLETED blocks only.
//   blockK[s], blockV[s]: local-exact mode only (empty otherwise): the raw (un-normalized) keys
//           (rows of h) and values (rows of dv) of the current unfinished block, at most b - 1
//           rows (a block is folded into z as soon as it completes).
struct DecodeState {
    Shape shape;  // shape.n is unused; `length` counts the tokens consumed
    PolysketchConfig config;
    int length = 0;
    int features = 0;  // F
    std::vector<std::vector<double>> z;
    std::vector<std::vector<double>> blockK, blockV;
};

// Runs the causal forward over a prompt of shape.n tokens (out as polysketchAttention) and returns
// the state after it. config.causal must be true. The config (including the pointed-to LayerNorm
// parameters, which are not copied) must outlive the state.
DecodeState polysketchPrefill(const Shape&, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const PolysketchConfig&, std::vector<double>& out);
// An empty state (no tokens yet) for decoding from scratch.
DecodeState polysketchDecodeBegin(const Shape&, const PolysketchConfig&);
// One token: q [B][Hq][h], k [B][Hkv][h], v [B][Hkv][dv] -> out [B][Hq][dv]. Row produced equals
// row `state.length` (before the call) of the causal forward over the whole prefix.
void polysketchDecodeStep(DecodeState&, const std::vector<double>& q,
                          const std::vector<double>& k, const std::vector<double>& v,
                          std::vector<double>& out);

}  // namespace psk::ref
