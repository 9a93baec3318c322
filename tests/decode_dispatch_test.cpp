// The decode step as one dispatch for every sequence and head: what a step records, and that its
// split over workgroups computes the rows of the causal forward over the same tokens.
// Polysketch (decode_output.comp, lib/decode/decode_step_plan.hpp): feature and block-row
// workgroups, each computing the token's sketch itself, combined by the last workgroup of each
// slot, the unfinished block's rows advanced on the device; every degree, with and without the
// q/k LayerNorms, and the 16-bit storage types (q, k, v read and out written by the step itself).
// Softmax (decode_softmax.comp): the KV cache split into key slices over workgroups (flash
// decoding), the token's k, v rows written into the cache by the step, partial (max, sum, acc)
// per slice merged by the last workgroup of each slot, the key counts advanced on the device.
//
// The slices are forced small (PSK_DECODE_STEP_SLICES, PSK_DECODE_SOFTMAX_SLICE) so that on small
// shapes every slot has several workgroups, partial last slices included; one case uses the
// slices the heuristic picks for an H200 on a model-sized shape.
// Metric: relativeMaxError over all rows of a sequence, with the thresholds of
// reference/conformance_cases.hpp (as decode_test): float32 kDecodeVsForward against the library's
// forward (float32 both sides, different summation order), kPolysketchFloat32 against the float64
// reference; 16-bit: the 16-bit output thresholds (kFloat16, kBFloat16) against both.
#include <polysketch/polysketch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "decode/decode_state.hpp"  // internals: what a step recorded
#include "decode/decode_step_plan.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/sketch_fixtures.hpp"
#include "sketch/sketch_weights.hpp"
#include "sketch/sketch_files.hpp"
#include "support/host_arrays.hpp"
#include "support/test_context.hpp"
#include "util/float16.hpp"

namespace {

using psk::test::ContextTest;
using psk::test::relativeMaxError;
using psk::test::setHostArrays;

struct Case {
    std::string name;
    bool learned = false, localExact = true;
    uint32_t degree = 4, r = 8, b = 16, h = 16, dv = 16, Hq = 4, Hkv = 2, B = 2;
    const char* slices = "5,3";  // PSK_DECODE_STEP_SLICES; nullptr: the library's own choice
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    bool qkNorm = false, localNorm = false;  // q/k LayerNorm; its own for the local part
    // Softmax: a KV cache of `capacity` tokens, `softmaxSlice` keys per workgroup
    // (PSK_DECODE_SOFTMAX_SLICE; nullptr: the library's choice), slot by slot when splitCache.
    bool softmax = false;
    uint32_t capacity = 0;
    const char* softmaxSlice = nullptr;
    bool splitCache = false;
    uint32_t prompt = 5;  // the split test's first prompt (sequence s: prompt + 7 s tokens)
    float qGain = 1.0f;   // q rows times this: softmax scores of hundreds, where a wrong running max overflows e^x
};

/** A softmax case: B sequences, Hq / Hkv heads, head dims h and dv, keys per workgroup. */
Case softmaxCase(const char* name, uint32_t h, uint32_t dv, uint32_t Hq, uint32_t Hkv, uint32_t B, const char* slice,
                 PskDataType type = PSK_DATA_TYPE_FLOAT32, bool splitCache = false) {
    Case c;
    c.name = name;
    c.softmax = true;
    c.localExact = false;
    c.h = h;
    c.dv = dv;
    c.Hq = Hq;
    c.Hkv = Hkv;
    c.B = B;
    c.capacity = 320;
    c.slices = nullptr;
    c.softmaxSlice = slice;
    c.type = type;
    c.splitCache = splitCache;
    return c;
}

Case longPrompt(Case c, uint32_t prompt) {
    c.prompt = prompt;
    return c;
}
Case largeScores(Case c, float gain) {
    c.qGain = gain;
    return c;
}
Case withType(Case c, PskDataType type, const char* name) {
    c.type = type;
    c.name = name;
    return c;
}
Case withNorms(Case c, bool localNorm, const char* name) {
    c.qkNorm = true;
    c.localNorm = localNorm;
    c.name = name;
    return c;
}

/** Storage-type elements of float values (16-bit: rounded to nearest even), and back. */
std::vector<uint16_t> encode16(const std::vector<float>& x, PskDataType type) {
    std::vector<uint16_t> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = type == PSK_DATA_TYPE_FLOAT16 ? psk::floatToHalf(x[i]) : psk::floatToBf16(x[i]);
    return y;
}
std::vector<float> decode16(const std::vector<uint16_t>& x, PskDataType type) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = type == PSK_DATA_TYPE_FLOAT16 ? psk::halfToFloat(x[i]) : psk::bf16ToFloat(x[i]);
    return y;
}

