// Unit tests of the float64 CPU reference (reference/) and of the conformance cases' seed.
// Build: needs the psk_reference library (reference/) and GTest::gtest_main. No Vulkan.
//
// Every test uses random inputs from std::mt19937_64 (never zeros), and each property is checked
// in a way that a wrong formula would break.
#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace psk::ref;

namespace {

std::vector<double> randomVector(std::mt19937_64& rng, std::size_t count, double sd = 1.0) {
    std::normal_distribution<double> normal(0.0, sd);
    std::vector<double> x(count);
    for (double& value : x) value = normal(rng);
    return x;
}

struct Inputs {
    std::vector<double> q, k, v;
};

Inputs randomInputs(std::mt19937_64& rng, const Shape& s, double sd = 1.0) {
    return {randomVector(rng, s.qSize(), sd), randomVector(rng, s.kSize(), sd),
            randomVector(rng, s.vSize(), sd)};
}

RandomSketch makeRandomSketch(std::mt19937_64& rng, int degree, int h, int r, bool reference = false) {
    RandomSketch sk;
    sk.degree = degree;
    sk.h = h;
    sk.r = r;
    sk.referenceScaling = reference;
    const int m = degree / 2;
    int levels = 0;
    while ((1 << levels) < m) ++levels;
    for (int l = 1; l <= levels; ++l) {
        const int rows = l == 1 ? h : r;
        for (int i = 0; i < m >> l; ++i)
            for (char side : {'a', 'b'})
                sk.g[randomSketchTensorName(l, i, side)] = randomVector(rng, std::size_t(rows) * r);
    }
    return sk;
}

LayerNormParams randomLayerNorm(std::mt19937_64& rng, int len) {
    LayerNormParams ln;
    ln.scale = randomVector(rng, len, 0.3);
    for (double& value : ln.scale) value += 1.0;
    ln.bias = randomVector(rng, len, 0.3);
    return ln;
}

LearnedSketch makeLearnedSketch(std::mt19937_64& rng, int h, int r, double weightSd) {
    LearnedSketch sk;
    sk.h = h;
    sk.r = r;
    for (int f = 0; f < 2; ++f) {
        for (int level = 0; level < 2; ++level) {
            FeedForward& ff = sk.f[f][level];
            ff.in = level == 0 ? h : r;
            ff.ln = randomLayerNorm(rng, ff.in);
            ff.dense1 = randomVector(rng, std::size_t(ff.in) * 8 * r, weightSd);
            ff.dense2 = randomVector(rng, std::size_t(8 * r) * r, weightSd);
        }
    }
    return sk;
}

double maxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

// Relative to the largest magnitude, so tolerances mean the same at any scale.
double maxRelDiff(const std::vector<double>& a, const std::vector<double>& b) {
    double scale = 1e-300;
    for (double value : b) scale = std::max(scale, std::fabs(value));
    return maxAbsDiff(a, b) / scale;
}

// Identity sketch: S(x) = x, for degree-2 polysketch with any h.
std::function<std::vector<double>(const double*)> identitySketch(int h) {
    return [h](const double* x) { return std::vector<double>(x, x + h); };
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Softmax
// ------------------------------------------------------------------------------------------------

TEST(ReferenceSoftmax, RowsSumToOne) {
    std::mt19937_64 rng(1);
    Shape s{2, 3, 3, 7, 5, 4};
    Inputs in = randomInputs(rng, s, 2.0);
    std::fill(in.v.begin(), in.v.end(), 1.0);
    for (bool causal : {false, true}) {
        std::vector<double> out;
        softmaxAttention(s, in.q, in.k, in.v, 1.0 / std::sqrt(5.0), causal, out);
        for (double value : out) EXPECT_NEAR(value, 1.0, 1e-12);
    }
}

TEST(ReferenceSoftmax, MatchesNaiveWithoutMaxSubtraction) {
    std::mt19937_64 rng(2);
    Shape s{1, 2, 1, 6, 4, 3};
    const Inputs in = randomInputs(rng, s, 0.7);  // small scores: exp() without max is safe
    const double scale = 0.5;
    for (bool causal : {false, true}) {
        std::vector<double> out;
        softmaxAttention(s, in.q, in.k, in.v, scale, causal, out);
        // Naive: form the whole n x n matrix of exp(scores), mask, normalize each row.
        std::vector<double> expected(s.outSize(), 0.0);
        for (int qh = 0; qh < s.Hq; ++qh) {
            std::vector<double> P(s.n * s.n, 0.0);
            for (int i = 0; i < s.n; ++i)
                for (int j = 0; j < s.n; ++j) {
                    if (causal && j > i) continue;
                    double score = 0;
                    for (int d = 0; d < s.h; ++d)
                        score += scale * in.q[(qh * s.n + i) * s.h + d] * in.k[j * s.h + d];
                    P[i * s.n + j] = std::exp(score);
                }
            for (int i = 0; i < s.n; ++i) {
                double rowSum = 0;
                for (int j = 0; j < s.n; ++j) rowSum += P[i * s.n + j];
                for (int d = 0; d < s.dv; ++d) {
                    double acc = 0;
                    for (int j = 0; j < s.n; ++j) acc += P[i * s.n + j] / rowSum * in.v[j * s.dv + d];
                    expected[(qh * s.n + i) * s.dv + d] = acc;
                }
            }
        }
        EXPECT_LT(maxAbsDiff(out, expected), 1e-12);
    }
}

TEST(ReferenceSoftmax, LargeScoresStayFinite) {
    std::mt19937_64 rng(3);
    Shape s{1, 1, 1, 5, 4, 2};
    const Inputs in = randomInputs(rng, s, 40.0);  // scores ~ 1e3..1e4: exp would overflow
    std::vector<double> out;
    softmaxAttention(s, in.q, in.k, in.v, 1.0, false, out);
    for (double value : out) EXPECT_TRUE(std::isfinite(value));
}

// ------------------------------------------------------------------------------------------------
// Polynomial
// ------------------------------------------------------------------------------------------------

TEST(ReferencePolynomial, HandComputedTinyCase) {
    // n = 2, h = 1, dv = 1, p = 2, s = 0.5: q = [1, 2], k = [3, -1], v = [5, 7].
    // s q_0 = 0.5: w_00 = 1.5^2 = 2.25, w_01 = (-0.5)^2 = 0.25
    // s q_1 = 1:   w_10 = 9,            w_11 = 1
    Shape s{1, 1, 1, 2, 1, 1};
    const std::vector<double> q{1, 2}, k{3, -1}, v{5, 7};
    std::vector<double> out;
    polynomialAttention(s, q, k, v, 0.5, 2, false, out);
    EXPECT_NEAR(out[0], (2.25 * 5 + 0.25 * 7) / (1 + 2.25 + 0.25), 1e-14);
    EXPECT_NEAR(out[1], (9.0 * 5 + 1.0 * 7) / (1 + 9 + 1), 1e-14);
    polynomialAttention(s, q, k, v, 0.5, 2, true, out);
    EXPECT_NEAR(out[0], (2.25 * 5) / (1 + 2.25), 1e-14);
    EXPECT_NEAR(out[1], (9.0 * 5 + 1.0 * 7) / (1 + 9 + 1), 1e-14);
    // p = 4: the same weights squared.
    polynomialAttention(s, q, k, v, 0.5, 4, false, out);
    EXPECT_NEAR(out[0], (2.25 * 2.25 * 5 + 0.0625 * 7) / (1 + 2.25 * 2.25 + 0.0625), 1e-14);
}

TEST(ReferencePolynomial, RejectsOddDegree) {
    Shape s;
    std::vector<double> x{1.0}, out;
    EXPECT_THROW(polynomialAttention(s, x, x, x, 1.0, 3, true, out), std::invalid_argument);
}

TEST(ReferencePolynomial, LayerNormAppliesBeforeScale) {
    // With LN, q and s q normalize to the same vector; the scale must act after LN, so scaling q
    // by 2 must not change the output, while changing s must.
    std::mt19937_64 rng(4);
    Shape s{1, 1, 1, 5, 6, 3};
    const Inputs in = randomInputs(rng, s);
    LayerNormParams ln = randomLayerNorm(rng, s.h);
    ln.eps = 1e-14;  // LN(2 q) = LN(q) holds exactly only without eps
    std::vector<double> q2 = in.q;
    for (double& value : q2) value *= 2.0;
    std::vector<double> a, b, c;
    polynomialAttention(s, in.q, in.k, in.v, 0.3, 4, true, a, &ln);
    polynomialAttention(s, q2, in.k, in.v, 0.3, 4, true, b, &ln);
    polynomialAttention(s, in.q, in.k, in.v, 0.6, 4, true, c, &ln);
    EXPECT_LT(maxAbsDiff(a, b), 1e-9);
    EXPECT_GT(maxAbsDiff(a, c), 1e-3);
}

// ------------------------------------------------------------------------------------------------
// Causality and grouped-query mapping, for every kind
// ------------------------------------------------------------------------------------------------

namespace {

using Kernel = std::function<void(const Shape&, const Inputs&, std::vector<double>&)>;

std::vector<std::pair<const char*, Kernel>> allKernels(std::mt19937_64& rng, int h) {
    auto sketch = std::make_shared<RandomSketch>(makeRandomSketch(rng, 4, h, 6));
    std::vector<std::pair<const char*, Kernel>> kernels;
    kernels.push_back({"softmax", [](const Shape& s, const Inputs& in, std::vector<double>& out) {
                           softmaxAttention(s, in.q, in.k, in.v, 0.5, true, out);
                       }});
    kernels.push_back({"polynomial", [](const Shape& s, const Inputs& in, std::vector<double>& out) {
                           polynomialAttention(s, in.q, in.k, in.v, 0.5, 4, true, out);
                       }});
    for (bool localExact : {false, true})
        kernels.push_back({localExact ? "polysketch-local" : "polysketch",
                           [sketch, localExact](const Shape& s, const Inputs& in, std::vector<double>& out) {
                               PolysketchConfig c;
                               c.sketch = sketchFunction(*sketch);
                               c.scale = 0.5;
                               c.blockSize = 3;
                               c.localExact = localExact;
                               polysketchAttention(s, in.q, in.k, in.v, c, out);
                           }});
    return kernels;
}

}  // namespace

TEST(ReferenceCausal, RowZeroDependsOnlyOnFirstKeyAndValue) {
    std::mt19937_64 rng(5);
    Shape s{1, 1, 1, 8, 4, 3};
    for (const auto& [name, kernel] : allKernels(rng, s.h)) {
        SCOPED_TRACE(name);
        const Inputs in = randomInputs(rng, s);
        std::vector<double> base, other;
        kernel(s, in, base);

        Inputs later = in;  // perturb every key and value after token 0
        for (std::size_t e = s.h; e < later.k.size(); ++e) later.k[e] += 1.0;
        for (std::size_t e = s.dv; e < later.v.size(); ++e) later.v[e] -= 1.0;
        kernel(s, later, other);
        for (int d = 0; d < s.dv; ++d) EXPECT_EQ(base[d], other[d]);
        EXPECT_GT(maxAbsDiff(base, other), 1e-6);  // later rows did see the change

        Inputs first = in;  // perturbing token 0 does change row 0
        first.k[0] += 1.0;
        first.v[0] += 1.0;
        kernel(s, first, other);
        double diff = 0;
        for (int d = 0; d < s.dv; ++d) diff = std::max(diff, std::fabs(base[d] - other[d]));
        EXPECT_GT(diff, 1e-6);
    }
}

TEST(ReferenceGroupedQuery, QueryHeadReadsKvHeadIOverGroup) {
    std::mt19937_64 rng(6);
    Shape s{2, 6, 2, 5, 4, 3};  // groups of 3: heads 0-2 -> kv 0, heads 3-5 -> kv 1
    const Inputs in = randomInputs(rng, s);
    Shape one{1, 1, 1, s.n, s.h, s.dv};
    for (const auto& [name, kernel] : allKernels(rng, s.h)) {
        SCOPED_TRACE(name);
        std::vector<double> out;
        kernel(s, in, out);
        for (int b = 0; b < s.B; ++b)
            for (int qh = 0; qh < s.Hq; ++qh) {
                const int kh = qh / 3;
                Inputs slice;
                const std::size_t qOff = (std::size_t(b) * s.Hq + qh) * s.n * s.h;
                const std::size_t kOff = (std::size_t(b) * s.Hkv + kh) * s.n * s.h;
                const std::size_t vOff = (std::size_t(b) * s.Hkv + kh) * s.n * s.dv;
                slice.q.assign(in.q.begin() + qOff, in.q.begin() + qOff + s.n * s.h);
                slice.k.assign(in.k.begin() + kOff, in.k.begin() + kOff + s.n * s.h);
                slice.v.assign(in.v.begin() + vOff, in.v.begin() + vOff + s.n * s.dv);
                std::vector<double> expected;
                kernel(one, slice, expected);
                const std::size_t oOff = (std::size_t(b) * s.Hq + qh) * s.n * s.dv;
                std::vector<double> got(out.begin() + oOff, out.begin() + oOff + s.n * s.dv);
                EXPECT_EQ(got, expected) << "b=" << b << " qh=" << qh;
            }
    }
}

// ------------------------------------------------------------------------------------------------
// Building blocks
// ------------------------------------------------------------------------------------------------

TEST(ReferenceSelfTensor, PackedOrderForThree) {
    const double r2 = std::sqrt(2.0);
    const std::vector<double> psi = selfTensorPacked({1, 2, 3});
    const std::vector<double> expected{1, 4, 9, r2 * 2, r2 * 3, r2 * 6};
    EXPECT_LT(maxAbsDiff(psi, expected), 1e-14);
    EXPECT_EQ(packedSize(3), 6);
}

TEST(ReferenceSelfTensor, InnerProductIsSquare) {
    std::mt19937_64 rng(7);
    for (int r : {1, 2, 5, 16}) {
        const std::vector<double> u = randomVector(rng, r), w = randomVector(rng, r);
        const std::vector<double> pu = selfTensorPacked(u), pw = selfTensorPacked(w);
        ASSERT_EQ(int(pu.size()), r * (r + 1) / 2);
        double lhs = 0, uw = 0;
        for (std::size_t i = 0; i < pu.size(); ++i) lhs += pu[i] * pw[i];
        for (int i = 0; i < r; ++i) uw += u[i] * w[i];
        EXPECT_NEAR(lhs, uw * uw, 1e-12 * (1 + uw * uw));
    }
}

TEST(ReferenceLayerNorm, NormalizesThenScalesAndShifts) {
    std::mt19937_64 rng(8);
    const int len = 9;
    const std::vector<double> x = randomVector(rng, len, 3.0);
    LayerNormParams unit{std::vector<double>(len, 1.0), std::vector<double>(len, 0.0)};
    const std::vector<double> y = layerNorm(unit, x.data(), len);
    double mean = 0, var = 0;
    for (double value : y) mean += value / len;
    for (double value : y) var += (value - mean) * (value - mean) / len;
    EXPECT_NEAR(mean, 0.0, 1e-12);
    EXPECT_NEAR(var, 1.0, 1e-5);  // eps = 1e-5 pulls it slightly below 1
    const LayerNormParams ln = randomLayerNorm(rng, len);
    const std::vector<double> z = layerNorm(ln, x.data(), len);
    for (int i = 0; i < len; ++i) EXPECT_NEAR(z[i], y[i] * ln.scale[i] + ln.bias[i], 1e-12);
    // Hand case: [1, 3] -> mean 2, var 1 -> [-1, 1] / sqrt(1 + eps).
    const std::vector<double> two{1.0, 3.0};
    LayerNormParams ln2{{1.0, 1.0}, {0.0, 0.0}};
    const std::vector<double> t = layerNorm(ln2, two.data(), 2);
    EXPECT_NEAR(t[1], 1.0 / std::sqrt(1.0 + 1e-5), 1e-15);
}

TEST(ReferenceGelu, TanhApproximationValues) {
    EXPECT_EQ(geluTanh(0.0), 0.0);
    EXPECT_NEAR(geluTanh(1.0), 0.8411919906082768, 1e-12);
    EXPECT_NEAR(geluTanh(-1.0), -0.15880800939172324, 1e-12);
    EXPECT_NEAR(geluTanh(10.0), 10.0, 1e-9);
}

TEST(ReferenceBlocks, StatesAndPrefixSumToTotal) {
    std::mt19937_64 rng(9);
    const int n = 11, F = 4, dv = 3, bs = 4;  // blocks of 4, 4, 3
    const std::vector<double> phiK = randomVector(rng, n * F), v = randomVector(rng, n * dv);
    const auto H = blockStates(phiK, v, n, F, dv, bs);
    ASSERT_EQ(H.size(), 3u);
    const auto Z = exclusivePrefix(H);
    ASSERT_EQ(Z.size(), 3u);
    for (double value : Z[0]) EXPECT_EQ(value, 0.0);
    // Z_2 + H_2 equals phi(K)^T [V | 1] over all rows, computed directly.
    for (int f = 0; f < F; ++f)
        for (int c = 0; c <= dv; ++c) {
            double direct = 0, firstTwo = 0;
            for (int j = 0; j < n; ++j) {
                const double x = phiK[j * F + f] * (c < dv ? v[j * dv + c] : 1.0);
                direct += x;
                if (j < 8) firstTwo += x;
            }
            EXPECT_NEAR(Z[2][f * (dv + 1) + c] + H[2][f * (dv + 1) + c], direct, 1e-12);
            EXPECT_NEAR(Z[2][f * (dv + 1) + c], firstTwo, 1e-12);
        }
}

// ------------------------------------------------------------------------------------------------
// Random sketch
// ------------------------------------------------------------------------------------------------

TEST(ReferenceRandomSketch, DegreeTwoIsIdentity) {
    std::mt19937_64 rng(10);
    RandomSketch sk;
    sk.degree = 2;
    sk.h = 5;
    const std::vector<double> x = randomVector(rng, 5);
    EXPECT_EQ(sketchRandom(sk, x.data()), x);
}

TEST(ReferenceRandomSketch, DegreeFourHandComputed) {
    // h = 2, r = 2: S(x) = sqrt(1/2) (x Ga) * (x Gb).
    RandomSketch sk;
    sk.degree = 4;
    sk.h = 2;
    sk.r = 2;
    sk.g["g1_0a"] = {1, 2, 3, 4};   // x Ga = [x0 + 3 x1, 2 x0 + 4 x1]
    sk.g["g1_0b"] = {0, 1, -1, 2};  // x Gb = [-x1, x0 + 2 x1]
    const std::vector<double> x{1, 2};
    const std::vector<double> S = sketchRandom(sk, x.data());
    EXPECT_NEAR(S[0], std::sqrt(0.5) * 7 * -2, 1e-14);
    EXPECT_NEAR(S[1], std::sqrt(0.5) * 10 * 5, 1e-14);
    sk.referenceScaling = true;  // each G / sqrt(2): the product / 2, no sqrt(1/2)
    const std::vector<double> R = sketchRandom(sk, x.data());
    EXPECT_NEAR(R[0], 7 * -2 / 2.0, 1e-14);
    EXPECT_NEAR(R[1], 10 * 5 / 2.0, 1e-14);
}

TEST(ReferenceRandomSketch, MissingTensorThrows) {
    std::mt19937_64 rng(11);
    RandomSketch sk = makeRandomSketch(rng, 8, 4, 3);
    sk.g.erase("g2_0b");
    const std::vector<double> x = randomVector(rng, 4);
    EXPECT_THROW(sketchRandom(sk, x.data()), std::invalid_argument);
}

TEST(ReferenceRandomSketch, ReferenceScalingCompoundsPerNode) {
    std::mt19937_64 rng(12);
    const int h = 5, r = 7;
    for (int degree : {4, 8}) {
        RandomSketch sk = makeRandomSketch(rng, degree, h, r);
        RandomSketch ref = sk;
        ref.referenceScaling = true;
        const std::vector<double> x = randomVector(rng, h);
        const std::vector<double> a = sketchRandom(sk, x.data()), b = sketchRandom(ref, x.data());
        // p = 4: one node, 1 / sqrt(r). p = 8: the level-2 node gets its own 1 / sqrt(r) and its
        // two children are each 1 / sqrt(r) smaller: 1 / r^(3/2).
        const double factor = degree == 4 ? 1.0 / std::sqrt(double(r)) : std::pow(double(r), -1.5);
        for (int i = 0; i < r; ++i) EXPECT_NEAR(b[i], a[i] * factor, 1e-12 * (1 + std::fabs(a[i])));
    }
}

// E <S(q), S(k)> = <q, k>^m over the Gaussian matrices.
TEST(ReferenceRandomSketch, UnbiasedInExpectation) {
    std::mt19937_64 rng(13);
    const int h = 8, r = 16, trials = 20000;
    const std::vector<double> q = randomVector(rng, h);
    std::vector<double> k = randomVector(rng, h, 0.5);
    for (int d = 0; d < h; ++d) k[d] += q[d];  // correlated: <q, k> well away from 0
    double qk = 0;
    for (int d = 0; d < h; ++d) qk += q[d] * k[d];
    for (int degree : {4, 8}) {
        const double target = std::pow(qk, degree / 2);
        double mean = 0;
        for (int t = 0; t < trials; ++t) {
            const RandomSketch sk = makeRandomSketch(rng, degree, h, r);
            const std::vector<double> sq = sketchRandom(sk, q.data()), sk2 = sketchRandom(sk, k.data());
            double inner = 0;
            for (int i = 0; i < r; ++i) inner += sq[i] * sk2[i];
            mean += inner / trials;
        }
        EXPECT_NEAR(mean / target, 1.0, degree == 4 ? 0.03 : 0.06) << "degree " << degree;
    }
}

// ------------------------------------------------------------------------------------------------
// Learned sketch
// ------------------------------------------------------------------------------------------------

TEST(ReferenceLearnedSketch, BoundedBySqrtR) {
    std::mt19937_64 rng(14);
    const int h = 6, r = 4;
    const LearnedSketch sk = makeLearnedSketch(rng, h, r, 2.0);  // large weights: tanh saturates
    double largest = 0;
    for (int t = 0; t < 50; ++t) {
        const std::vector<double> x = randomVector(rng, h, 3.0);
        const std::vector<double> S = sketchLearned(sk, x.data());
        ASSERT_EQ(int(S.size()), r);
        for (double value : S) {
            EXPECT_LE(std::fabs(value), std::sqrt(double(r)));
            largest = std::max(largest, std::fabs(value));
        }
    }
    EXPECT_GT(largest, 0.99 * std::sqrt(double(r)));  // the bound is actually approached
}

TEST(ReferenceLearnedSketch, SmallWeightsGiveProductOfBranches) {
    // In tanh's linear region S(x) ~ f1(x) * f2(x): checks the branch wiring and the level chain.
    std::mt19937_64 rng(15);
    const int h = 5, r = 3;
    const LearnedSketch sk = makeLearnedSketch(rng, h, r, 0.05);
    const std::vector<double> x = randomVector(rng, h);
    const std::vector<double> S = sketchLearned(sk, x.data());
    const std::vector<double> f1 = feedForward(sk.f[0][1], r, feedForward(sk.f[0][0], r, x.data()).data());
    const std::vector<double> f2 = feedForward(sk.f[1][1], r, feedForward(sk.f[1][0], r, x.data()).data());
    for (int a = 0; a < r; ++a) {
        const double product = f1[a] * f2[a];
        EXPECT_NEAR(S[a], product, 1e-3 * std::fabs(product) + 1e-15);
        EXPECT_NE(S[a], product);  // but tanh is applied
    }
}

// ------------------------------------------------------------------------------------------------
// Polysketch
// ------------------------------------------------------------------------------------------------

TEST(ReferencePolysketch, DegreeTwoEqualsExactPolynomial) {
    std::mt19937_64 rng(16);
    RandomSketch deg2;
    deg2.degree = 2;
    deg2.h = 4;
    for (int n : {1, 5, 10}) {
        Shape s{2, 4, 2, n, 4, 3};
        const Inputs in = randomInputs(rng, s);
        const LayerNormParams ln = randomLayerNorm(rng, s.h);
        for (const LayerNormParams* norm : {static_cast<const LayerNormParams*>(nullptr), &ln})
            for (bool causal : {true, false}) {
                std::vector<double> exact;
                polynomialAttention(s, in.q, in.k, in.v, 0.7, 2, causal, exact, norm);
                for (int bs : {1, 3, 4, 16}) {
                    SCOPED_TRACE("n=" + std::to_string(n) + " bs=" + std::to_string(bs) +
                                 " causal=" + std::to_string(causal) + " ln=" + std::to_string(norm != nullptr));
                    PolysketchConfig c;
                    // The degree-2 random sketch and a plain identity lambda must agree.
                    c.sketch = bs % 2 ? sketchFunction(deg2) : identitySketch(s.h);
                    c.degree = 2;
                    c.scale = 0.7;
                    c.causal = causal;
                    c.blockSize = bs;
                    c.qkNorm = norm;
                    std::vector<double> out;
                    polysketchAttention(s, in.q, in.k, in.v, c, out);
                    EXPECT_LT(maxRelDiff(out, exact), 1e-12);
                }
            }
    }
}

TEST(ReferencePolysketch, LocalExactWithOneBlockIsExactPolynomial) {
    std::mt19937_64 rng(17);
    Shape s{1, 2, 1, 9, 6, 4};
    const Inputs in = randomInputs(rng, s);
    const LayerNormParams qkNorm = randomLayerNorm(rng, s.h), localNorm = randomLayerNorm(rng, s.h);
    const RandomSketch random4 = makeRandomSketch(rng, 4, s.h, 5);
    const LearnedSketch learned = makeLearnedSketch(rng, s.h, 4, 0.3);
    for (int which = 0; which < 2; ++which) {
        PolysketchConfig c;
        c.sketch = which == 0 ? sketchFunction(random4) : sketchFunction(learned);
        c.degree = 4;
        c.scale = 0.4;
        c.localExact = true;
        c.qkNorm = &qkNorm;
        for (int bs : {9, 10, 256}) {
            c.blockSize = bs;
            std::vector<double> out, exact;
            // Local inputs fall back to qkNorm without localNorm...
            c.localNorm = nullptr;
            polysketchAttention(s, in.q, in.k, in.v, c, out);
            polynomialAttention(s, in.q, in.k, in.v, 0.4, 4, true, exact, &qkNorm);
            EXPECT_LT(maxRelDiff(out, exact), 1e-12);
            // ...and use localNorm when it is given.
            c.localNorm = &localNorm;
            polysketchAttention(s, in.q, in.k, in.v, c, out);
            polynomialAttention(s, in.q, in.k, in.v, 0.4, 4, true, exact, &localNorm);
            EXPECT_LT(maxRelDiff(out, exact), 1e-12);
        }
        // A smaller block does bring the sketch in (so the test above could fail).
        c.blockSize = 4;
        std::vector<double> out, exact;
        polysketchAttention(s, in.q, in.k, in.v, c, out);
        polynomialAttention(s, in.q, in.k, in.v, 0.4, 4, true, exact, &localNorm);
        EXPECT_GT(maxRelDiff(out, exact), 1e-6);
    }
}

// Sketched local and the block state carry the same inner products, so the output is the naive
// quadratic form with w_ij = <S(s q_i), S(k_j)>^2 whatever the block size.
TEST(ReferencePolysketch, SketchedLocalMatchesNaiveForAnyBlockSize) {
    std::mt19937_64 rng(18);
    Shape s{1, 1, 1, 13, 5, 3};
    const Inputs in = randomInputs(rng, s);
    const LayerNormParams ln = randomLayerNorm(rng, s.h);
    const RandomSketch random8 = makeRandomSketch(rng, 8, s.h, 4);
    const LearnedSketch learned = makeLearnedSketch(rng, s.h, 3, 0.3);
    for (int which = 0; which < 2; ++which) {
        PolysketchConfig c;
        c.sketch = which == 0 ? sketchFunction(random8) : sketchFunction(learned);
        c.scale = 0.6;
        c.qkNorm = &ln;
        for (bool causal : {true, false}) {
            c.causal = causal;
            // Naive quadratic form.
            std::vector<double> expected(s.outSize(), 0.0);
            const std::vector<double> Q = prepareRows(in.q.data(), s.n, s.h, &ln, 0.6);
            const std::vector<double> K = prepareRows(in.k.data(), s.n, s.h, &ln, 1.0);
            for (int i = 0; i < s.n; ++i) {
                std::vector<double> num(s.dv, 0.0);
                double denom = 1;
                const std::vector<double> sq = c.sketch(&Q[i * s.h]);
                for (int j = 0; j < (causal ? i + 1 : s.n); ++j) {
                    const std::vector<double> sk = c.sketch(&K[j * s.h]);
                    double inner = 0;
                    for (std::size_t a = 0; a < sq.size(); ++a) inner += sq[a] * sk[a];
                    denom += inner * inner;
                    for (int d = 0; d < s.dv; ++d) num[d] += inner * inner * in.v[j * s.dv + d];
                }
                for (int d = 0; d < s.dv; ++d) expected[i * s.dv + d] = num[d] / denom;
            }
            for (int bs : {1, 2, 5, 13, 64}) {
                c.blockSize = bs;
                std::vector<double> out;
                polysketchAttention(s, in.q, in.k, in.v, c, out);
                EXPECT_LT(maxRelDiff(out, expected), 1e-11) << "bs " << bs << " causal " << causal;
            }
        }
    }
}

TEST(ReferencePolysketch, FullModeIgnoresLocalExact) {
    std::mt19937_64 rng(19);
    Shape s{1, 1, 1, 7, 4, 2};
    const Inputs in = randomInputs(rng, s);
    PolysketchConfig c;
    c.sketch = sketchFunction(makeRandomSketch(rng, 4, s.h, 3));
    c.causal = false;
    c.blockSize = 3;
    std::vector<double> a, b;
    polysketchAttention(s, in.q, in.k, in.v, c, a);
    c.localExact = true;
    polysketchAttention(s, in.q, in.k, in.v, c, b);
    EXPECT_EQ(a, b);
}

// ------------------------------------------------------------------------------------------------
// Decoding
// ------------------------------------------------------------------------------------------------

TEST(ReferenceDecode, StepsAndPrefillMatchForward) {
    std::mt19937_64 rng(20);
    Shape s{2, 4, 2, 11, 5, 3};
    const Inputs in = randomInputs(rng, s);
    const LayerNormParams qkNorm = randomLayerNorm(rng, s.h), localNorm = randomLayerNorm(rng, s.h);
    const RandomSketch random4 = makeRandomSketch(rng, 4, s.h, 4);
    for (bool localExact : {false, true}) {
        SCOPED_TRACE(localExact ? "local exact" : "sketched local");
        PolysketchConfig c;
        c.sketch = sketchFunction(random4);
        c.scale = 0.8;
        c.blockSize = 3;
        c.localExact = localExact;
        c.qkNorm = &qkNorm;
        c.localNorm = localExact ? &localNorm : nullptr;
        std::vector<double> forward;
        polysketchAttention(s, in.q, in.k, in.v, c, forward);

        // Token t of a [B][H][n][d] tensor as [B][H][d].
        auto token = [&](const std::vector<double>& x, int H, int d, int t, int n) {
            std::vector<double> row;
            for (int b = 0; b < s.B; ++b)
                for (int hd = 0; hd < H; ++hd) {
                    const std::size_t off = ((std::size_t(b) * H + hd) * n + t) * d;
                    row.insert(row.end(), x.begin() + off, x.begin() + off + d);
                }
            return row;
        };
        auto checkRow = [&](const std::vector<double>& got, int t) {
            const std::vector<double> expected = token(forward, s.Hq, s.dv, t, s.n);
            EXPECT_LT(maxRelDiff(got, expected), 1e-11) << "token " << t;
        };

        for (int prompt : {0, 1, 3, 4}) {
            DecodeState st;
            if (prompt == 0) {
                st = polysketchDecodeBegin(s, c);
            } else {
                Shape ps = s;
                ps.n = prompt;
                Inputs p;
                for (int b = 0; b < s.B; ++b) {
                    for (int qh = 0; qh < s.Hq; ++qh) {
                        const std::size_t off = (std::size_t(b) * s.Hq + qh) * s.n * s.h;
                        p.q.insert(p.q.end(), in.q.begin() + off, in.q.begin() + off + prompt * s.h);
                    }
                    for (int kh = 0; kh < s.Hkv; ++kh) {
                        const std::size_t ko = (std::size_t(b) * s.Hkv + kh) * s.n * s.h;
                        const std::size_t vo = (std::size_t(b) * s.Hkv + kh) * s.n * s.dv;
                        p.k.insert(p.k.end(), in.k.begin() + ko, in.k.begin() + ko + prompt * s.h);
                        p.v.insert(p.v.end(), in.v.begin() + vo, in.v.begin() + vo + prompt * s.dv);
                    }
                }
                std::vector<double> prefillOut;
                st = polysketchPrefill(ps, p.q, p.k, p.v, c, prefillOut);
                for (int t = 0; t < prompt; ++t) checkRow(token(prefillOut, s.Hq, s.dv, t, prompt), t);
            }
            ASSERT_EQ(st.length, prompt);
            for (int t = prompt; t < s.n; ++t) {
                std::vector<double> out;
                polysketchDecodeStep(st, token(in.q, s.Hq, s.h, t, s.n), token(in.k, s.Hkv, s.h, t, s.n),
                                     token(in.v, s.Hkv, s.dv, t, s.n), out);
                checkRow(out, t);
                const std::size_t pending = localExact ? std::size_t((t + 1) % c.blockSize) : 0;
                EXPECT_EQ(st.blockK[0].size(), pending * s.h);
                EXPECT_EQ(st.blockV[0].size(), pending * s.dv);
            }
        }
    }
}

// The tests and psk conformance seed a case's inputs with caseSeed(name): FNV-1a 64, checked on the
// published vectors (the empty string is the offset basis) and on one conformance case's name, so
// that a wrong constant (a digit lost from the offset basis, say) cannot pass for the real thing.
TEST(ConformanceCaseSeed, IsFnv1a64OfTheName) {
    using psk::conformance::caseSeed;
    EXPECT_EQ(caseSeed(""), 0xcbf29ce484222325ull);
    EXPECT_EQ(caseSeed("a"), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(caseSeed("foobar"), 0x85944171f73967e8ull);
    EXPECT_EQ(caseSeed("seed_p4_r16_b16_full_f32_bhnd_B1_Hq2_Hkv1_n1_h32_dv32"), 0x9237ce1d40374b99ull);
}
