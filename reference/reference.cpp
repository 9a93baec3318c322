// polysketch CPU reference (float64). See reference.hpp for the conventions; every formula cites
// the docs/MATH.md section it implements.
#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace psk::ref {
namespace {

void require(bool condition, const char* message) {
    if (!condition) throw std::invalid_argument(std::string("psk::ref: ") + message);
}

// Validates a Shape and the sizes of q, k, v. Every entry point calls this first so a test that
// passes a wrong-sized tensor fails loudly instead of reading out of bounds.
void checkInputs(const Shape& s, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v) {
    require(s.B >= 1 && s.Hq >= 1 && s.Hkv >= 1 && s.n >= 1 && s.h >= 1 && s.dv >= 1,
            "every shape dimension must be >= 1");
    require(s.Hq % s.Hkv == 0, "Hq must be a multiple of Hkv");
    require(q.size() == s.qSize(), "q has the wrong size");
    require(k.size() == s.kSize(), "k has the wrong size");
    require(v.size() == s.vSize(), "v has the wrong size");
}

// Offsets of the first element of a (batch, head) slice in BHND layout.
std::size_t qSlice(const Shape& s, int b, int qh) { return (std::size_t(b) * s.Hq + qh) * s.n * s.h; }
std::size_t kSlice(const Shape& s, int b, int kh) { return (std::size_t(b) * s.Hkv + kh) * s.n * s.h; }
std::size_t vSlice(const Shape& s, int b, int kh) { return (std::size_t(b) * s.Hkv + kh) * s.n * s.dv; }
std::size_t oSlice(const Shape& s, int b, int qh) { return (std::size_t(b) * s.Hq + qh) * s.n * s.dv; }

double dot(const double* a, const double* b, int len) {
    double sum = 0;
    for (int i = 0; i < len; ++i) sum += a[i] * b[i];
    return sum;
}

// Integer power by repeated multiplication: exact for the small even degrees used here and avoids
// any question about std::pow on negative bases.
double ipow(double x, int p) {
    double result = 1;
    for (int i = 0; i < p; ++i) result *= x;
    return result;
}

// x (length rows) @ M (rows x cols, row-major) -> length cols.
std::vector<double> vecMat(const double* x, const std::vector<double>& M, int rows, int cols) {
    std::vector<double> y(cols, 0.0);
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) y[j] += x[i] * M[std::size_t(i) * cols + j];
    return y;
}

void checkDegree(int degree) {
    require(degree >= 2 && degree % 2 == 0, "degree must be even and >= 2");
}