/** Sets an environment variable for its lifetime (the slices are read when a decode state is created). */
struct EnvOverride {
    const char* name;
    EnvOverride(const char* variable, const char* value) : name(variable) {
        if (value) setenv(name, value, 1);
    }
    ~EnvOverride() { unsetenv(name); }
};

/** max |x|: the scale relativeMaxError divides by. */
double maxAbs(const std::vector<double>& x) {
    double m = 0;
    for (double v : x) m = std::max(m, std::fabs(v));
    return m;
}

/** A causal polysketch attention, its float64 reference, a decode state and what each sequence consumed. */
struct Rig {
    Case c;
    PskAttention attention = nullptr;
    PskDecodeState state = nullptr;
    psk::ref::PolysketchConfig ref;
    psk::ref::LayerNormParams qkNorm, localNorm;
    float scale = 0;
    // Per sequence, token-major: q [t][Hq][h], k [t][Hkv][h], v [t][Hkv][dv], out [t][Hq][dv].
    std::vector<std::vector<float>> q, k, v, out;
    // Per sequence: how many of its first tokens a prefill computed (the rest are steps).
    std::vector<uint32_t> prefilled;
    uint64_t rng = 500;

    explicit Rig(PskContext ctx, const Case& cs) : c(cs), q(cs.B), k(cs.B), v(cs.B), out(cs.B), prefilled(cs.B, 0) {
        PskAttentionCreateInfo info{};
        info.kind = c.softmax ? PSK_ATTENTION_KIND_SOFTMAX : PSK_ATTENTION_KIND_POLYSKETCH;
        info.flags = PSK_ATTENTION_CAUSAL_BIT | (c.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
        info.degree = c.degree;
        scale = 1.0f / std::sqrt(float(c.h));
        info.scale = scale;
        info.numQueryHeads = c.Hq;
        info.numKeyValueHeads = c.Hkv;
        info.headDim = c.h;
        info.valueDim = c.dv;
        info.sketchSize = c.softmax ? 0 : c.r;
        info.blockSize = c.softmax ? 0 : c.b;
        info.seed = 11;
        info.dataType = c.type;
        psk::test::TempFile sketchFile("psk_decode_dispatch_sketch"), normFile("psk_decode_dispatch_norm");
        if (c.softmax) {
            info.degree = 0;
        } else if (c.learned) {
            const psk::LearnedSketchWeights w = psk::test::randomLearnedSketch(c.h, c.r, 15);
            psk::writeSafeTensors(sketchFile.path(), psk::learnedSketchToSafeTensors(w));
            info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
            info.sketchFile = sketchFile.path().c_str();
            ref.sketch = psk::ref::sketchFunction(psk::test::toReference(w));
        } else {
            ref.sketch = psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(11, c.degree, c.h, c.r)));
        }
        if (c.qkNorm) {
            const psk::QkNormWeights norm = psk::test::randomQkNorm(c.h, c.localNorm, 16);
            psk::writeSafeTensors(normFile.path(), psk::qkNormToSafeTensors(norm));
            info.qkNormFile = normFile.path().c_str();
            qkNorm = psk::test::toReference(norm.scale, norm.bias);
            ref.qkNorm = &qkNorm;
            if (c.localNorm) {
                localNorm = psk::test::toReference(norm.localScale, norm.localBias);
                ref.localNorm = &localNorm;
            }
        }
        ref.degree = int(c.degree);
        ref.scale = scale;
        ref.causal = true;
        ref.localExact = c.localExact;
        ref.blockSize = int(c.b);
        EXPECT_EQ(pskCreateAttention(ctx, &info, &attention), PSK_SUCCESS);
        if (!attention) return;
        EnvOverride slices("PSK_DECODE_STEP_SLICES", c.slices), softmaxSlice("PSK_DECODE_SOFTMAX_SLICE", c.softmaxSlice),
            split("PSK_DECODE_SPLIT_CACHE", c.splitCache ? "1" : nullptr);
        PskDecodeStateCreateInfo si{};
        si.batchSize = c.B;
        si.capacity = c.capacity;
        EXPECT_EQ(pskCreateDecodeState(attention, &si, &state), PSK_SUCCESS);
    }
    ~Rig() {
        pskDestroyDecodeState(state);
        pskDestroyAttention(attention);
    }

    static std::vector<float> bhnd(const std::vector<float>& x, uint32_t n, uint32_t H, uint32_t d, bool toBhnd) {
        std::vector<float> y(x.size());
        for (uint32_t t = 0; t < n; ++t)
            for (uint32_t hd = 0; hd < H; ++hd) {
                const size_t tokenMajor = (size_t(t) * H + hd) * d, headMajor = (size_t(hd) * n + t) * d;
                std::memcpy(&y[toBhnd ? headMajor : tokenMajor], &x[toBhnd ? tokenMajor : headMajor], d * 4);
            }
        return y;
    }

    bool sixteenBit() const { return c.type != PSK_DATA_TYPE_FLOAT32; }

    /** Random normal values, representable in the storage type (what the library and the reference both see). */
    std::vector<float> randomRows(size_t count, float gain = 1.0f) {
        std::vector<float> x = psk::test::randomNormal(count, ++rng, gain);
        return sixteenBit() ? decode16(encode16(x, c.type), c.type) : x;
    }

    /** Calls `call` on `info` with q, k, v and out in the storage type; returns out as floats. */
    template <typename Info, typename Call>
    std::vector<float> callWith(Info& info, const std::vector<float>& qx, const std::vector<float>& kx, const std::vector<float>& vx,
                                size_t outCount, Call call) {
        if (!sixteenBit()) {
            std::vector<float> o(outCount, NAN);
            setHostArrays(info, qx, kx, vx, &o);
            EXPECT_EQ(call(info), PSK_SUCCESS);
            return o;
        }
        const std::vector<uint16_t> q16 = encode16(qx, c.type), k16 = encode16(kx, c.type), v16 = encode16(vx, c.type);
        std::vector<uint16_t> o16(outCount, 0x7FFF);  // NaN in both types
        setHostArrays(info, q16, k16, v16, &o16);
        EXPECT_EQ(call(info), PSK_SUCCESS);
        return decode16(o16, c.type);
    }

    void prefill(uint32_t s, uint32_t n) {
        q[s] = randomRows(size_t(n) * c.Hq * c.h, c.qGain);
        k[s] = randomRows(size_t(n) * c.Hkv * c.h);
        v[s] = randomRows(size_t(n) * c.Hkv * c.dv);
        const std::vector<float> qb = bhnd(q[s], n, c.Hq, c.h, true), kb = bhnd(k[s], n, c.Hkv, c.h, true),
                                 vb = bhnd(v[s], n, c.Hkv, c.dv, true);
        PskDecodePrefillInfo info{};
        info.firstSequence = s;
        info.seqLen = n;
        const std::vector<float> o = callWith(info, qb, kb, vb, size_t(n) * c.Hq * c.dv,
                                              [&](PskDecodePrefillInfo& i) { return pskDecodePrefillHost(state, &i); });
        out[s] = bhnd(o, n, c.Hq, c.dv, false);
        prefilled[s] = n;
    }

    /**
     * Where sequence s's largest error against `want` (token-major, as out[s]) sits: "token t (a
     * prefill row)" or "(a step row)", so that a failure names the path that made the row (the
     * forward's kernels or the decode step).
     */
    std::string worstToken(uint32_t s, const std::vector<double>& want) const {
        const size_t per = size_t(c.Hq) * c.dv;
        double worst = -1;
        size_t at = 0;
        for (size_t i = 0; i < out[s].size() && i < want.size(); ++i) {
            const double e = std::fabs(double(out[s][i]) - want[i]);
            if (e > worst) worst = e, at = i;
        }
        const size_t t = at / per;
        return "token " + std::to_string(t) + (t < prefilled[s] ? " (a prefill row)" : " (a step row)");
    }

    /**
     * Sketched mode (every row is phi(q)^T z): how much each token t0 <= t < t1 of sequence s
     * amplifies a relative perturbation e of the terms phi_f(q_t) z_fc (z_fc = sum_{j<=t} phi_f(k_j)
     * [v_j | 1]_c), on the test's error scale: O_c = num_c / (1 + den) moves by up to
     * e (sum_f |phi_f(q) z_fc| + |O_c| sum_f |phi_f(q) z_f,dv|) / (1 + den), divided by max |O| of the
     * sequence (`scale`); the largest over the query heads and columns, in float64. The random
     * sketch's features have either sign, so the sums of |terms| exceed the sums; the forward's rows
     * inside a block square <S(q), S(k)> instead and do not cancel.
     */
    std::vector<double> perturbationGains(uint32_t s, uint32_t t0, uint32_t t1, double scale) const {
        std::vector<double> qs(q[s].begin(), q[s].end()), ks(k[s].begin(), k[s].end());
        for (double& x : qs) x *= ref.scale;
        int F = 0;
        const std::vector<double> pq = psk::ref::featureRows(ref.sketch, qs.data(), int(qs.size() / c.h), int(c.h), F);
        const std::vector<double> pk = psk::ref::featureRows(ref.sketch, ks.data(), int(ks.size() / c.h), int(c.h), F);
        std::vector<double> gains(t1 - t0, 0.0);
        for (uint32_t hd = 0; hd < c.Hq; ++hd) {
            const uint32_t kh = hd / (c.Hq / c.Hkv);
            std::vector<double> z(size_t(F) * (c.dv + 1), 0.0);  // z_fc over the keys up to t
            for (uint32_t t = 0; t < t1; ++t) {
                for (int f = 0; f < F; ++f) {
                    const double p = pk[(size_t(t) * c.Hkv + kh) * F + f];
                    for (uint32_t col = 0; col <= c.dv; ++col)
                        z[size_t(f) * (c.dv + 1) + col] += p * (col < c.dv ? double(v[s][(size_t(t) * c.Hkv + kh) * c.dv + col]) : 1.0);
                }
                if (t < t0) continue;
                std::vector<double> num(c.dv + 1, 0.0), magnitude(c.dv + 1, 0.0);
                for (int f = 0; f < F; ++f) {
                    const double a = pq[(size_t(t) * c.Hq + hd) * F + f];
                    for (uint32_t col = 0; col <= c.dv; ++col) {
                        num[col] += a * z[size_t(f) * (c.dv + 1) + col];
                        magnitude[col] += std::fabs(a * z[size_t(f) * (c.dv + 1) + col]);
                    }
                }
                const double den = 1.0 + num[c.dv];
                for (uint32_t col = 0; col < c.dv; ++col)
                    gains[t - t0] = std::max(gains[t - t0], (magnitude[col] + std::fabs(num[col] / den) * magnitude[c.dv]) / std::fabs(den) / scale);
            }
        }
        return gains;
    }

    /**
     * Sequence s's error of each token t0 <= t < t1 against `want` (token-major, as out[s]), on the
     * whole sequence's scale (max |want|), as "t:e" items: where a failure's error starts and how it
     * grows, one step to the next (a step that goes wrong once, or a state that drifts).
     */
    std::string tokenProfile(uint32_t s, const std::vector<double>& want, uint32_t t0, uint32_t t1) const {
        const size_t per = size_t(c.Hq) * c.dv;
        const double scale = maxAbs(want);
        std::string text;
        for (uint32_t t = t0; t < t1 && (t + 1) * per <= out[s].size() && (t + 1) * per <= want.size(); ++t) {
            double e = 0;
            for (size_t i = t * per; i < (t + 1) * per; ++i) e = std::max(e, std::fabs(double(out[s][i]) - want[i]));
            char item[48];
            std::snprintf(item, sizeof item, "%s%u:%.2e", text.empty() ? "" : " ", t, scale > 0 ? e / scale : e);
            text += item;
        }
        return text;
    }

    /** One step of every sequence. */
    void step() {
        const std::vector<float> sq = randomRows(size_t(c.B) * c.Hq * c.h, c.qGain), sk = randomRows(size_t(c.B) * c.Hkv * c.h),
                                 sv = randomRows(size_t(c.B) * c.Hkv * c.dv);
        PskDecodeStepInfo info{};
        const std::vector<float> o = callWith(info, sq, sk, sv, size_t(c.B) * c.Hq * c.dv,
                                              [&](PskDecodeStepInfo& i) { return pskDecodeStepHost(state, &i); });
        for (uint32_t s = 0; s < c.B; ++s) {
            auto append = [&](std::vector<float>& dst, const std::vector<float>& src, size_t per) {
                dst.insert(dst.end(), src.begin() + s * per, src.begin() + (s + 1) * per);
            };
            append(q[s], sq, size_t(c.Hq) * c.h);
            append(k[s], sk, size_t(c.Hkv) * c.h);
            append(v[s], sv, size_t(c.Hkv) * c.dv);
            append(out[s], o, size_t(c.Hq) * c.dv);
        }
    }

    /** Every row of every sequence against the library's forward and the float64 reference. */
    void check() {
        const double toForward = psk::conformance::outputThreshold(c.type, psk::conformance::kDecodeVsForward);
        const double toReference = psk::conformance::threshold(c.type, psk::conformance::Family::Polysketch);
        for (uint32_t s = 0; s < c.B; ++s) {
            const uint32_t n = uint32_t(q[s].size() / (size_t(c.Hq) * c.h));
            const std::vector<float> qb = bhnd(q[s], n, c.Hq, c.h, true), kb = bhnd(k[s], n, c.Hkv, c.h, true),
                                     vb = bhnd(v[s], n, c.Hkv, c.dv, true);
            PskForwardHostInfo f{};
            f.seqLen = n;
            const std::vector<float> o = callWith(f, qb, kb, vb, size_t(n) * c.Hq * c.dv,
                                                  [&](PskForwardHostInfo& i) { return pskAttentionForwardHost(attention, &i); });
            const std::vector<float> forward = bhnd(o, n, c.Hq, c.dv, false);
            const std::vector<double> forward64(forward.begin(), forward.end());
            const double eForward = relativeMaxError(out[s], forward64);
            EXPECT_LE(eForward, toForward) << c.name << ": sequence " << s << " of " << n << " tokens vs the library forward, worst at "
                                           << worstToken(s, forward64);

            psk::ref::Shape shape;
            shape.Hq = int(c.Hq);
            shape.Hkv = int(c.Hkv);
            shape.n = int(n);
            shape.h = int(c.h);
            shape.dv = int(c.dv);
            std::vector<double> want;
            const std::vector<double> q64(qb.begin(), qb.end()), k64(kb.begin(), kb.end()), v64(vb.begin(), vb.end());
            if (c.softmax)
                psk::ref::softmaxAttention(shape, q64, k64, v64, scale, true, want);
            else
                psk::ref::polysketchAttention(shape, q64, k64, v64, ref, want);
            std::vector<double> wantTokenMajor(want.size());
            for (uint32_t t = 0; t < n; ++t)
                for (uint32_t hd = 0; hd < c.Hq; ++hd)
                    for (uint32_t e = 0; e < c.dv; ++e)
                        wantTokenMajor[(size_t(t) * c.Hq + hd) * c.dv + e] = want[(size_t(hd) * n + t) * c.dv + e];
            const double eRef = relativeMaxError(out[s], wantTokenMajor);
            EXPECT_LE(eRef, toReference) << c.name << ": sequence " << s << " of " << n << " tokens vs the float64 reference, worst at "
                                         << worstToken(s, wantTokenMajor);
            std::printf("[ decode ] %s sequence %u, %u tokens (%u prefilled): error vs forward %.2e (%s), vs reference %.2e (%s)\n",
                        c.name.c_str(), s, n, prefilled[s], eForward, worstToken(s, forward64).c_str(), eRef,
                        worstToken(s, wantTokenMajor).c_str());
            // The last prefill row and the first block's steps after it, token by token (where a
            // GPU's step error started, and how much each row amplifies a perturbation of the
            // state: docs/RELIABILITY.md).
            const uint32_t from = prefilled[s] > 0 ? prefilled[s] - 1 : 0, to = std::min(n, std::max(from + 8, c.b + 2));
            std::printf("[ decode ]   tokens %u-%u vs forward: %s\n[ decode ]   vs reference: %s\n", from, to - 1,
                        tokenProfile(s, forward64, from, to).c_str(), tokenProfile(s, wantTokenMajor, from, to).c_str());
            if (!c.softmax && !c.localExact) {
                const std::vector<double> gain = perturbationGains(s, from, to, maxAbs(wantTokenMajor));
                std::string gains;
                for (uint32_t t = from; t < to; ++t) {
                    char item[48];
                    std::snprintf(item, sizeof item, "%s%u:%.1f", gains.empty() ? "" : " ", t, gain[t - from]);
                    gains += item;
                }
                std::printf("[ decode ]   error per unit relative perturbation of the state's terms: %s\n", gains.c_str());
            }
        }
    }
};

const PskDecodeState_T::StepRecording& lastStep(PskDecodeState state) { return state->lastStepRecording(); }

// ---- what a step records ----

class DecodeStepRecording : public ContextTest, public ::testing::WithParamInterface<Case> {};

// Every step, block-ending ones included, records one dispatch for every sequence and head (a
// learned sketch: the forward's feature map of q and k first, two more; a softmax cache too large
// for one binding: one per sequence and head): no copies (no 16-bit conversions either), no
// fills, one submit.
TEST_P(DecodeStepRecording, OneDispatchPerStep) {
    Rig rig(ctx, GetParam());
    ASSERT_TRUE(rig.state);
    rig.prefill(0, 7);
    rig.prefill(1, 16);
    for (uint32_t t = 0; t < rig.c.b + 3; ++t) {  // at least one block end for each sequence
        rig.step();
        const auto& r = lastStep(rig.state);
        EXPECT_EQ(r.dispatches, rig.c.learned ? 3u : rig.c.splitCache ? rig.c.B * rig.c.Hkv : 1u) << "step " << t;
        EXPECT_EQ(r.copies, 0u) << "step " << t;
        EXPECT_EQ(r.fills, 0u) << "step " << t;
        EXPECT_EQ(r.submits, 1u) << "step " << t;
    }
    rig.check();
}