// The shared skeleton of the two exact quadratic kinds: for each (b, query head, i), compute the
// scores s q_i . k_j over the allowed j (j <= i when causal) and hand them to `row`, which turns
// scores and values into the output row. q is prepared as s * LN(q), k as LN(k).
template <typename RowFn>
void exactAttention(const Shape& s, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, double scale, bool causal,
                    const LayerNormParams* qkNorm, std::vector<double>& out, RowFn row) {
    checkInputs(s, q, k, v);
    out.assign(s.outSize(), 0.0);
    for (int b = 0; b < s.B; ++b) {
        for (int qh = 0; qh < s.Hq; ++qh) {
            const int kh = s.kvHeadOf(qh);
            const std::vector<double> Q = prepareRows(&q[qSlice(s, b, qh)], s.n, s.h, qkNorm, scale);
            const std::vector<double> K = prepareRows(&k[kSlice(s, b, kh)], s.n, s.h, qkNorm, 1.0);
            const double* V = &v[vSlice(s, b, kh)];
            double* O = &out[oSlice(s, b, qh)];
            for (int i = 0; i < s.n; ++i) {
                const int jEnd = causal ? i + 1 : s.n;
                std::vector<double> scores(jEnd);
                for (int j = 0; j < jEnd; ++j)
                    scores[j] = dot(&Q[std::size_t(i) * s.h], &K[std::size_t(j) * s.h], s.h);
                row(scores, V, s.dv, O + std::size_t(i) * s.dv);
            }
        }
    }
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Building blocks
// ------------------------------------------------------------------------------------------------

std::vector<double> layerNorm(const LayerNormParams& p, const double* x, int len) {
    require(len >= 1, "layerNorm: len must be >= 1");
    require(int(p.scale.size()) == len && int(p.bias.size()) == len,
            "layerNorm: scale and bias must have length len");
    double mean = 0;
    for (int i = 0; i < len; ++i) mean += x[i];
    mean /= len;
    double var = 0;  // two-pass, population variance
    for (int i = 0; i < len; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= len;
    const double inv = 1.0 / std::sqrt(var + p.eps);
    std::vector<double> y(len);
    for (int i = 0; i < len; ++i) y[i] = (x[i] - mean) * inv * p.scale[i] + p.bias[i];
    return y;
}

double geluTanh(double x) {
    const double pi = std::acos(-1.0);
    const double c = std::sqrt(2.0 / pi);
    return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

std::vector<double> selfTensorPacked(const std::vector<double>& u) {
    const int r = int(u.size());
    std::vector<double> psi;
    psi.reserve(packedSize(r));
    for (int a = 0; a < r; ++a) psi.push_back(u[a] * u[a]);
    // Off-diagonal pairs appear twice in u (x) u; one entry of sqrt(2) u_a u_b contributes the same
    // 2 u_a u_b w_a w_b to the inner product.
    const double root2 = std::sqrt(2.0);
    for (int a = 0; a < r; ++a)
        for (int b = a + 1; b < r; ++b) psi.push_back(root2 * u[a] * u[b]);
    return psi;
}

// ------------------------------------------------------------------------------------------------
// docs/MATH.md section 2: exact kinds
// ------------------------------------------------------------------------------------------------

void softmaxAttention(const Shape& s, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, double scale, bool causal,
                      std::vector<double>& out, const LayerNormParams* qkNorm) {
    exactAttention(s, q, k, v, scale, causal, qkNorm, out,
                   [](const std::vector<double>& scores, const double* V, int dv, double* o) {
                       // Subtracting the row max keeps exp() finite; it cancels in the ratio.
                       const double m = *std::max_element(scores.begin(), scores.end());
                       double denom = 0;
                       for (std::size_t j = 0; j < scores.size(); ++j) {
                           const double e = std::exp(scores[j] - m);
                           denom += e;
                           for (int d = 0; d < dv; ++d) o[d] += e * V[j * dv + d];
                       }
                       for (int d = 0; d < dv; ++d) o[d] /= denom;
                   });
}

void polynomialAttention(const Shape& s, const std::vector<double>& q, const std::vector<double>& k,
                         const std::vector<double>& v, double scale, int degree, bool causal,
                         std::vector<double>& out, const LayerNormParams* qkNorm) {
    checkDegree(degree);
    exactAttention(s, q, k, v, scale, causal, qkNorm, out,
                   [degree](const std::vector<double>& scores, const double* V, int dv, double* o) {
                       double denom = 1;  // the "1 +" is part of the definition (docs/MATH.md section 2)
                       for (std::size_t j = 0; j < scores.size(); ++j) {
                           const double w = ipow(scores[j], degree);
                           denom += w;
                           for (int d = 0; d < dv; ++d) o[d] += w * V[j * dv + d];
                       }
                       for (int d = 0; d < dv; ++d) o[d] /= denom;
                   });
}

// ------------------------------------------------------------------------------------------------
// docs/MATH.md section 3: random sketch
// ------------------------------------------------------------------------------------------------

std::string randomSketchTensorName(int level, int index, char side) {
    return "g" + std::to_string(level) + "_" + std::to_string(index) + side;
}

namespace {

// Evaluates node (level, index) of the sketch tree on x. Level 0 is a leaf: x itself (the children
// of a level-1 node are both x).
std::vector<double> sketchNode(const RandomSketch& sk, int level, int index, const double* x) {
    if (level == 0) return std::vector<double>(x, x + sk.h);
    const std::vector<double> left = sketchNode(sk, level - 1, 2 * index, x);
    const std::vector<double> right = sketchNode(sk, level - 1, 2 * index + 1, x);
    const int rows = level == 1 ? sk.h : sk.r;
    auto matrix = [&](char side) -> const std::vector<double>& {
        const auto it = sk.g.find(randomSketchTensorName(level, index, side));
        require(it != sk.g.end(), "sketchRandom: a sketch tensor is missing");
        require(it->second.size() == std::size_t(rows) * sk.r,
                "sketchRandom: a sketch tensor has the wrong size");
        return it->second;
    };
    const std::vector<double> a = vecMat(left.data(), matrix('a'), rows, sk.r);
    const std::vector<double> b = vecMat(right.data(), matrix('b'), rows, sk.r);
    // Unbiased: sqrt(1/r) once per node. Reference: each of the two G divided by sqrt(r), i.e. a
    // factor 1/r per node (and no sqrt(1/r)). Written as two divisions to mirror "each G".
    std::vector<double> node(sk.r);
    for (int j = 0; j < sk.r; ++j) {
        if (sk.referenceScaling)
            node[j] = (a[j] / std::sqrt(double(sk.r))) * (b[j] / std::sqrt(double(sk.r)));
        else
            node[j] = std::sqrt(1.0 / sk.r) * a[j] * b[j];
    }
    return node;
}

}  // namespace

std::vector<double> sketchRandom(const RandomSketch& sk, const double* x) {
    checkDegree(sk.degree);
    require(sk.h >= 1, "sketchRandom: h must be >= 1");
    const int m = sk.degree / 2;
    if (m == 1) return std::vector<double>(x, x + sk.h);  // degree 2: S(x) = x, exact
    require((m & (m - 1)) == 0, "sketchRandom: degree / 2 must be a power of two");
    require(sk.r >= 1, "sketchRandom: r must be >= 1");
    int levels = 0;
    while ((1 << levels) < m) ++levels;
    return sketchNode(sk, levels, 0, x);
}

// ------------------------------------------------------------------------------------------------
// docs/MATH.md section 4: learned sketch
// ------------------------------------------------------------------------------------------------

std::vector<double> feedForward(const FeedForward& ff, int r, const double* x) {
    require(ff.in >= 1 && r >= 1, "feedForward: in and r must be >= 1");
    const int hidden = 8 * r;
    require(ff.dense1.size() == std::size_t(ff.in) * hidden, "feedForward: dense1 must be in x 8r");
    require(ff.dense2.size() == std::size_t(hidden) * r, "feedForward: dense2 must be 8r x r");
    const std::vector<double> normed = layerNorm(ff.ln, x, ff.in);
    std::vector<double> mid = vecMat(normed.data(), ff.dense1, ff.in, hidden);
    for (double& value : mid) value = geluTanh(value);
    return vecMat(mid.data(), ff.dense2, hidden, r);
}

std::vector<double> sketchLearned(const LearnedSketch& sk, const double* x) {
    require(sk.h >= 1 && sk.r >= 1, "sketchLearned: h and r must be >= 1");
    std::vector<double> branch[2];
    for (int f = 0; f < 2; ++f) {
        require(sk.f[f][0].in == sk.h && sk.f[f][1].in == sk.r,
                "sketchLearned: level 0 must take h inputs, level 1 r inputs");
        const std::vector<double> level0 = feedForward(sk.f[f][0], sk.r, x);
        branch[f] = feedForward(sk.f[f][1], sk.r, level0.data());
    }
    // tanh bounds every entry to (-sqrt(r), sqrt(r)), which keeps training stable (paper App. E).
    const double root = std::sqrt(double(sk.r));
    std::vector<double> S(sk.r);
    for (int a = 0; a < sk.r; ++a) S[a] = root * std::tanh(branch[0][a] * branch[1][a] / root);
    return S;
}

std::function<std::vector<double>(const double*)> sketchFunction(const RandomSketch& sk) {
    return [sk](const double* x) { return sketchRandom(sk, x); };
}

std::function<std::vector<double>(const double*)> sketchFunction(const LearnedSketch& sk) {
    return [sk](const double* x) { return sketchLearned(sk, x); };
}

// ------------------------------------------------------------------------------------------------
// docs/MATH.md section 5/6: polysketch
// ------------------------------------------------------------------------------------------------

std::vector<double> prepareRows(const double* x, int n, int h, const LayerNormParams* ln,
                                double scale) {
    std::vector<double> y(std::size_t(n) * h);
    for (int i = 0; i < n; ++i) {
        const double* row = x + std::size_t(i) * h;
        // LN first (it normalizes), then the scale: s * LN(q), never LN(s * q).
        const std::vector<double> normed = ln ? layerNorm(*ln, row, h) : std::vector<double>(row, row + h);
        for (int d = 0; d < h; ++d) y[std::size_t(i) * h + d] = scale * normed[d];
    }
    return y;
}

std::vector<double> featureRows(const std::function<std::vector<double>(const double*)>& sketch,
                                const double* x, int n, int h, int& features) {
    require(bool(sketch), "featureRows: no sketch function");
    std::vector<double> rows;
    features = -1;
    for (int i = 0; i < n; ++i) {
        const std::vector<double> psi = selfTensorPacked(sketch(x + std::size_t(i) * h));
        require(features < 0 || int(psi.size()) == features,
                "featureRows: the sketch returned different lengths");
        features = int(psi.size());
        rows.insert(rows.end(), psi.begin(), psi.end());
    }
    if (features < 0) features = 0;
    return rows;
}

std::vector<std::vector<double>> blockStates(const std::vector<double>& phiK,
                                             const std::vector<double>& v, int n, int F, int dv,
                                             int blockSize) {
    require(n >= 1 && F >= 1 && dv >= 1 && blockSize >= 1, "blockStates: bad sizes");
    require(phiK.size() == std::size_t(n) * F, "blockStates: phiK must be n x F");
    require(v.size() == std::size_t(n) * dv, "blockStates: v must be n x dv");
    const int t = (n + blockSize - 1) / blockSize;
    const int cols = dv + 1;
    std::vector<std::vector<double>> H(t, std::vector<double>(std::size_t(F) * cols, 0.0));
    for (int j = 0; j < n; ++j) {
        std::vector<double>& Hl = H[j / blockSize];
        for (int f = 0; f < F; ++f) {
            const double phi = phiK[std::size_t(j) * F + f];
            for (int c = 0; c < dv; ++c) Hl[std::size_t(f) * cols + c] += phi * v[std::size_t(j) * dv + c];
            Hl[std::size_t(f) * cols + dv] += phi;  // the ones column: normalizer
        }
    }
    return H;
}

std::vector<std::vector<double>> exclusivePrefix(const std::vector<std::vector<double>>& H) {
    std::vector<std::vector<double>> Z(H.size());
    if (H.empty()) return Z;
    std::vector<double> running(H[0].size(), 0.0);
    for (std::size_t l = 0; l < H.size(); ++l) {
        require(H[l].size() == running.size(), "exclusivePrefix: blocks differ in size");
        Z[l] = running;
        for (std::size_t e = 0; e < running.size(); ++e) running[e] += H[l][e];
    }
    return Z;
}

namespace {

// Everything one (batch, query head) needs, prepared once: the sketch-side rows, the local-exact
// rows, and the key features.
struct HeadInputs {
    std::vector<double> Qs, Ks;    // sketch inputs: s * LN(q), LN(k)        (n x h)
    std::vector<double> Ql, Kl;    // local exact inputs: s * LN'(q), LN'(k) (n x h)
    std::vector<double> sq, sk;    // S(Qs), S(Ks)                            (n x r)
    std::vector<double> phiQ, phiK;  // psi(S(.))                             (n x F)
    int r = 0, F = 0;
};

const LayerNormParams* localNormOf(const PolysketchConfig& c) {
    return c.localNorm ? c.localNorm : c.qkNorm;
}

void checkConfig(const PolysketchConfig& c) {
    require(bool(c.sketch), "polysketch: config.sketch is not set");
    checkDegree(c.degree);
    require(c.blockSize >= 1, "polysketch: blockSize must be >= 1");
}

HeadInputs prepareHead(const PolysketchConfig& c, const double* q, const double* k, int n, int h) {
    HeadInputs in;
    in.Qs = prepareRows(q, n, h, c.qkNorm, c.scale);
    in.Ks = prepareRows(k, n, h, c.qkNorm, 1.0);
    in.Ql = prepareRows(q, n, h, localNormOf(c), c.scale);
    in.Kl = prepareRows(k, n, h, localNormOf(c), 1.0);
    for (int i = 0; i < n; ++i) {
        const std::vector<double> a = c.sketch(&in.Qs[std::size_t(i) * h]);
        const std::vector<double> b = c.sketch(&in.Ks[std::size_t(i) * h]);
        require(a.size() == b.size() && !a.empty() && (in.r == 0 || int(a.size()) == in.r),
                "polysketch: the sketch returned different lengths");
        in.r = int(a.size());
        in.sq.insert(in.sq.end(), a.begin(), a.end());
        in.sk.insert(in.sk.end(), b.begin(), b.end());
        const std::vector<double> pa = selfTensorPacked(a), pb = selfTensorPacked(b);
        in.phiQ.insert(in.phiQ.end(), pa.begin(), pa.end());
        in.phiK.insert(in.phiK.end(), pb.begin(), pb.end());
    }
    in.F = packedSize(in.r);
    return in;
}

// num += phi(q)^T Z   (Z is F x (dv + 1))
void addFeatureTimesState(const double* phiQ, const std::vector<double>& Z, int F, int dv,
                          std::vector<double>& num) {
    for (int f = 0; f < F; ++f)
        for (int c = 0; c <= dv; ++c) num[c] += phiQ[f] * Z[std::size_t(f) * (dv + 1) + c];
}

// num += w [v | 1]
void addWeightedValue(double w, const double* v, int dv, std::vector<double>& num) {
    for (int c = 0; c < dv; ++c) num[c] += w * v[c];
    num[dv] += w;
}

// O_i = num[0:dv] / (1 + num[dv])
void finishRow(const std::vector<double>& num, int dv, double* o) {
    for (int c = 0; c < dv; ++c) o[c] = num[c] / (1.0 + num[dv]);
}

}  // namespace

void polysketchAttention(const Shape& s, const std::vector<double>& q, const std::vector<double>& k,
                         const std::vector<double>& v, const PolysketchConfig& c,
                         std::vector<double>& out) {
    checkInputs(s, q, k, v);
    checkConfig(c);
    out.assign(s.outSize(), 0.0);
    const int bs = c.blockSize;
    for (int b = 0; b < s.B; ++b) {
        for (int qh = 0; qh < s.Hq; ++qh) {
            const int kh = s.kvHeadOf(qh);
            const HeadInputs in = prepareHead(c, &q[qSlice(s, b, qh)], &k[kSlice(s, b, kh)], s.n, s.h);
            const std::vector<double> V(v.begin() + vSlice(s, b, kh),
                                        v.begin() + vSlice(s, b, kh) + std::size_t(s.n) * s.dv);
            const std::vector<std::vector<double>> H = blockStates(in.phiK, V, s.n, in.F, s.dv, bs);
            double* O = &out[oSlice(s, b, qh)];

            if (!c.causal) {
                // Full mode: one state over all keys; localExact plays no role (docs/MATH.md section 6).
                std::vector<double> Z(H[0].size(), 0.0);
                for (const auto& Hl : H)
                    for (std::size_t e = 0; e < Z.size(); ++e) Z[e] += Hl[e];
                for (int i = 0; i < s.n; ++i) {
                    std::vector<double> num(s.dv + 1, 0.0);
                    addFeatureTimesState(&in.phiQ[std::size_t(i) * in.F], Z, in.F, s.dv, num);
                    finishRow(num, s.dv, O + std::size_t(i) * s.dv);
                }
                continue;
            }

            const std::vector<std::vector<double>> Z = exclusivePrefix(H);
            for (int i = 0; i < s.n; ++i) {
                const int l = i / bs;
                std::vector<double> num(s.dv + 1, 0.0);
                // Everything in earlier blocks, through the prefix state.
                addFeatureTimesState(&in.phiQ[std::size_t(i) * in.F], Z[l], in.F, s.dv, num);
                // The lower triangle of the own block, computed directly.
                for (int j = l * bs; j <= i; ++j) {
                    double w;
                    if (c.localExact) {
                        w = ipow(dot(&in.Ql[std::size_t(i) * s.h], &in.Kl[std::size_t(j) * s.h], s.h),
                                 c.degree);
                    } else {
                        // <phi(q), phi(k)> = <S(q), S(k)>^2, r multiplications instead of F.
                        w = ipow(dot(&in.sq[std::size_t(i) * in.r], &in.sk[std::size_t(j) * in.r], in.r), 2);
                    }
                    addWeightedValue(w, &V[std::size_t(j) * s.dv], s.dv, num);
                }
                finishRow(num, s.dv, O + std::size_t(i) * s.dv);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// docs/MATH.md section 7: incremental decoding
// ------------------------------------------------------------------------------------------------

namespace {

std::size_t slotCount(const Shape& s) { return std::size_t(s.B) * s.Hkv; }

// Adds phi(k)[v | 1] for one key (sketch-side prepared) to Z.
void accumulateKey(const PolysketchConfig& c, const double* rawK, const double* v, int h, int dv,
                   std::vector<double>& Z, int F) {
    const std::vector<double> ks = prepareRows(rawK, 1, h, c.qkNorm, 1.0);
    const std::vector<double> phi = selfTensorPacked(c.sketch(ks.data()));
    require(int(phi.size()) == F, "decode: the sketch returned a different length");
    for (int f = 0; f < F; ++f) {
        for (int col = 0; col < dv; ++col) Z[std::size_t(f) * (dv + 1) + col] += phi[f] * v[col];
        Z[std::size_t(f) * (dv + 1) + dv] += phi[f];
    }
}

// Determines F by sketching a zero vector (any input gives the same length).
int featureCountOf(const PolysketchConfig& c, int h) {
    const std::vector<double> zero(h, 0.0);
    return packedSize(int(c.sketch(zero.data()).size()));
}

}  // namespace

DecodeState polysketchDecodeBegin(const Shape& s, const PolysketchConfig& c) {
    require(s.B >= 1 && s.Hq >= 1 && s.Hkv >= 1 && s.h >= 1 && s.dv >= 1 && s.Hq % s.Hkv == 0,
            "decode: bad shape");
    checkConfig(c);
    require(c.causal, "decode: incremental decoding is causal only");
    DecodeState st;
    st.shape = s;
    st.config = c;
    st.features = featureCountOf(c, s.h);
    st.z.assign(slotCount(s), std::vector<double>(std::size_t(st.features) * (s.dv + 1), 0.0));
    st.blockK.assign(slotCount(s), {});
    st.blockV.assign(slotCount(s), {});
    return st;
}

DecodeState polysketchPrefill(const Shape& s, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const PolysketchConfig& c, std::vector<double>& out) {
    require(c.causal, "prefill: incremental decoding is causal only");
    polysketchAttention(s, q, k, v, c, out);
    DecodeState st = polysketchDecodeBegin(s, c);
    st.length = s.n;
    // Built from the same block states as the forward, so the state is the forward's own Z.
    const int completed = c.localExact ? (s.n / c.blockSize) * c.blockSize : s.n;
    for (int b = 0; b < s.B; ++b) {
        for (int kh = 0; kh < s.Hkv; ++kh) {
            const std::size_t slot = std::size_t(b) * s.Hkv + kh;
            const double* K = &k[kSlice(s, b, kh)];
            const double* V = &v[vSlice(s, b, kh)];
            for (int j = 0; j < completed; ++j)
                accumulateKey(c, K + std::size_t(j) * s.h, V + std::size_t(j) * s.dv, s.h, s.dv,
                              st.z[slot], st.features);
            st.blockK[slot].assign(K + std::size_t(completed) * s.h, K + std::size_t(s.n) * s.h);
            st.blockV[slot].assign(V + std::size_t(completed) * s.dv, V + std::size_t(s.n) * s.dv);
        }
    }
    return st;
}

void polysketchDecodeStep(DecodeState& st, const std::vector<double>& q,
                          const std::vector<double>& k, const std::vector<double>& v,
                          std::vector<double>& out) {
    const Shape& s = st.shape;
    const PolysketchConfig& c = st.config;
    require(q.size() == std::size_t(s.B) * s.Hq * s.h, "decode: q must be [B][Hq][h]");
    require(k.size() == std::size_t(s.B) * s.Hkv * s.h, "decode: k must be [B][Hkv][h]");
    require(v.size() == std::size_t(s.B) * s.Hkv * s.dv, "decode: v must be [B][Hkv][dv]");
    out.assign(std::size_t(s.B) * s.Hq * s.dv, 0.0);

    // 1. The new key joins the state first: row i attends to j <= i, itself included.
    for (std::size_t slot = 0; slot < slotCount(s); ++slot) {
        const double* kRow = &k[slot * s.h];
        const double* vRow = &v[slot * s.dv];
        if (c.localExact) {
            st.blockK[slot].insert(st.blockK[slot].end(), kRow, kRow + s.h);
            st.blockV[slot].insert(st.blockV[slot].end(), vRow, vRow + s.dv);
        } else {
            accumulateKey(c, kRow, vRow, s.h, s.dv, st.z[slot], st.features);
        }
    }

    // 2. Each query head reads its kv slot.
    for (int b = 0; b < s.B; ++b) {
        for (int qh = 0; qh < s.Hq; ++qh) {
            const std::size_t slot = std::size_t(b) * s.Hkv + s.kvHeadOf(qh);
            const double* qRow = &q[(std::size_t(b) * s.Hq + qh) * s.h];
            const std::vector<double> qs = prepareRows(qRow, 1, s.h, c.qkNorm, c.scale);
            const std::vector<double> phiQ = selfTensorPacked(c.sketch(qs.data()));
            std::vector<double> num(s.dv + 1, 0.0);
            addFeatureTimesState(phiQ.data(), st.z[slot], st.features, s.dv, num);
            if (c.localExact) {
                const std::vector<double> ql = prepareRows(qRow, 1, s.h, localNormOf(c), c.scale);
                const int rows = int(st.blockK[slot].size()) / s.h;
                const std::vector<double> kl =
                    prepareRows(st.blockK[slot].data(), rows, s.h, localNormOf(c), 1.0);
                for (int j = 0; j < rows; ++j) {
                    const double w = ipow(dot(ql.data(), &kl[std::size_t(j) * s.h], s.h), c.degree);
                    addWeightedValue(w, &st.blockV[slot][std::size_t(j) * s.dv], s.dv, num);
                }
            }
            finishRow(num, s.dv, &out[(std::size_t(b) * s.Hq + qh) * s.dv]);
        }
    }

    // 3. A block that is now complete moves from the raw rows into Z.
    ++st.length;
    if (c.localExact && st.length % c.blockSize == 0) {
        for (std::size_t slot = 0; slot < slotCount(s); ++slot) {
            const int rows = int(st.blockK[slot].size()) / s.h;
            for (int j = 0; j < rows; ++j)
                accumulateKey(c, &st.blockK[slot][std::size_t(j) * s.h],
                              &st.blockV[slot][std::size_t(j) * s.dv], s.h, s.dv, st.z[slot],
                              st.features);
            st.blockK[slot].clear();
            st.blockV[slot].clear();
        }
    }
}

}  // namespace psk::ref