INSTANTIATE_TEST_SUITE_P(Kinds, DecodeStepRecording,
                         ::testing::Values(Case{"localexact", false, true}, Case{"sketched", false, false},
                                           Case{"localexact_p8", false, true, 8}, Case{"localexact_p2", false, true, 2},
                                           withNorms(Case{}, true, "localexact_norms"),
                                           withType(Case{}, PSK_DATA_TYPE_FLOAT16, "localexact_f16"),
                                           withType(Case{"", false, false}, PSK_DATA_TYPE_BFLOAT16, "sketched_bf16"),
                                           Case{"learned_localexact", true, true},
                                           softmaxCase("softmax", 16, 16, 4, 2, 2, "5"),
                                           softmaxCase("softmax_bf16", 16, 16, 4, 2, 2, nullptr, PSK_DATA_TYPE_BFLOAT16),
                                           softmaxCase("softmax_split_cache", 16, 16, 4, 2, 2, "5", PSK_DATA_TYPE_FLOAT32, true)),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- the split step equals the forward ----

class SplitDecodeStep : public ContextTest, public ::testing::WithParamInterface<Case> {};

// Sequences at different positions of their blocks, steps across several block ends, a reset
// sequence starting over mid-way, then a save and restore (the unfinished blocks' row counts come
// back from the positions) and more steps on the restored state.
TEST_P(SplitDecodeStep, MatchesForwardAcrossBlocksResetAndRestore) {
    const Case& c = GetParam();
    Rig rig(ctx, c);
    ASSERT_TRUE(rig.state);
    for (uint32_t s = 0; s < c.B; ++s) rig.prefill(s, c.prompt + 7 * s);
    for (uint32_t t = 0; t < c.b + 5; ++t) rig.step();
    rig.check();

    ASSERT_EQ(pskResetDecodeSequence(rig.state, 0), PSK_SUCCESS);
    rig.prefilled[0] = 0;
    rig.q[0].clear();
    rig.k[0].clear();
    rig.v[0].clear();
    rig.out[0].clear();
    for (uint32_t t = 0; t < c.b / 2 + 3; ++t) rig.step();

    size_t size = 0;
    ASSERT_EQ(pskSerializeDecodeState(rig.state, nullptr, &size), PSK_SUCCESS);
    std::vector<uint8_t> blob(size);
    ASSERT_EQ(pskSerializeDecodeState(rig.state, blob.data(), &size), PSK_SUCCESS);
    for (uint32_t t = 0; t < 3; ++t) rig.step();  // steps the restore must undo
    ASSERT_EQ(pskRestoreDecodeState(rig.state, blob.data(), blob.size()), PSK_SUCCESS);
    for (uint32_t s = 0; s < c.B; ++s) {  // drop what the undone steps consumed
        auto drop = [](std::vector<float>& x, size_t per) { x.resize(x.size() - 3 * per); };
        drop(rig.q[s], size_t(c.Hq) * c.h);
        drop(rig.k[s], size_t(c.Hkv) * c.h);
        drop(rig.v[s], size_t(c.Hkv) * c.dv);
        drop(rig.out[s], size_t(c.Hq) * c.dv);
    }
    for (uint32_t t = 0; t < c.b; ++t) rig.step();
    rig.check();
}

Case h200Shape() {
    // The slices the heuristic picks on an H200 (132 multiprocessors) for r = 32, b = 64, h = dv =
    // 64, Hq = 4, Hkv = 2, B = 2: several feature and row workgroups per slot.
    Case c{"h200_slices", false, true, 4, 32, 64, 64, 64, 4, 2, 2};
    psk::DecodeStepShape shape;
    shape.features = 32 * 33 / 2;
    shape.blockRows = c.b;
    shape.slots = c.B * c.Hkv;
    shape.headRatio = c.Hq / c.Hkv;
    shape.headDim = c.h;
    shape.valueDim = c.dv;
    const psk::DecodeStepSlices s = psk::planDecodeStep(shape, 132, false);
    static std::string text;
    text = std::to_string(s.featureSlice) + "," + std::to_string(s.rowSlice);
    c.slices = text.c_str();
    return c;
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, SplitDecodeStep,
    ::testing::Values(Case{"localexact_p4", false, true, 4},
                      Case{"sketched_p4", false, false, 4},
                      // odd sizes: F = 45 (r = 9) over slices of 7, b = 19 over rows of 3, dv = 13, h = 17,
                      // three query heads per key/value head, three sequences
                      Case{"localexact_odd_gqa3", false, true, 4, 9, 19, 17, 13, 6, 2, 3, "7,3"},
                      Case{"sketched_odd_gqa3", false, false, 4, 9, 19, 17, 13, 6, 2, 3, "7,3"},
                      Case{"localexact_p8", false, true, 8},
                      Case{"sketched_p8", false, false, 8},
                      // p = 2: S(x) = x, r = h
                      Case{"localexact_p2", false, true, 2},
                      // the q/k LayerNorm alone, and with the local part's own
                      withNorms(Case{}, false, "localexact_qknorm"),
                      withNorms(Case{"", false, true, 8, 9, 19, 17, 13, 6, 2, 3, "7,3"}, true, "localexact_norms_odd_p8"),
                      withNorms(Case{"", false, false}, false, "sketched_qknorm"),
                      Case{"learned_localexact", true, true, 4},
                      // the storage types: q, k, v read and out written by the step
                      withType(Case{}, PSK_DATA_TYPE_FLOAT16, "localexact_f16"),
                      withType(Case{"", false, false, 8}, PSK_DATA_TYPE_FLOAT16, "sketched_p8_f16"),
                      withType(withNorms(Case{}, true, ""), PSK_DATA_TYPE_BFLOAT16, "localexact_norms_bf16"),
                      withType(Case{"", true, true}, PSK_DATA_TYPE_FLOAT16, "learned_localexact_f16"),
                      // one slice each: the combine of a single feature and a single row workgroup
                      Case{"localexact_one_slice", false, true, 4, 8, 16, 16, 16, 4, 2, 2, "1000,1000"},
                      // many slices: 18 feature and 16 row workgroups per slot, so the last workgroup
                      // combines the partials in several chunks (16 groups per chunk with one value
                      // column per invocation, 8 with two: dv = 70), the last one partial
                      Case{"localexact_many_groups", false, true, 4, 8, 16, 16, 16, 4, 2, 2, "2,1"},
                      Case{"localexact_many_groups_dv70", false, true, 4, 8, 16, 16, 70, 4, 2, 2, "2,1"},
                      // softmax: slices of 5 keys (several per sequence, a partial last one), of 64
                      // (one tile), the library's choice; GQA 3:1 with odd head dims and three
                      // sequences; 16-bit; a cache bound slot by slot
                      softmaxCase("softmax_slice5", 16, 16, 4, 2, 2, "5"),
                      softmaxCase("softmax_slice64", 16, 16, 4, 2, 2, "64"),
                      softmaxCase("softmax_own_slices", 16, 16, 4, 2, 2, nullptr),
                      softmaxCase("softmax_odd_gqa3", 17, 13, 6, 2, 3, "7"),
                      softmaxCase("softmax_f16", 16, 16, 4, 2, 2, "5", PSK_DATA_TYPE_FLOAT16),
                      softmaxCase("softmax_bf16_gqa3", 17, 13, 6, 2, 3, "3", PSK_DATA_TYPE_BFLOAT16),
                      softmaxCase("softmax_split_cache", 17, 13, 6, 2, 2, "7", PSK_DATA_TYPE_FLOAT32, true),
                      // slices of 100 keys over sequences of 150 to 200: two tiles per slice (the
                      // running max, sum and values rescaled between them), two slices
                      longPrompt(softmaxCase("softmax_slice100_tiles", 16, 16, 4, 2, 2, "100"), 150),
                      longPrompt(softmaxCase("softmax_slice100_tiles_gqa3", 17, 13, 6, 2, 3, "100", PSK_DATA_TYPE_FLOAT16), 150),
                      // slices of 2 keys: over 64 slices per sequence (the combine's max over more
                      // groups than invocations, its loads in several chunks)
                      longPrompt(softmaxCase("softmax_slice2_many_groups", 16, 16, 4, 2, 2, "2"), 150),
                      // scores of a few hundred (q times 64): e^(s - m) overflows unless m is the
                      // running maximum (a tile's, the slices' in the combine)
                      largeScores(longPrompt(softmaxCase("softmax_large_scores", 16, 16, 4, 2, 2, "20"), 150), 64.0f),
                      h200Shape()),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- the heuristic ----

TEST(DecodeStepPlan, SlicesCoverTheWorkAndFillTheDevice) {
    psk::DecodeStepShape shape;  // the model: H = 16, h = dv = 64, r = 32, b = 256
    shape.features = 528;
    shape.blockRows = 256;
    shape.slots = 16;
    shape.headRatio = 1;
    shape.headDim = 64;
    shape.valueDim = 64;
    for (uint32_t processors : {0u, 1u, 8u, 132u, 1000u})
        for (bool cpu : {false, true}) {
            const psk::DecodeStepSlices s = psk::planDecodeStep(shape, processors, cpu);
            EXPECT_GE(uint64_t(s.featureSlice) * s.featureGroups, shape.features);
            EXPECT_LT(uint64_t(s.featureSlice) * (s.featureGroups - 1), shape.features);
            EXPECT_GE(uint64_t(s.rowSlice) * s.rowGroups, shape.blockRows);
            EXPECT_LT(uint64_t(s.rowSlice) * (s.rowGroups - 1), shape.blockRows);
            EXPECT_GE(s.rowGroups, 1u);
        }
    // An H200: at least one workgroup per multiprocessor.
    EXPECT_GE(psk::planDecodeStep(shape, 132, false).groupsPerSlot() * shape.slots, 132u);
    // A CPU device: few workgroups.
    EXPECT_LE(psk::planDecodeStep(shape, 0, true).groupsPerSlot() * shape.slots, 32u);
    // Sketched local weights: no row workgroups.
    shape.blockRows = 0;
    EXPECT_EQ(psk::planDecodeStep(shape, 132, false).rowGroups, 0u);
    // Explicit slices.
    psk::DecodeStepSlices s;
    EXPECT_TRUE(psk::parseDecodeStepSlices("100,7", shape, s));
    EXPECT_EQ(s.featureGroups, 6u);
    EXPECT_FALSE(psk::parseDecodeStepSlices("100", shape, s));
    EXPECT_FALSE(psk::parseDecodeStepSlices("0,3", shape, s));
}

}  // namespace
