// Incremental decoding (docs/MATH.md section 7): a prompt, then steps across several block boundaries,
// must produce the rows of one causal forward over the whole sequence; the state does not grow;
// it survives serialization onto another context; the softmax KV-cache step matches the softmax
// forward; bad inputs get their specific code.
//
// Metric: relativeMaxError = max |decoded - want| / max |want| over all rows of a sequence.
// Against the library's own forward (float32 both sides, different summation order):
// kDecodeVsForward. Against the float64 reference: kPolysketchFloat32, the threshold of the
// float32 polysketch conformance tests (reference/conformance_cases.hpp, also for the softmax KV
// cache, as in psk conformance). The polysketch configurations are decodeSweep's, seeded as psk
// conformance seeds them (caseSeed of the case's name).
#include <polysketch/polysketch_vulkan.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "vk/context.hpp"  // internals: the context's device, allocator and queue for pskCmdDecodeStep
#include "decode/decode_blob.hpp"  // internals: the blob's checksum, to edit one field of a blob at a time
#include "util/error.hpp"
#include "util/float16.hpp"
#include "vk/memory.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "sketch/sketch_weights.hpp"
#include "support/host_arrays.hpp"
#include "support/kernel_paths.hpp"
#include "reference/sketch_fixtures.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;
using psk::test::relativeMaxError;
using psk::test::setHostArrays;

struct Config {
    PskAttentionKind kind = PSK_ATTENTION_KIND_POLYSKETCH;
    bool learned = false, localExact = false;
    uint32_t degree = 4, r = 8, b = 16, h = 16, dv = 16, Hq = 4, Hkv = 2;
    uint64_t seed = 7;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
};

/** An attention object plus the float64 reference config that computes the same function. */
struct Attention {
    Config c;
    PskAttention handle = nullptr;
    psk::ref::PolysketchConfig ref;
    float scale = 0;
    ~Attention() { pskDestroyAttention(handle); }
};

std::unique_ptr<Attention> makeAttention(PskContext ctx, const Config& c) {
    auto a = std::make_unique<Attention>();
    a->c = c;
    PskAttentionCreateInfo info{};
    info.kind = c.kind;
    info.flags = PSK_ATTENTION_CAUSAL_BIT | (c.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    info.degree = c.degree;
    a->scale = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0.0f : 1.0f / std::sqrt(float(c.h));
    info.scale = a->scale;
    info.numQueryHeads = c.Hq;
    info.numKeyValueHeads = c.Hkv;
    info.headDim = c.h;
    info.valueDim = c.dv;
    info.sketchSize = c.r;
    info.blockSize = c.b;
    info.seed = c.seed;
    info.dataType = c.type;
    psk::test::TempFile sketchFile("psk_decode_sketch");
    if (c.kind == PSK_ATTENTION_KIND_POLYSKETCH) {
        if (c.learned) {
            const psk::LearnedSketchWeights w = psk::test::randomLearnedSketch(c.h, c.r, c.seed + 4);
            psk::writeSafeTensors(sketchFile.path(), psk::learnedSketchToSafeTensors(w));
            info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
            info.sketchFile = sketchFile.path().c_str();
            a->ref.sketch = psk::ref::sketchFunction(psk::test::toReference(w));
        } else {
            a->ref.sketch = psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(c.seed, c.degree, c.h, c.r)));
        }
        a->ref.degree = int(c.degree);
        a->ref.scale = a->scale;
        a->ref.causal = true;
        a->ref.localExact = c.localExact;
        a->ref.blockSize = int(c.b);
    }
    EXPECT_EQ(pskCreateAttention(ctx, &info, &a->handle), PSK_SUCCESS);
    if (!a->handle) return nullptr;
    return a;
}

/** The tokens one sequence consumed since its last reset, token-major ([t][head][dim]), and the rows produced. */
struct Sequence {
    std::vector<float> q, k, v, out;
    uint32_t tokens = 0;
};

/** Token-major [n][H][d] -> BHND [1][H][n][d]. */
std::vector<float> toBhnd(const std::vector<float>& x, uint32_t n, uint32_t H, uint32_t d) {
    std::vector<float> y(x.size());
    for (uint32_t t = 0; t < n; ++t)
        for (uint32_t hd = 0; hd < H; ++hd)
            std::memcpy(&y[(size_t(hd) * n + t) * d], &x[(size_t(t) * H + hd) * d], d * 4);
    return y;
}
std::vector<float> fromBhnd(const std::vector<float>& y, uint32_t n, uint32_t H, uint32_t d) {
    std::vector<float> x(y.size());
    for (uint32_t t = 0; t < n; ++t)
        for (uint32_t hd = 0; hd < H; ++hd)
            std::memcpy(&x[(size_t(t) * H + hd) * d], &y[(size_t(hd) * n + t) * d], d * 4);
    return x;
}

/** Drives a decode state over B sequences and keeps what each consumed and produced. */
struct Driver {
    const Attention& a;
    PskDecodeState state = nullptr;
    std::vector<Sequence> seqs;
    uint64_t rng = 1000;

    Driver(const Attention& attention, uint32_t B, uint32_t capacity = 0, PskDecodeStateFlags flags = 0) : a(attention), seqs(B) {
        PskDecodeStateCreateInfo info{};
        info.batchSize = B;
        info.capacity = capacity;
        info.flags = flags;
        EXPECT_EQ(pskCreateDecodeState(a.handle, &info, &state), PSK_SUCCESS);
    }
    ~Driver() { pskDestroyDecodeState(state); }

    /** withOutput false: out = NULL (state only); the sequence's rows are then not checked. */
    void prefill(uint32_t s, uint32_t n, bool withOutput = true) {
        const Config& c = a.c;
        Sequence& sq = seqs[s];
        sq = Sequence{};
        sq.q = psk::test::randomNormal(size_t(n) * c.Hq * c.h, ++rng);
        sq.k = psk::test::randomNormal(size_t(n) * c.Hkv * c.h, ++rng);
        sq.v = psk::test::randomNormal(size_t(n) * c.Hkv * c.dv, ++rng);
        const std::vector<float> q = toBhnd(sq.q, n, c.Hq, c.h), k = toBhnd(sq.k, n, c.Hkv, c.h), v = toBhnd(sq.v, n, c.Hkv, c.dv);
        std::vector<float> out(size_t(n) * c.Hq * c.dv, NAN);
        PskDecodePrefillInfo info{};
        info.firstSequence = s;
        info.seqLen = n;
        setHostArrays(info, q, k, v, withOutput ? &out : nullptr);
        ASSERT_EQ(pskDecodePrefillHost(state, &info), PSK_SUCCESS);
        sq.out = fromBhnd(out, n, c.Hq, c.dv);  // NaN rows when !withOutput
        sq.tokens = n;
    }

    void reset(uint32_t s) {
        ASSERT_EQ(pskResetDecodeSequence(state, s), PSK_SUCCESS);
        seqs[s] = Sequence{};
    }

    /** Random inputs of one step: q, k, v. */
    std::vector<std::vector<float>> stepInputs() {
        const Config& c = a.c;
        const uint32_t B = uint32_t(seqs.size());
        return {psk::test::randomNormal(size_t(B) * c.Hq * c.h, ++rng), psk::test::randomNormal(size_t(B) * c.Hkv * c.h, ++rng),
                psk::test::randomNormal(size_t(B) * c.Hkv * c.dv, ++rng)};
    }

    /** One step of every sequence; returns the output [B][Hq][dv]. */
    std::vector<float> step() {
        const std::vector<std::vector<float>> in = stepInputs();
        return step(in[0], in[1], in[2]);
    }
    std::vector<float> step(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
        const Config& c = a.c;
        const uint32_t B = uint32_t(seqs.size());
        std::vector<float> out(size_t(B) * c.Hq * c.dv, NAN);
        PskDecodeStepInfo info{};
        setHostArrays(info, q, k, v, &out);
        EXPECT_EQ(pskDecodeStepHost(state, &info), PSK_SUCCESS);
        for (uint32_t s = 0; s < B; ++s) {
            Sequence& sq = seqs[s];
            auto append = [&](std::vector<float>& dst, const std::vector<float>& src, size_t per) {
                dst.insert(dst.end(), src.begin() + s * per, src.begin() + (s + 1) * per);
            };
            append(sq.q, q, size_t(c.Hq) * c.h);
            append(sq.k, k, size_t(c.Hkv) * c.h);
            append(sq.v, v, size_t(c.Hkv) * c.dv);
            append(sq.out, out, size_t(c.Hq) * c.dv);
            ++sq.tokens;
        }
        return out;
    }

    /** Sequence s's rows from the library's forward over the tokens it consumed (token-major). */
    std::vector<double> forwardRows(size_t s) const {
        const Config& c = a.c;
        const Sequence& sq = seqs[s];
        const uint32_t n = sq.tokens;
        const std::vector<float> q = toBhnd(sq.q, n, c.Hq, c.h), k = toBhnd(sq.k, n, c.Hkv, c.h), v = toBhnd(sq.v, n, c.Hkv, c.dv);
        std::vector<float> out(size_t(n) * c.Hq * c.dv, NAN);
        PskForwardHostInfo f{};
        f.seqLen = n;
        setHostArrays(f, q, k, v, &out);
        EXPECT_EQ(pskAttentionForwardHost(a.handle, &f), PSK_SUCCESS);
        const std::vector<float> forward = fromBhnd(out, n, c.Hq, c.dv);
        return std::vector<double>(forward.begin(), forward.end());
    }

    /** Sequence s's rows from the float64 reference over the tokens it consumed (token-major). */
    std::vector<double> referenceRows(size_t s) const {
        const Config& c = a.c;
        const Sequence& sq = seqs[s];
        const uint32_t n = sq.tokens;
        const std::vector<float> q = toBhnd(sq.q, n, c.Hq, c.h), k = toBhnd(sq.k, n, c.Hkv, c.h), v = toBhnd(sq.v, n, c.Hkv, c.dv);
        psk::ref::Shape shape;
        shape.Hq = int(c.Hq);
        shape.Hkv = int(c.Hkv);
        shape.n = int(n);
        shape.h = int(c.h);
        shape.dv = int(c.dv);
        std::vector<double> want;
        const std::vector<double> q64(q.begin(), q.end()), k64(k.begin(), k.end()), v64(v.begin(), v.end());
        if (c.kind == PSK_ATTENTION_KIND_SOFTMAX)
            psk::ref::softmaxAttention(shape, q64, k64, v64, 1.0 / std::sqrt(double(c.h)), true, want);
        else
            psk::ref::polysketchAttention(shape, q64, k64, v64, a.ref, want);
        std::vector<double> want64(want.size());  // BHND -> token-major, exact doubles
        for (uint32_t tk = 0; tk < n; ++tk)
            for (uint32_t hd = 0; hd < c.Hq; ++hd)
                for (uint32_t e = 0; e < c.dv; ++e)
                    want64[(size_t(tk) * c.Hq + hd) * c.dv + e] = want[(size_t(hd) * n + tk) * c.dv + e];
        return want64;
    }

    /** Checks sequence s's rows against the library forward and the float64 reference `want` (as
     *  referenceRows gives it), and prints both errors under `label`. */
    void checkSequence(size_t s, const std::vector<double>& want, const std::string& label) const {
        const Sequence& sq = seqs[s];
        const double eForward = relativeMaxError(sq.out, forwardRows(s));
        EXPECT_LE(eForward, psk::conformance::kDecodeVsForward) << "sequence " << s << " of " << sq.tokens << " tokens vs the library forward";
        const double eRef = relativeMaxError(sq.out, want);
        EXPECT_LE(eRef, psk::conformance::kPolysketchFloat32) << "sequence " << s << " of " << sq.tokens << " tokens vs the float64 reference";
        const std::string name = label + "_seq" + std::to_string(s) + "_n" + std::to_string(sq.tokens);
        psk::conformance::printError("decode-fwd", a.c.type, "-", name, eForward, psk::conformance::kDecodeVsForward);
        psk::conformance::printError("decode-ref", a.c.type, "-", name, eRef, psk::conformance::kPolysketchFloat32);
    }

    /** Checks every row of every sequence against the library forward and the float64 reference. */
    void check() const {
        const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
        const std::string label = std::string(test->test_suite_name()) + "." + test->name();
        for (size_t s = 0; s < seqs.size(); ++s)
            if (seqs[s].tokens) checkSequence(s, referenceRows(s), label);
    }
};

// ---- polysketch: decoded rows equal the forward's ----

/** The test's configuration of a conformance decode case, seeded with caseSeed of its name (the
 *  sketch from the seed, the learned sketch from seed + 4, the tokens from seed + 1001 on: as
 *  psk conformance runs it). */
Config configOf(const psk::conformance::DecodeCase& dc) {
    Config c;
    c.kind = dc.kind;
    c.learned = dc.learned;
    c.localExact = dc.localExact;
    c.degree = dc.degree;
    c.r = dc.r;
    c.b = dc.b;
    c.h = dc.h;
    c.dv = dc.dv;
    c.Hq = dc.Hq;
    c.Hkv = dc.Hkv;
    c.seed = psk::conformance::caseSeed(psk::conformance::name(dc));
    return c;
}

class DecodeMatchesForward : public ContextTest, public ::testing::WithParamInterface<psk::conformance::DecodeCase> {};

TEST_P(DecodeMatchesForward, PromptThenStepsAcrossBlocks) {
    const psk::conformance::DecodeCase& dc = GetParam();
    ASSERT_EQ(dc.prompts, (std::vector<uint32_t>{21, 32}));
    ASSERT_EQ(dc.steps, 37u);
    const auto a = makeAttention(ctx, configOf(dc));
    ASSERT_TRUE(a);
    Driver d(*a, 2);
    ASSERT_TRUE(d.state);
    d.rng = a->c.seed + 1000;
    d.prefill(0, 21);  // one block and a part (b = 16)
    d.prefill(1, 32);  // exactly two blocks
    for (int t = 0; t < 37; ++t) d.step();  // 58 and 69 tokens: three more block boundaries each
    uint64_t pos0 = 0, pos1 = 0;
    EXPECT_EQ(pskGetDecodePosition(d.state, 0, &pos0), PSK_SUCCESS);
    EXPECT_EQ(pskGetDecodePosition(d.state, 1, &pos1), PSK_SUCCESS);
    EXPECT_EQ(pos0, 58u);
    EXPECT_EQ(pos1, 69u);
    d.check();
    // A reset sequence starts over from scratch while the other continues.
    d.reset(1);
    for (int t = 0; t < 20; ++t) d.step();
    d.check();
}

std::vector<psk::conformance::DecodeCase> polysketchDecodeCases() {
    std::vector<psk::conformance::DecodeCase> cases;
    for (const psk::conformance::DecodeCase& c : psk::conformance::decodeSweep())
        if (c.kind == PSK_ATTENTION_KIND_POLYSKETCH) cases.push_back(c);
    return cases;
}

std::string configName(const ::testing::TestParamInfo<psk::conformance::DecodeCase>& info) {
    const psk::conformance::DecodeCase& c = info.param;
    return std::string(c.learned ? "learned" : "random") + "_p" + std::to_string(c.degree) + (c.localExact ? "_localexact" : "_sketched") +
           (c.dv != 16 ? "_dv" + std::to_string(c.dv) : "");
}

// decodeSweep's polysketch configurations: random and learned sketches, sketched and local exact,
// p = 4 and 8, dv = 13 (not a multiple of 4: the step's scalar column path).
INSTANTIATE_TEST_SUITE_P(Polysketch, DecodeMatchesForward, ::testing::ValuesIn(polysketchDecodeCases()), configName);

// ---- many blocks at the default block size ----

struct LongDecodeCase {
    const char* name;
    uint32_t h, dv, r;
    bool localExact;
};

std::string attentionPlan(PskAttention attn) {
    size_t size = 0;
    if (pskGetAttentionPlan(attn, nullptr, &size) != PSK_SUCCESS) return {};
    std::string plan(size, '\0');
    if (pskGetAttentionPlan(attn, plan.data(), &size) != PSK_SUCCESS) return {};
    return plan;
}

class LongDecode : public ContextTest, public ::testing::WithParamInterface<LongDecodeCase> {};

// A prompt of 33 blocks less 5 rows at b = 256 (8443 tokens), then 12 steps across the 33rd block
// boundary, two query heads on one key/value head: every row against the float64 reference
// (computed once) and against the library's forward, on each kernel path that runs kernels of
// its own for the shape (the prompt's forward and the forward of the check take the path's
// kernels). The decode sweep above stops at b = 16, h = 16 and 69 tokens.
TEST_P(LongDecode, PromptOfManyBlocksThenStepsOnEveryPath) {
    const LongDecodeCase& lc = GetParam();
    Config c;
    c.localExact = lc.localExact;
    c.r = lc.r;
    c.b = 256;
    c.h = lc.h;
    c.dv = lc.dv;
    c.Hq = 2;
    c.Hkv = 1;
    c.seed = psk::conformance::caseSeed(std::string("decode_long_") + lc.name);
    const uint32_t prompt = 33 * 256 - 5, steps = 12;
    std::vector<double> want;  // every path consumes the same tokens
    for (psk::test::KernelPath path : {psk::test::KernelPath::Default, psk::test::KernelPath::Generic}) {
        SCOPED_TRACE(psk::test::kernelPathName(path));
        const psk::test::KernelPathScope scope(path);
        const auto a = makeAttention(ctx, c);
        ASSERT_TRUE(a);
        const std::string plan = attentionPlan(a->handle);
        const bool team = plan.find(" (team)") != std::string::npos;
        if (path == psk::test::KernelPath::Default && !team) continue;  // no lane-team kernel takes the shape: generic below
        EXPECT_EQ(team, path == psk::test::KernelPath::Default) << plan;
        Driver d(*a, 1);
        ASSERT_TRUE(d.state);
        d.rng = c.seed + 1000;
        d.prefill(0, prompt);
        for (uint32_t t = 0; t < steps; ++t) d.step();
        uint64_t position = 0;
        EXPECT_EQ(pskGetDecodePosition(d.state, 0, &position), PSK_SUCCESS);
        EXPECT_EQ(position, uint64_t(prompt + steps));
        if (want.empty()) want = d.referenceRows(0);
        d.checkSequence(0, want, std::string("decode_long_") + lc.name + "@" + psk::test::kernelPathName(path));
    }
}

INSTANTIATE_TEST_SUITE_P(Polysketch, LongDecode,
                         ::testing::Values(LongDecodeCase{"p4_r32_b256_localexact_h128_dv128", 128, 128, 32, true},
                                           LongDecodeCase{"p4_r16_b256_sketched_h256_dv256", 256, 256, 16, false}),
                         [](const ::testing::TestParamInfo<LongDecodeCase>& info) { return std::string(info.param.name); });

// ---- constant memory ----

TEST_F(ContextTest, StateSizeDoesNotGrowWithPosition) {
    Config c;
    c.localExact = true;
    c.b = 256;
    c.Hq = c.Hkv = 1;
    const auto a = makeAttention(ctx, c);
    ASSERT_TRUE(a);
    Driver d(*a, 1);
    d.prefill(0, 10);
    uint64_t bytes10 = 0, bytesLong = 0;
    size_t blob10 = 0, blobLong = 0;
    ASSERT_EQ(pskGetDecodeStateSize(d.state, &bytes10), PSK_SUCCESS);
    ASSERT_EQ(pskSerializeDecodeState(d.state, nullptr, &blob10), PSK_SUCCESS);
    auto stepScratch = [&] {
        const auto in = d.stepInputs();
        std::vector<float> out(size_t(c.Hq) * c.dv);
        PskForwardStats stats{};
        PskDecodeStepInfo si{in[0].data(), in[1].data(), in[2].data(), out.data(), in[0].size() * 4, in[1].size() * 4,
                             in[2].size() * 4, out.size() * 4, &stats};
        EXPECT_EQ(pskDecodeStepHost(d.state, &si), PSK_SUCCESS);
        return stats.workspaceBytes;
    };
    const uint64_t scratch10 = stepScratch();
    EXPECT_GT(scratch10, 0u);
    d.prefill(0, 100000);
    EXPECT_EQ(stepScratch(), scratch10) << "the step's scratch grew with the position";
    uint64_t pos = 0;
    ASSERT_EQ(pskGetDecodePosition(d.state, 0, &pos), PSK_SUCCESS);
    EXPECT_EQ(pos, 100001u);
    ASSERT_EQ(pskGetDecodeStateSize(d.state, &bytesLong), PSK_SUCCESS);
    ASSERT_EQ(pskSerializeDecodeState(d.state, nullptr, &blobLong), PSK_SUCCESS);
    EXPECT_EQ(bytes10, bytesLong);
    EXPECT_EQ(blob10, blobLong);
    // F (dv + 1) floats of z, as many of the block's running sum, b (h + dv) floats of block rows,
    // one position.
    const uint64_t F = c.r * (c.r + 1) / 2;
    EXPECT_EQ(bytes10, 2 * F * (c.dv + 1) * 4 + uint64_t(c.b) * (c.h + c.dv) * 4 + 8);
    std::printf("[ decode ] state bytes at position 10: %llu, at position 100001: %llu\n", (unsigned long long)bytes10,
                (unsigned long long)bytesLong);
}

// ---- save, restore elsewhere, continue ----

std::vector<uint8_t> serialize(PskDecodeState state) {
    size_t size = 0;
    EXPECT_EQ(pskSerializeDecodeState(state, nullptr, &size), PSK_SUCCESS);
    std::vector<uint8_t> blob(size);
    EXPECT_EQ(pskSerializeDecodeState(state, blob.data(), &size), PSK_SUCCESS);
    EXPECT_EQ(size, blob.size());
    return blob;
}

void saveRestoreContinue(PskContext ctx, const Config& c, uint32_t capacity) {
    const auto a = makeAttention(ctx, c);
    ASSERT_TRUE(a);
    Driver d(*a, 2, capacity);
    d.prefill(0, 19);
    d.prefill(1, 5);
    for (int t = 0; t < 6; ++t) d.step();
    const std::vector<uint8_t> blob = serialize(d.state);

    PskContextCreateInfo ci{};
    ci.messageCallback = &psk::test::MessageLog::callback;
    ci.messageUserData = &psk::test::sharedLog();
    PskContext other = nullptr;
    ASSERT_EQ(pskCreateContext(&ci, &other), PSK_SUCCESS);
    {
        const auto b = makeAttention(other, c);
        ASSERT_TRUE(b);
        Driver e(*b, 2, capacity);
        ASSERT_EQ(pskRestoreDecodeState(e.state, blob.data(), blob.size()), PSK_SUCCESS);
        EXPECT_EQ(serialize(e.state), blob);
        e.rng = d.rng;  // the same tokens from here on
        for (int t = 0; t < 20; ++t) {
            const std::vector<float> x = d.step(), y = e.step();
            ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0) << "step " << t << " after restoring differs";
        }
        d.check();
    }
    pskDestroyContext(other);
}

TEST_F(ContextTest, SaveRestoreOnAnotherContextPolysketch) {
    Config c;
    c.localExact = true;
    saveRestoreContinue(ctx, c, 0);
}

TEST_F(ContextTest, SaveRestoreOnAnotherContextSoftmax) {
    Config c;
    c.kind = PSK_ATTENTION_KIND_SOFTMAX;
    saveRestoreContinue(ctx, c, 64);
}

TEST_F(ContextTest, RestoreRejectsMismatchedAndTruncatedBlobs) {
    Config c;
    c.localExact = true;
    const auto a = makeAttention(ctx, c);
    ASSERT_TRUE(a);
    Driver d(*a, 2);
    d.prefill(0, 7);
    d.step();
    const std::vector<uint8_t> blob = serialize(d.state);
    psk::test::MessageLog& log = psk::test::sharedLog();

    struct Case {
        const char* what;
        Config c;
        uint32_t B;
        std::vector<uint8_t> blob;
    };
    Config otherSeed = c, otherBlock = c, sketched = c, softmax = c;
    otherSeed.seed = 8;
    otherBlock.b = 32;
    sketched.localExact = false;
    softmax.kind = PSK_ATTENTION_KIND_SOFTMAX;
    softmax.localExact = false;
    std::vector<uint8_t> truncated(blob.begin(), blob.end() - 1), header(blob.begin(), blob.begin() + 40), longer = blob,
        badMagic = blob;
    longer.push_back(0);
    badMagic[0] = 'X';
    const Case cases[] = {{"truncated", c, 2, truncated},        {"header only", c, 2, header},
                          {"trailing byte", c, 2, longer},      {"bad magic", c, 2, badMagic},
                          {"other sketch seed", otherSeed, 2, blob}, {"other block size", otherBlock, 2, blob},
                          {"sketched local", sketched, 2, blob}, {"other batch size", c, 3, blob},
                          {"softmax", softmax, 2, blob}};
    for (const Case& k : cases) {
        const auto b = makeAttention(ctx, k.c);
        ASSERT_TRUE(b);
        Driver e(*b, k.B, k.c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 16 : 0);
        e.prefill(0, 3);
        const std::vector<uint8_t> before = serialize(e.state);
        log.clear();
        EXPECT_EQ(pskRestoreDecodeState(e.state, k.blob.data(), k.blob.size()), PSK_ERROR_BAD_FILE) << k.what;
        EXPECT_EQ(log.errors.size(), 1u) << k.what;
        if (!log.errors.empty()) std::printf("[ decode ] %s: %s\n", k.what, log.errors[0].c_str());
        EXPECT_EQ(serialize(e.state), before) << k.what << ": a rejected blob changed the state";
    }
    // A too-small output buffer for serialization.
    size_t small = blob.size() - 1;
    std::vector<uint8_t> out(small, 0xAB);
    log.clear();
    EXPECT_EQ(pskSerializeDecodeState(d.state, out.data(), &small), PSK_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(log.errors.size(), 1u);
    EXPECT_EQ(out, std::vector<uint8_t>(blob.size() - 1, 0xAB));
}

// ---- corrupt blobs: every field and the payload are checked (docs/DECODING.md, "Serialization") ----

// Byte offsets of the blob's header fields and the version-3 trailer.
constexpr size_t kBlobVersionAt = 8, kBlobCapacityAt = 68, kBlobPositionsAt = 72, kBlobChecksumBytes = 8;

uint32_t get32(const std::vector<uint8_t>& b, size_t at) {
    uint32_t x = 0;
    for (int i = 0; i < 4; ++i) x |= uint32_t(b[at + i]) << (8 * i);
    return x;
}
void put32(std::vector<uint8_t>& b, size_t at, uint32_t x) {
    for (int i = 0; i < 4; ++i) b[at + i] = uint8_t(x >> (8 * i));
}
void put64(std::vector<uint8_t>& b, size_t at, uint64_t x) {
    for (int i = 0; i < 8; ++i) b[at + i] = uint8_t(x >> (8 * i));
}
void putFloat(std::vector<uint8_t>& b, size_t at, float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    put32(b, at, bits);
}
/** One past the last data byte: before the checksum trailer from version 3 on. */
size_t blobDataEnd(const std::vector<uint8_t>& b) { return b.size() - (get32(b, kBlobVersionAt) >= 3 ? kBlobChecksumBytes : 0); }
/** Recomputes a version-3 blob's checksum after an edit, so that only the edited field is wrong. */
void reseal(std::vector<uint8_t>& b) {
    if (get32(b, kBlobVersionAt) >= 3) put64(b, b.size() - kBlobChecksumBytes, psk::decodeBlobChecksum(b.data(), b.size() - kBlobChecksumBytes));
}

TEST(DecodeBlob, ChecksumIsXxh64) {
    // Published XXH64 vectors (seed 0): the empty input, the tail paths (1 and 3 bytes) and the
    // 32-byte stripes (39 and 43 bytes).
    auto h = [](const char* s) { return psk::decodeBlobChecksum(reinterpret_cast<const uint8_t*>(s), std::strlen(s)); };
    EXPECT_EQ(h(""), 0xEF46DB3751D8E999ull);
    EXPECT_EQ(h("a"), 0xD24EC4F1A98C6E5Bull);
    EXPECT_EQ(h("abc"), 0x44BC2CF5AD770999ull);
    EXPECT_EQ(h("Nobody inspects the spammish repetition"), 0xFBCEA83C8A378BF1ull);
    EXPECT_EQ(h("The quick brown fox jumps over the lazy dog"), 0x0B242D361FDA71BCull);
}

TEST_F(ContextTest, RestoreRejectsCorruptFieldsAndPayload) {
    Config pc;
    pc.localExact = true;
    Config sc;
    sc.kind = PSK_ATTENTION_KIND_SOFTMAX;
    const auto pa = makeAttention(ctx, pc), sa = makeAttention(ctx, sc);
    ASSERT_TRUE(pa && sa);
    std::vector<uint8_t> polysketchBlob, softmaxBlob;
    {
        Driver d(*pa, 2);
        d.prefill(0, 7);
        d.step();
        polysketchBlob = serialize(d.state);
        Driver s(*sa, 2, 64);
        s.prefill(0, 19);
        s.prefill(1, 5);
        s.step();  // positions 20 and 6
        softmaxBlob = serialize(s.state);
    }
    const size_t data = kBlobPositionsAt + 2 * 8;  // B = 2
    const uint64_t two53 = uint64_t(1) << 53;
    struct Case {
        const char* what;
        bool softmax;
        std::function<void(std::vector<uint8_t>&)> edit;
        bool resealed;       // the checksum is recomputed: the field checks must catch it
        const char* needle;  // in the one error message
    };
    const Case cases[] = {
        {"polysketch capacity 5", false, [](auto& b) { put32(b, kBlobCapacityAt, 5); }, true, "capacity"},
        {"position 2^64 - 1", false, [](auto& b) { put64(b, kBlobPositionsAt, ~uint64_t(0)); }, true, "position"},
        {"position 2^53 + 1", false, [&](auto& b) { put64(b, kBlobPositionsAt + 8, two53 + 1); }, true, "position"},
        {"NaN in z", false, [&](auto& b) { putFloat(b, data, std::numeric_limits<float>::quiet_NaN()); }, true, "NaN"},
        {"infinity in the block rows", false, [](auto& b) { putFloat(b, blobDataEnd(b) - 4, -INFINITY); }, true, "NaN"},
        {"softmax capacity 0", true, [](auto& b) { put32(b, kBlobCapacityAt, 0); }, true, "capacity"},
        {"softmax capacity below a position", true, [](auto& b) { put32(b, kBlobCapacityAt, 10); }, true, "capacity"},
        {"softmax position beyond its capacity", true, [](auto& b) { put64(b, kBlobPositionsAt, 65); }, true, "capacity"},
        {"NaN in the V rows", true, [](auto& b) { putFloat(b, blobDataEnd(b) - 4, std::numeric_limits<float>::quiet_NaN()); }, true,
         "NaN"},
        {"a flipped data bit", false, [&](auto& b) { b[data + 5] ^= 0x10; }, false, "checksum"},
        {"a flipped position bit", true, [](auto& b) { b[kBlobPositionsAt] ^= 0x01; }, false, "checksum"},
    };
    psk::test::MessageLog& log = psk::test::sharedLog();
    for (const Case& k : cases) {
        std::vector<uint8_t> blob = k.softmax ? softmaxBlob : polysketchBlob;
        k.edit(blob);
        if (k.resealed) reseal(blob);
        Driver e(k.softmax ? *sa : *pa, 2, k.softmax ? 64 : 0);
        e.prefill(0, 3);
        const std::vector<uint8_t> before = serialize(e.state);
        log.clear();
        EXPECT_EQ(pskRestoreDecodeState(e.state, blob.data(), blob.size()), PSK_ERROR_BAD_FILE) << k.what;
        EXPECT_EQ(log.errors.size(), 1u) << k.what;
        if (log.errors.empty()) continue;
        EXPECT_NE(log.errors[0].find(k.needle), std::string::npos) << k.what << ": " << log.errors[0];
        std::printf("[ decode ] %s: %s\n", k.what, log.errors[0].c_str());
        EXPECT_EQ(serialize(e.state), before) << k.what << ": a rejected blob changed the state";
    }
}

TEST_F(ContextTest, PolysketchPositionLimit) {
    // Positions up to 2^53 restore; a step at 2^53 fails (TOO_LARGE) and consumes nothing, so that
    // a state never holds a position its own blob could not restore.
    Config c;
    c.localExact = true;
    const auto a = makeAttention(ctx, c);
    ASSERT_TRUE(a);
    Driver d(*a, 2);
    d.prefill(0, 7);
    std::vector<uint8_t> blob = serialize(d.state);
    const uint64_t limit = uint64_t(1) << 53;
    put64(blob, kBlobPositionsAt, limit);
    put64(blob, kBlobPositionsAt + 8, limit - 1);
    reseal(blob);
    ASSERT_EQ(pskRestoreDecodeState(d.state, blob.data(), blob.size()), PSK_SUCCESS);
    uint64_t pos = 0;
    ASSERT_EQ(pskGetDecodePosition(d.state, 0, &pos), PSK_SUCCESS);
    EXPECT_EQ(pos, limit);
    psk::test::MessageLog& log = psk::test::sharedLog();
    log.clear();
    const auto in = d.stepInputs();
    std::vector<float> out(size_t(2) * c.Hq * c.dv, 3.0f);
    PskDecodeStepInfo si{in[0].data(), in[1].data(), in[2].data(), out.data(), in[0].size() * 4, in[1].size() * 4,
                         in[2].size() * 4, out.size() * 4, nullptr};
    EXPECT_EQ(pskDecodeStepHost(d.state, &si), PSK_ERROR_TOO_LARGE);
    EXPECT_EQ(log.errors.size(), 1u);
    EXPECT_EQ(serialize(d.state), blob) << "a refused step changed the state";
    // After a reset the sequence decodes again.
    ASSERT_EQ(pskResetDecodeSequence(d.state, 0), PSK_SUCCESS);
    EXPECT_EQ(pskDecodeStepHost(d.state, &si), PSK_SUCCESS);
    ASSERT_EQ(pskGetDecodePosition(d.state, 1, &pos), PSK_SUCCESS);
    EXPECT_EQ(pos, limit);
    log.clear();
}

TEST_F(ContextTest, RestoresVersion2Blobs) {
    // Version 2 (no checksum) still restores, with every field and the payload checked.
    for (int which : {1, 2}) {  // polysketch local exact, softmax (kindConfig's numbering)
        Config c;
        c.localExact = which == 1;
        if (which == 2) c.kind = PSK_ATTENTION_KIND_SOFTMAX;
        SCOPED_TRACE(which == 1 ? "polysketch" : "softmax");
        const auto a = makeAttention(ctx, c);
        ASSERT_TRUE(a);
        const uint32_t capacity = which == 2 ? 64 : 0;
        Driver d(*a, 2, capacity);
        d.prefill(0, 9);
        d.step();
        const std::vector<uint8_t> blob = serialize(d.state);
        std::vector<uint8_t> v2 = blob;
        if (get32(v2, kBlobVersionAt) >= 3) {
            v2.resize(v2.size() - kBlobChecksumBytes);
            put32(v2, kBlobVersionAt, 2);
        }
        Driver e(*a, 2, capacity);
        ASSERT_EQ(pskRestoreDecodeState(e.state, v2.data(), v2.size()), PSK_SUCCESS);
        EXPECT_EQ(serialize(e.state), blob) << "restored from version 2, serialized as the current version";
        std::vector<uint8_t> bad = v2;
        putFloat(bad, bad.size() - 4, std::numeric_limits<float>::quiet_NaN());
        EXPECT_EQ(pskRestoreDecodeState(e.state, bad.data(), bad.size()), PSK_ERROR_BAD_FILE);
        psk::test::sharedLog().clear();
    }
}

// ---- softmax KV cache ----

TEST_F(ContextTest, SoftmaxKvCacheStepMatchesForward) {
    Config c;
    c.kind = PSK_ATTENTION_KIND_SOFTMAX;
    const auto a = makeAttention(ctx, c);
    ASSERT_TRUE(a);
    Driver d(*a, 2, 1100);
    d.prefill(0, 17);
    d.prefill(1, 1020);  // crosses the 1024-key chunk of the split step
    for (int t = 0; t < 8; ++t) d.step();
    d.check();
    d.reset(0);
    for (int t = 0; t < 3; ++t) d.step();
    d.check();
}

// A cache larger than one storage-buffer binding (4 heads of 128k tokens on lavapipe) is bound and
// dispatched slot by slot; PSK_DECODE_SPLIT_CACHE=1 forces that path on a small cache.
TEST_F(ContextTest, SoftmaxKvCacheStepSlotBySlot) {
    Config c;
    c.kind = PSK_ATTENTION_KIND_SOFTMAX;
    const auto a = makeAttention(ctx, c);
    ASSERT_TRUE(a);
    setenv("PSK_DECODE_SPLIT_CACHE", "1", 1);
    Driver split(*a, 2, 1100);
    unsetenv("PSK_DECODE_SPLIT_CACHE");
    Driver whole(*a, 2, 1100);
    for (Driver* d : {&split, &whole}) {
        d->prefill(0, 17);
        d->prefill(1, 1030);  // two 1024-key chunks
    }
    for (int t = 0; t < 4; ++t) {
        const auto in = whole.stepInputs();
        EXPECT_EQ(split.step(in[0], in[1], in[2]), whole.step(in[0], in[1], in[2])) << "step " << t;
    }
    EXPECT_EQ(serialize(split.state), serialize(whole.state));
    split.check();
}

// ---- misuse ----

TEST_F(ContextTest, DecodeMisuse) {
    psk::test::MessageLog& log = psk::test::sharedLog();
    auto expectError = [&](PskResult got, PskResult want, const char* what) {
        EXPECT_EQ(got, want) << what;
        EXPECT_EQ(log.errors.size(), 1u) << what;
        log.clear();
    };
    PskDecodeStateCreateInfo info{};
    PskDecodeState state = nullptr;
    {
        Config c;
        c.kind = PSK_ATTENTION_KIND_POLYNOMIAL;
        const auto a = makeAttention(ctx, c);
        ASSERT_TRUE(a);
        log.clear();
        expectError(pskCreateDecodeState(a->handle, &info, &state), PSK_ERROR_UNSUPPORTED, "polynomial");
    }
    {
        PskAttentionCreateInfo ai{};
        ai.kind = PSK_ATTENTION_KIND_POLYSKETCH;
        ai.headDim = 16;
        ai.sketchSize = 8;
        PskAttention full = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &ai, &full), PSK_SUCCESS);
        log.clear();
        expectError(pskCreateDecodeState(full, &info, &state), PSK_ERROR_UNSUPPORTED, "non-causal");
        pskDestroyAttention(full);
    }
    Config c;
    const auto a = makeAttention(ctx, c);
    ASSERT_TRUE(a);
    log.clear();
    info.capacity = 5;
    expectError(pskCreateDecodeState(a->handle, &info, &state), PSK_ERROR_INVALID_ARGUMENT, "polysketch with a capacity");
    expectError(pskCreateDecodeState(a->handle, nullptr, &state), PSK_ERROR_INVALID_ARGUMENT, "NULL createInfo");
    EXPECT_EQ(state, nullptr);
    {
        Config s;
        s.kind = PSK_ATTENTION_KIND_SOFTMAX;
        const auto sa = makeAttention(ctx, s);
        ASSERT_TRUE(sa);
        log.clear();
        info.capacity = 0;
        expectError(pskCreateDecodeState(sa->handle, &info, &state), PSK_ERROR_INVALID_ARGUMENT, "softmax without capacity");
        Driver full(*sa, 1, 4);
        full.prefill(0, 4);
        log.clear();
        std::vector<float> q(c.Hq * c.h, 0.5f), k(c.Hkv * c.h), v(c.Hkv * c.dv), out(c.Hq * c.dv, 3.0f);
        PskDecodeStepInfo si{q.data(), k.data(), v.data(), out.data(), q.size() * 4, k.size() * 4, v.size() * 4, out.size() * 4, nullptr};
        expectError(pskDecodeStepHost(full.state, &si), PSK_ERROR_BUFFER_TOO_SMALL, "full KV cache");
        PskDecodePrefillInfo pi{};
        pi.seqLen = 5;
        pi.q = q.data();
        pi.k = k.data();
        pi.v = v.data();
        pi.out = out.data();
        expectError(pskDecodePrefillHost(full.state, &pi), PSK_ERROR_BUFFER_TOO_SMALL, "prompt longer than the capacity");
    }

    Driver d(*a, 2);
    d.prefill(0, 3);
    log.clear();
    std::vector<float> q(2 * c.Hq * c.h, 0.5f), k(2 * c.Hkv * c.h, 0.5f), v(2 * c.Hkv * c.dv, 0.5f), out(2 * c.Hq * c.dv, 3.0f);
    const std::vector<float> untouched = out;
    PskDecodeStepInfo si{q.data(), k.data(), v.data(), out.data(), q.size() * 4, k.size() * 4, v.size() * 4, out.size() * 4, nullptr};
    PskDecodeStepInfo bad = si;
    bad.q = nullptr;
    expectError(pskDecodeStepHost(d.state, &bad), PSK_ERROR_INVALID_ARGUMENT, "NULL q");
    bad = si;
    bad.vBytes -= 4;
    expectError(pskDecodeStepHost(d.state, &bad), PSK_ERROR_BUFFER_TOO_SMALL, "short v");
    bad = si;
    bad.outBytes = 0;
    expectError(pskDecodeStepHost(d.state, &bad), PSK_ERROR_BUFFER_TOO_SMALL, "short out");
    k[3] = std::numeric_limits<float>::quiet_NaN();
    expectError(pskDecodeStepHost(d.state, &si), PSK_ERROR_NON_FINITE_INPUT, "NaN in k");
    k[3] = 0.5f;
    expectError(pskDecodeStepHost(d.state, nullptr), PSK_ERROR_INVALID_ARGUMENT, "NULL info");
    EXPECT_EQ(pskDecodeStepHost(nullptr, &si), PSK_ERROR_INVALID_ARGUMENT);  // no context to report through
    log.clear();
    EXPECT_EQ(out, untouched);
    uint64_t pos = 0;
    EXPECT_EQ(pskGetDecodePosition(d.state, 0, &pos), PSK_SUCCESS);
    EXPECT_EQ(pos, 3u) << "a failed step consumed a token";
    expectError(pskGetDecodePosition(d.state, 2, &pos), PSK_ERROR_INVALID_ARGUMENT, "position of sequence 2 of 2");
    expectError(pskResetDecodeSequence(d.state, 2), PSK_ERROR_INVALID_ARGUMENT, "reset sequence 2 of 2");
    PskDecodePrefillInfo pi{};
    pi.firstSequence = 1;
    pi.batchSize = 2;
    pi.seqLen = 1;
    setHostArrays(pi, q, k, v, &out);
    expectError(pskDecodePrefillHost(d.state, &pi), PSK_ERROR_INVALID_ARGUMENT, "prefill past the batch");
    pi.firstSequence = 0;
    pi.seqLen = 0;
    expectError(pskDecodePrefillHost(d.state, &pi), PSK_ERROR_INVALID_SHAPE, "empty prompt");
    EXPECT_EQ(out, untouched);
    expectError(pskGetDecodeStateSize(d.state, nullptr), PSK_ERROR_INVALID_ARGUMENT, "NULL pBytes");
    expectError(pskSerializeDecodeState(d.state, nullptr, nullptr), PSK_ERROR_INVALID_ARGUMENT, "NULL pSize");
    expectError(pskRestoreDecodeState(d.state, nullptr, 10), PSK_ERROR_INVALID_ARGUMENT, "NULL data");
}

// ---- prefill without output rows ----

Config kindConfig(int which) {
    Config c;  // 0: polysketch sketched local, 1: polysketch local exact, 2: softmax
    c.localExact = which == 1;
    if (which == 2) c.kind = PSK_ATTENTION_KIND_SOFTMAX;
    return c;
}
const char* const kKindNames[3] = {"polysketch sketched", "polysketch local exact", "softmax"};

TEST_F(ContextTest, PrefillWithoutOutputGivesTheSameState) {
    for (int which = 0; which < 3; ++which) {
        SCOPED_TRACE(kKindNames[which]);
        const Config c = kindConfig(which);
        const auto a = makeAttention(ctx, c);
        ASSERT_TRUE(a);
        const uint32_t capacity = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 64 : 0;
        Driver x(*a, 2, capacity), y(*a, 2, capacity);
        x.prefill(0, 21);
        x.prefill(1, 32);
        y.prefill(0, 21, false);  // same prompts (same generator), out = NULL
        y.prefill(1, 32, false);
        EXPECT_EQ(serialize(x.state), serialize(y.state));
        for (int t = 0; t < 20; ++t) {  // across block boundaries (b = 16)
            const auto in = x.stepInputs();
            EXPECT_EQ(x.step(in[0], in[1], in[2]), y.step(in[0], in[1], in[2])) << "step " << t;
        }
        x.check();
    }
}

// A state-only polysketch prefill too long for one forward call (64k tokens at b = 256, r = 32,
// dv = 64, 4 heads on lavapipe) runs the forward over chunks of whole blocks and adds their sums;
// PSK_DECODE_PREFILL_CHUNK forces chunks of 16 tokens here. The state then continues as the
// single-call prefill's does (same sums in another order: kDecodeVsForward).
TEST_F(ContextTest, ChunkedStateOnlyPrefillContinuesLikeOneCall) {
    for (int which = 0; which < 2; ++which) {
        SCOPED_TRACE(kKindNames[which]);
        const Config c = kindConfig(which);
        const auto a = makeAttention(ctx, c);
        ASSERT_TRUE(a);
        Driver x(*a, 2), y(*a, 2);
        x.prefill(0, 53);  // 3 blocks and 5 rows (b = 16)
        x.prefill(1, 48);  // exactly 3 blocks
        setenv("PSK_DECODE_PREFILL_CHUNK", "20", 1);  // rounded down to 16
        y.prefill(0, 53, false);
        y.prefill(1, 48, false);
        unsetenv("PSK_DECODE_PREFILL_CHUNK");
        for (int t = 0; t < 20; ++t) {
            const auto in = x.stepInputs();
            const std::vector<float> want = x.step(in[0], in[1], in[2]), got = y.step(in[0], in[1], in[2]);
            EXPECT_LE(relativeMaxError(got, std::vector<double>(want.begin(), want.end())), psk::conformance::kDecodeVsForward) << "step " << t;
        }
        x.check();
    }
}

TEST_F(ContextTest, SoftmaxPrefillWithoutOutputRunsNoForward) {
    Config c;
    c.kind = PSK_ATTENTION_KIND_SOFTMAX;
    c.Hq = c.Hkv = 1;
    const auto a = makeAttention(ctx, c);
    ASSERT_TRUE(a);
    const uint32_t n = 4096;
    Driver d(*a, 1, n + 1);
    psk::Allocator& allocator = ctx->allocator();
    const VkDeviceSize before = allocator.bytesInUse();
    const auto t0 = std::chrono::steady_clock::now();
    d.prefill(0, n, false);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The forward would have cached its q, k, v and out tensors in the attention (device memory).
    EXPECT_EQ(allocator.bytesInUse(), before) << "a state-only softmax prefill ran the forward";
    std::printf("[ decode ] softmax state-only prefill of %u tokens: %.3f s\n", n, seconds);
    // The cache holds the prompt: the next row equals the float64 softmax over all n + 1 keys.
    const auto in = d.stepInputs();
    const std::vector<float> out = d.step(in[0], in[1], in[2]);
    const Sequence& sq = d.seqs[0];
    const double scale = 1.0 / std::sqrt(double(c.h));
    std::vector<double> logits(n + 1), want(c.dv, 0.0);
    double top = -INFINITY, sum = 0;
    for (uint32_t j = 0; j <= n; ++j) {
        double dot = 0;
        for (uint32_t e = 0; e < c.h; ++e) dot += double(in[0][e]) * sq.k[size_t(j) * c.h + e];
        logits[j] = dot * scale;
        top = std::max(top, logits[j]);
    }
    for (uint32_t j = 0; j <= n; ++j) {
        const double w = std::exp(logits[j] - top);
        sum += w;
        for (uint32_t e = 0; e < c.dv; ++e) want[e] += w * sq.v[size_t(j) * c.dv + e];
    }
    for (double& w : want) w /= sum;
    const double error = relativeMaxError(out, want);
    EXPECT_LE(error, psk::conformance::kPolysketchFloat32);
    psk::conformance::printError("decode-ref", PSK_DATA_TYPE_FLOAT32, "-", "decode_softmax_state_only_prefill_n4096", error,
                                 psk::conformance::kPolysketchFloat32);
    // A prefill with output rows does run it (so the check above can fail).
    d.prefill(0, 64, true);
    EXPECT_GT(allocator.bytesInUse(), before);
}

TEST_F(ContextTest, PrefillWithoutOutputMisuse) {
    psk::test::MessageLog& log = psk::test::sharedLog();
    for (int which = 0; which < 3; ++which) {
        SCOPED_TRACE(kKindNames[which]);
        const Config c = kindConfig(which);
        const auto a = makeAttention(ctx, c);
        ASSERT_TRUE(a);
        Driver d(*a, 1, c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 64 : 0);
        d.prefill(0, 5);
        log.clear();
        const uint32_t n = 7;
        std::vector<float> q(n * c.Hq * c.h, 0.5f), k(n * c.Hkv * c.h, 0.5f), v(n * c.Hkv * c.dv, 0.5f);
        PskDecodePrefillInfo pi{};
        pi.seqLen = n;
        setHostArrays(pi, q, k, v, nullptr);
        auto expectError = [&](const PskDecodePrefillInfo& info, PskResult want, const char* what) {
            EXPECT_EQ(pskDecodePrefillHost(d.state, &info), want) << what;
            EXPECT_EQ(log.errors.size(), 1u) << what;
            log.clear();
            uint64_t pos = 0;
            EXPECT_EQ(pskGetDecodePosition(d.state, 0, &pos), PSK_SUCCESS);
            EXPECT_EQ(pos, 5u) << what << ": a failed prefill changed the state";
        };
        PskDecodePrefillInfo bad = pi;
        bad.q = nullptr;
        expectError(bad, PSK_ERROR_INVALID_ARGUMENT, "NULL q");
        bad = pi;
        bad.kBytes -= 4;
        expectError(bad, PSK_ERROR_BUFFER_TOO_SMALL, "short k");
        v[9] = std::numeric_limits<float>::infinity();
        expectError(pi, PSK_ERROR_NON_FINITE_INPUT, "infinity in v");
        v[9] = 0.5f;
        EXPECT_EQ(pskDecodePrefillHost(d.state, &pi), PSK_SUCCESS);
        uint64_t pos = 0;
        EXPECT_EQ(pskGetDecodePosition(d.state, 0, &pos), PSK_SUCCESS);
        EXPECT_EQ(pos, n);
    }
}

// ---- pskCmdDecodeStep: recording into the app's command buffer ----

/** The app's side on the context's own device: host-visible buffers, a command buffer, a fence. */
struct CmdRig {
    PskContext ctx;
    const psk::DeviceFunctions& vk;
    VkDevice device;
    VkDeviceSize align;
    VkCommandPool pool = VK_NULL_HANDLE;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;

    explicit CmdRig(PskContext c)
        : ctx(c), vk(c->vk()), device(c->device()),
          align(std::max<VkDeviceSize>(c->caps().limits().minStorageBufferOffsetAlignment, 4)) {
        VkCommandPoolCreateInfo poolInfo{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        poolInfo.queueFamilyIndex = ctx->queueFamily();
        EXPECT_EQ(vk.vkCreateCommandPool(device, &poolInfo, vk.callbacks, &pool), VK_SUCCESS);
        VkCommandBufferAllocateInfo cbInfo{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        cbInfo.commandPool = pool;
        cbInfo.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        cbInfo.commandBufferCount = 1;
        EXPECT_EQ(vk.vkAllocateCommandBuffers(device, &cbInfo, &cmd), VK_SUCCESS);
        VkFenceCreateInfo fenceInfo{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        EXPECT_EQ(vk.vkCreateFence(device, &fenceInfo, vk.callbacks, &fence), VK_SUCCESS);
    }
    ~CmdRig() {
        vk.vkDestroyFence(device, fence, vk.callbacks);
        vk.vkDestroyCommandPool(device, pool, vk.callbacks);
    }
    psk::Buffer buffer(VkDeviceSize bytes, psk::MemoryUsage usage) {
        return psk::Buffer(ctx->allocator(), bytes,
                           VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, usage);
    }
    VkDeviceSize aligned(VkDeviceSize bytes) const { return (bytes + align - 1) / align * align; }
    /** oneTime false: a command buffer to be submitted again and again (replayed). */
    void begin(bool oneTime = true) {
        EXPECT_EQ(vk.vkResetCommandPool(device, pool, 0), VK_SUCCESS);
        VkCommandBufferBeginInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        info.flags = oneTime ? VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT : 0;
        EXPECT_EQ(vk.vkBeginCommandBuffer(cmd, &info), VK_SUCCESS);
    }
    /** Ends with a barrier to the host, submits, waits. */
    void submit() {
        end();
        resubmit();
    }
    /** Ends the command buffer (with the barrier to the host) without submitting it. */
    void end() {
        VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
        vk.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
        EXPECT_EQ(vk.vkEndCommandBuffer(cmd), VK_SUCCESS);
    }
    /** Submits the ended command buffer (again) and waits. */
    void resubmit() {
        EXPECT_EQ(vk.vkResetFences(device, 1, &fence), VK_SUCCESS);
        ctx->submitAndWait(cmd, fence);
    }
};

/** q, k, v, out of `steps` steps in the app's buffers, each step's tensors at aligned offsets. */
struct CmdTensors {
    VkDeviceSize bytes[4], stride[4];
    psk::Buffer buf[4];
    CmdTensors(CmdRig& rig, const Config& c, uint32_t B, uint32_t steps) {
        const uint64_t dims[4] = {uint64_t(B) * c.Hq * c.h, uint64_t(B) * c.Hkv * c.h, uint64_t(B) * c.Hkv * c.dv, uint64_t(B) * c.Hq * c.dv};
        for (int i = 0; i < 4; ++i) {
            bytes[i] = dims[i] * 4;
            stride[i] = rig.aligned(bytes[i]);
            // At a non-zero offset (one aligned stride in), to test offsets.
            buf[i] = rig.buffer(stride[i] * (steps + 1), i == 3 ? psk::MemoryUsage::HostReadback : psk::MemoryUsage::HostUpload);
            EXPECT_TRUE(buf[i].mapped());
        }
    }
    PskVulkanTensor tensor(int i, uint32_t step) const {
        PskVulkanTensor t{};
        t.buffer = buf[i].handle();
        t.offset = stride[i] * (step + 1);
        t.size = bytes[i];
        return t;
    }
    PskCmdDecodeStepInfo info(uint32_t step) const {
        PskCmdDecodeStepInfo s{};
        s.q = tensor(0, step);
        s.k = tensor(1, step);
        s.v = tensor(2, step);
        s.out = tensor(3, step);
        return s;
    }
    void write(uint32_t step, const std::vector<std::vector<float>>& in) {
        for (int i = 0; i < 3; ++i) std::memcpy(buf[i].mapped() + stride[i] * (step + 1), in[i].data(), bytes[i]);
    }
    std::vector<float> out(uint32_t step) const {
        std::vector<float> o(bytes[3] / 4);
        std::memcpy(o.data(), buf[3].mapped() + stride[3] * (step + 1), bytes[3]);
        return o;
    }
};

TEST_F(ContextTest, CmdStepMatchesHostStep) {
    for (int which = 0; which < 3; ++which) {
        SCOPED_TRACE(kKindNames[which]);
        const Config c = kindConfig(which);
        const auto a = makeAttention(ctx, c);
        ASSERT_TRUE(a);
        const uint32_t capacity = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 64 : 0;
        Driver host(*a, 2, capacity), app(*a, 2, capacity);
        host.prefill(0, 21);  // sequences at different positions, b = 16
        host.prefill(1, 32);
        app.prefill(0, 21, false);
        app.prefill(1, 32, false);
        CmdRig rig(ctx);
        const uint32_t single = 3, batched = 17;
        CmdTensors tensors(rig, c, 2, batched);
        // Steps submitted one by one.
        for (uint32_t t = 0; t < single; ++t) {
            const auto in = host.stepInputs();
            const std::vector<float> want = host.step(in[0], in[1], in[2]);
            tensors.write(0, in);
            rig.begin();
            const PskCmdDecodeStepInfo info = tensors.info(0);
            ASSERT_EQ(pskCmdDecodeStep(app.state, rig.cmd, &info), PSK_SUCCESS);
            rig.submit();
            EXPECT_EQ(tensors.out(0), want) << "step " << t;
        }
        // Several steps (two block boundaries) recorded into one command buffer, one submission.
        std::vector<std::vector<float>> wants;
        rig.begin();
        for (uint32_t t = 0; t < batched; ++t) {
            const auto in = host.stepInputs();
            wants.push_back(host.step(in[0], in[1], in[2]));
            tensors.write(t, in);
            const PskCmdDecodeStepInfo info = tensors.info(t);
            ASSERT_EQ(pskCmdDecodeStep(app.state, rig.cmd, &info), PSK_SUCCESS);
        }
        uint64_t pos = 0;
        EXPECT_EQ(pskGetDecodePosition(app.state, 1, &pos), PSK_SUCCESS);
        EXPECT_EQ(pos, 32u + single + batched) << "positions advance when a step is recorded";
        rig.submit();
        for (uint32_t t = 0; t < batched; ++t) EXPECT_EQ(tensors.out(t), wants[t]) << "recorded step " << t;
        EXPECT_EQ(serialize(host.state), serialize(app.state));
        EXPECT_EQ(pskResetDecodeCommandDescriptors(app.state), PSK_SUCCESS);
        host.check();
    }
}

// A state of replayable steps (PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT): one step recorded once,
// its command buffer submitted for every token (new q, k, v written into the same buffers between
// submissions), equals a state stepped by the host: polysketch bit for bit (its step never depended
// on the positions), softmax within float32 rounding (its recorded step is split over the whole
// cache, the host's over the keys there are). The positions advance on the device and are read
// back by the next call; a host step, a serialization and a reset after the replays see them.
// Softmax: replays past the capacity store nothing and the next call reports it, once.
TEST_F(ContextTest, ReplayedStepMatchesHostSteps) {
    for (int which = 0; which < 3; ++which) {
        SCOPED_TRACE(kKindNames[which]);
        const Config c = kindConfig(which);
        const auto a = makeAttention(ctx, c);
        ASSERT_TRUE(a);
        const bool softmax = c.kind == PSK_ATTENTION_KIND_SOFTMAX;
        const uint32_t capacity = softmax ? 64 : 0;
        {
            PskDecodeStateCreateInfo bad{};
            bad.capacity = capacity;
            bad.flags = 0x2;  // not a PskDecodeStateFlagBits
            PskDecodeState none = nullptr;
            EXPECT_EQ(pskCreateDecodeState(a->handle, &bad, &none), PSK_ERROR_INVALID_ARGUMENT);
            EXPECT_EQ(none, nullptr);
            psk::test::sharedLog().clear();
        }
        Driver host(*a, 2, capacity), app(*a, 2, capacity, PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT);
        host.prefill(0, 13);  // different positions; b = 16: the replays cross block boundaries
        host.prefill(1, 30);
        app.prefill(0, 13, false);
        app.prefill(1, 30, false);
        auto same = [&](const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
            if (softmax)
                EXPECT_LE(relativeMaxError(got, std::vector<double>(want.begin(), want.end())), 1e-5) << what;
            else
                EXPECT_EQ(got, want) << what;
        };
        CmdRig rig(ctx);
        CmdTensors tensors(rig, c, 2, 1);
        rig.begin(false);
        const PskCmdDecodeStepInfo info = tensors.info(0);
        ASSERT_EQ(pskCmdDecodeStep(app.state, rig.cmd, &info), PSK_SUCCESS);
        rig.end();
        const uint32_t replays = 20;
        for (uint32_t t = 0; t < replays; ++t) {
            const auto in = host.stepInputs();
            const std::vector<float> want = host.step(in[0], in[1], in[2]);
            tensors.write(0, in);
            rig.resubmit();
            same(tensors.out(0), want, "replay " + std::to_string(t));
        }
        // The positions, read back from the device; then the states agree, and a host step on
        // each continues them alike.
        uint64_t pos[2] = {0, 0};
        EXPECT_EQ(pskGetDecodePosition(app.state, 0, &pos[0]), PSK_SUCCESS);
        EXPECT_EQ(pskGetDecodePosition(app.state, 1, &pos[1]), PSK_SUCCESS);
        EXPECT_EQ(pos[0], 13u + replays);
        EXPECT_EQ(pos[1], 30u + replays);
        if (!softmax) EXPECT_EQ(serialize(host.state), serialize(app.state));
        const auto in = host.stepInputs();
        const std::vector<float> want = host.step(in[0], in[1], in[2]);
        std::vector<float> got(want.size(), NAN);
        PskDecodeStepInfo step{};
        setHostArrays(step, in[0], in[1], in[2], &got);
        EXPECT_EQ(pskDecodeStepHost(app.state, &step), PSK_SUCCESS);
        same(got, want, "host step after the replays");
        EXPECT_EQ(pskGetDecodePosition(app.state, 1, &pos[1]), PSK_SUCCESS);
        EXPECT_EQ(pos[1], 31u + replays);
        EXPECT_EQ(serialize(host.state).size(), serialize(app.state).size());
        host.check();
        if (!softmax) continue;
        // Sequence 1 is at 51 of 64: 13 more replays fill it, the 14th finds it full.
        for (uint32_t t = 0; t < 14; ++t) rig.resubmit();
        EXPECT_EQ(pskGetDecodePosition(app.state, 0, &pos[0]), PSK_ERROR_BUFFER_TOO_SMALL) << "reported once";
        EXPECT_NE(psk::test::sharedLog().errors.size(), 0u);
        psk::test::sharedLog().clear();
        EXPECT_EQ(pskGetDecodePosition(app.state, 1, &pos[1]), PSK_SUCCESS);
        EXPECT_EQ(pos[1], 64u) << "the positions stay at the capacity";
        EXPECT_EQ(pskGetDecodePosition(app.state, 0, &pos[0]), PSK_SUCCESS);
        EXPECT_EQ(pos[0], 13u + replays + 1 + 14);
        EXPECT_EQ(pskResetDecodeSequence(app.state, 1), PSK_SUCCESS);
        EXPECT_EQ(pskGetDecodePosition(app.state, 1, &pos[1]), PSK_SUCCESS);
        EXPECT_EQ(pos[1], 0u);
    }
}

TEST_F(ContextTest, CmdStepMisuse) {
    psk::test::MessageLog& log = psk::test::sharedLog();
    auto expectError = [&](PskResult got, PskResult want, const char* what, bool reported = true) {
        EXPECT_EQ(got, want) << what;
        EXPECT_EQ(log.errors.size(), reported ? 1u : 0u) << what;
        log.clear();
    };
    for (int which = 0; which < 3; which += 2) {
        SCOPED_TRACE(kKindNames[which]);
        const Config c = kindConfig(which);
        const auto a = makeAttention(ctx, c);
        ASSERT_TRUE(a);
        const bool softmax = c.kind == PSK_ATTENTION_KIND_SOFTMAX;
        Driver d(*a, 1, softmax ? 6 : 0);
        d.prefill(0, softmax ? 6 : 5);  // softmax: the cache is full
        log.clear();
        CmdRig rig(ctx);
        CmdTensors tensors(rig, c, 1, 1);
        std::memset(tensors.buf[3].mapped(), 0x7F, tensors.buf[3].size());
        const std::vector<uint8_t> sentinel(tensors.buf[3].mapped(), tensors.buf[3].mapped() + tensors.buf[3].size());
        rig.begin();
        const PskCmdDecodeStepInfo good = tensors.info(0);
        if (softmax) {
            expectError(pskCmdDecodeStep(d.state, rig.cmd, &good), PSK_ERROR_BUFFER_TOO_SMALL, "full KV cache");
        } else {
            expectError(pskCmdDecodeStep(nullptr, rig.cmd, &good), PSK_ERROR_INVALID_ARGUMENT, "NULL state", false);
            expectError(pskCmdDecodeStep(d.state, VK_NULL_HANDLE, &good), PSK_ERROR_INVALID_ARGUMENT, "NULL command buffer");
            expectError(pskCmdDecodeStep(d.state, rig.cmd, nullptr), PSK_ERROR_INVALID_ARGUMENT, "NULL info");
            PskCmdDecodeStepInfo bad = good;
            bad.v.buffer = VK_NULL_HANDLE;
            expectError(pskCmdDecodeStep(d.state, rig.cmd, &bad), PSK_ERROR_INVALID_ARGUMENT, "NULL v buffer");
            const PskTensorStrides strides{1, 1, 1};
            bad = good;
            bad.q.strides = &strides;
            expectError(pskCmdDecodeStep(d.state, rig.cmd, &bad), PSK_ERROR_INVALID_ARGUMENT, "strides");
            bad = good;
            bad.out.offset += 2;
            expectError(pskCmdDecodeStep(d.state, rig.cmd, &bad), PSK_ERROR_INVALID_ARGUMENT, "misaligned out offset");
            bad = good;
            bad.out.size -= 4;
            expectError(pskCmdDecodeStep(d.state, rig.cmd, &bad), PSK_ERROR_BUFFER_TOO_SMALL, "short out");
            bad = good;
            bad.k.size = 0;
            expectError(pskCmdDecodeStep(d.state, rig.cmd, &bad), PSK_ERROR_BUFFER_TOO_SMALL, "empty k");
            expectError(pskResetDecodeCommandDescriptors(nullptr), PSK_ERROR_INVALID_ARGUMENT, "reset NULL state", false);
        }
        rig.submit();  // whatever was recorded (nothing) runs
        EXPECT_TRUE(std::equal(sentinel.begin(), sentinel.end(), tensors.buf[3].mapped())) << "a failed call wrote out";
        uint64_t pos = 0;
        EXPECT_EQ(pskGetDecodePosition(d.state, 0, &pos), PSK_SUCCESS);
        EXPECT_EQ(pos, softmax ? 6u : 5u) << "a failed call consumed a token";
    }
}

}  // namespace

// ---- 16-bit attention objects (float16, bfloat16): q, k, v, out in the storage type, the state float32 ----

namespace {

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

struct Case16 {
    PskDataType type;
    int kind;  // kKindNames: polysketch, polysketch local exact, softmax
};

/** BHND 16-bit tensors of B sequences x N tokens, and slicing by token. */
struct Tokens16 {
    uint32_t B, H, N, d;
    std::vector<uint16_t> x;  // [B][H][N][d]
    Tokens16(uint32_t B_, uint32_t H_, uint32_t N_, uint32_t d_, uint64_t seed, PskDataType type)
        : B(B_), H(H_), N(N_), d(d_), x(encode16(psk::test::randomNormal(size_t(B_) * H_ * N_ * d_, seed), type)) {}
    /** Tokens [t0, t0 + n) as a dense BHND tensor of n tokens. */
    std::vector<uint16_t> slice(uint32_t t0, uint32_t n) const {
        std::vector<uint16_t> y(size_t(B) * H * n * d);
        for (uint32_t b = 0; b < B; ++b)
            for (uint32_t h = 0; h < H; ++h)
                std::memcpy(&y[((size_t(b) * H + h) * n) * d], &x[((size_t(b) * H + h) * N + t0) * d], size_t(n) * d * 2);
        return y;
    }
};

/** Writes the n-token BHND rows `rows` at tokens [t0, t0 + n) of the [B][H][N][d] float tensor `all`. */
void place(std::vector<float>& all, const std::vector<float>& rows, uint32_t B, uint32_t H, uint32_t N, uint32_t d, uint32_t t0,
           uint32_t n) {
    for (uint32_t b = 0; b < B; ++b)
        for (uint32_t h = 0; h < H; ++h)
            std::memcpy(&all[((size_t(b) * H + h) * N + t0) * d], &rows[((size_t(b) * H + h) * n) * d], size_t(n) * d * 4);
}

PskResult step16(PskDecodeState state, const std::vector<uint16_t>& q, const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
                 std::vector<uint16_t>& out) {
    PskDecodeStepInfo info{};
    setHostArrays(info, q, k, v, &out);
    return pskDecodeStepHost(state, &info);
}

/** A forward over n tokens (with `state`, continuing it; or none); out in the storage type. */
PskResult forward16(PskAttention a, PskDecodeState state, uint32_t B, uint32_t n, const std::vector<uint16_t>& q,
                    const std::vector<uint16_t>& k, const std::vector<uint16_t>& v, std::vector<uint16_t>& out) {
    PskForwardHostInfo f{};
    f.batchSize = B;
    f.seqLen = n;
    setHostArrays(f, q, k, v, &out);
    f.state = state;
    return pskAttentionForwardHost(a, &f);
}

class Decode16MatchesForward : public ContextTest, public ::testing::WithParamInterface<Case16> {};

// Prefill then steps, and chunked forwards with the state then steps, against one 16-bit forward
// over all the tokens (B = 2, GQA 4/2, b = 16: several block boundaries); then a 16-bit state's
// blob restores and continues bit for bit.
TEST_P(Decode16MatchesForward, PrefillStepsAndChunkedForwards) {
    const PskDataType type = GetParam().type;
    Config c = kindConfig(GetParam().kind);
    c.type = type;
    const std::string label = std::string("decode16_") + (c.kind == PSK_ATTENTION_KIND_SOFTMAX ? "softmax" : c.localExact ? "localexact" : "sketched") +
                              "_" + psk::conformance::storageName(type);
    c.seed = psk::conformance::caseSeed(label);
    const auto a = makeAttention(ctx, c);
    ASSERT_TRUE(a);
    const bool softmax = c.kind == PSK_ATTENTION_KIND_SOFTMAX;
    const uint32_t B = 2, N = 56, prompt = 21, capacity = softmax ? 64 : 0;
    const double threshold = psk::conformance::outputThreshold(type, 0.0);  // the 16-bit output thresholds
    const Tokens16 q(B, c.Hq, N, c.h, c.seed + 1, type), k(B, c.Hkv, N, c.h, c.seed + 2, type), v(B, c.Hkv, N, c.dv, c.seed + 3, type);

    std::vector<uint16_t> whole(size_t(B) * c.Hq * N * c.dv);
    ASSERT_EQ(forward16(a->handle, nullptr, B, N, q.x, k.x, v.x, whole), PSK_SUCCESS);
    const std::vector<float> want = decode16(whole, type);
    const std::vector<double> want64(want.begin(), want.end());

    auto makeState = [&]() {
        PskDecodeStateCreateInfo info{};
        info.batchSize = B;
        info.capacity = capacity;
        PskDecodeState s = nullptr;
        EXPECT_EQ(pskCreateDecodeState(a->handle, &info, &s), PSK_SUCCESS);
        return s;
    };
    // Steps t0 .. N - 1 into `rows`.
    auto steps = [&](PskDecodeState s, uint32_t t0, std::vector<float>& rows) {
        for (uint32_t t = t0; t < N; ++t) {
            std::vector<uint16_t> out(size_t(B) * c.Hq * c.dv, 0xFFFF);
            ASSERT_EQ(step16(s, q.slice(t, 1), k.slice(t, 1), v.slice(t, 1), out), PSK_SUCCESS) << "token " << t;
            place(rows, decode16(out, type), B, c.Hq, N, c.dv, t, 1);
        }
    };

    // 1. Prefill (with its output rows), then steps.
    PskDecodeState s1 = makeState();
    ASSERT_TRUE(s1);
    std::vector<float> rows1(want.size(), NAN);
    {
        const std::vector<uint16_t> pq = q.slice(0, prompt), pk = k.slice(0, prompt), pv = v.slice(0, prompt);
        std::vector<uint16_t> out(size_t(B) * c.Hq * prompt * c.dv);
        PskDecodePrefillInfo info{};
        info.batchSize = B;
        info.seqLen = prompt;
        setHostArrays(info, pq, pk, pv, &out);
        ASSERT_EQ(pskDecodePrefillHost(s1, &info), PSK_SUCCESS);
        place(rows1, decode16(out, type), B, c.Hq, N, c.dv, 0, prompt);
    }
    steps(s1, prompt, rows1);
    const double e1 = relativeMaxError(rows1, want64);
    EXPECT_LE(e1, threshold) << "prefill + steps vs the 16-bit forward";

    // 2. Forwards with the state in chunks (any lengths and positions; softmax past position 0: the
    // queries over the float32 cache, split keys), then steps.
    PskDecodeState s2 = makeState();
    ASSERT_TRUE(s2);
    std::vector<float> rows2(want.size(), NAN);
    const std::vector<uint32_t> chunks = {5, 16, 1, 11, 18};
    uint32_t t0 = 0;
    for (const uint32_t n : chunks) {
        std::vector<uint16_t> out(size_t(B) * c.Hq * n * c.dv);
        ASSERT_EQ(forward16(a->handle, s2, B, n, q.slice(t0, n), k.slice(t0, n), v.slice(t0, n), out), PSK_SUCCESS) << "chunk at " << t0;
        place(rows2, decode16(out, type), B, c.Hq, N, c.dv, t0, n);
        t0 += n;
    }
    steps(s2, t0, rows2);
    const double e2 = relativeMaxError(rows2, want64);
    EXPECT_LE(e2, threshold) << "chunked forwards with the state + steps vs the 16-bit forward";

    // Against the float64 reference over the 16-bit inputs, sequence 0.
    psk::ref::Shape shape;
    shape.Hq = int(c.Hq);
    shape.Hkv = int(c.Hkv);
    shape.n = int(N);
    shape.h = int(c.h);
    shape.dv = int(c.dv);
    const std::vector<float> q0 = decode16(q.x, type), k0 = decode16(k.x, type), v0 = decode16(v.x, type);
    const std::vector<double> q64(q0.begin(), q0.begin() + size_t(c.Hq) * N * c.h), k64(k0.begin(), k0.begin() + size_t(c.Hkv) * N * c.h),
        v64(v0.begin(), v0.begin() + size_t(c.Hkv) * N * c.dv);
    std::vector<double> ref;
    if (softmax)
        psk::ref::softmaxAttention(shape, q64, k64, v64, 1.0 / std::sqrt(double(c.h)), true, ref);
    else
        psk::ref::polysketchAttention(shape, q64, k64, v64, a->ref, ref);
    const double eRef = relativeMaxError(std::vector<float>(rows1.begin(), rows1.begin() + ref.size()), ref);
    EXPECT_LE(eRef, threshold) << "decoded rows vs the float64 reference";
    psk::conformance::printError("decode16-fwd", type, "-", label + "_prefill_steps", e1, threshold);
    psk::conformance::printError("decode16-fwd", type, "-", label + "_chunked_forwards_steps", e2, threshold);
    psk::conformance::printError("decode16-ref", type, "-", label, eRef, threshold);

    // 3. The blob (float32 data) restores into a fresh state, which continues bit for bit.
    const std::vector<uint8_t> blob = serialize(s1);
    EXPECT_EQ(get32(blob, 52), uint32_t(type)) << "the config's data type field";
    PskDecodeState s3 = makeState();
    ASSERT_TRUE(s3);
    ASSERT_EQ(pskRestoreDecodeState(s3, blob.data(), blob.size()), PSK_SUCCESS);
    EXPECT_EQ(serialize(s3), blob);
    const Tokens16 q2(B, c.Hq, 1, c.h, c.seed + 11, type), k2(B, c.Hkv, 1, c.h, c.seed + 12, type), v2(B, c.Hkv, 1, c.dv, c.seed + 13, type);
    std::vector<uint16_t> o1(size_t(B) * c.Hq * c.dv), o3(o1.size());
    ASSERT_EQ(step16(s1, q2.x, k2.x, v2.x, o1), PSK_SUCCESS);
    ASSERT_EQ(step16(s3, q2.x, k2.x, v2.x, o3), PSK_SUCCESS);
    EXPECT_EQ(o1, o3);
    // A float32 attention of the same configuration: the same data bytes, but the data type differs.
    if (!softmax) {
        Config c32 = c;
        c32.type = PSK_DATA_TYPE_FLOAT32;
        const auto a32 = makeAttention(ctx, c32);
        ASSERT_TRUE(a32);
        PskDecodeStateCreateInfo info{};
        info.batchSize = B;
        PskDecodeState s32 = nullptr;
        ASSERT_EQ(pskCreateDecodeState(a32->handle, &info, &s32), PSK_SUCCESS);
        EXPECT_EQ(serialize(s32).size(), blob.size());
        psk::test::sharedLog().clear();
        EXPECT_EQ(pskRestoreDecodeState(s32, blob.data(), blob.size()), PSK_ERROR_BAD_FILE);
        psk::test::sharedLog().clear();
        pskDestroyDecodeState(s32);
    }
    pskDestroyDecodeState(s1);
    pskDestroyDecodeState(s2);
    pskDestroyDecodeState(s3);
}

INSTANTIATE_TEST_SUITE_P(Decode16, Decode16MatchesForward,
                         ::testing::Values(Case16{PSK_DATA_TYPE_FLOAT16, 0}, Case16{PSK_DATA_TYPE_FLOAT16, 1},
                                           Case16{PSK_DATA_TYPE_FLOAT16, 2}, Case16{PSK_DATA_TYPE_BFLOAT16, 0},
                                           Case16{PSK_DATA_TYPE_BFLOAT16, 1}, Case16{PSK_DATA_TYPE_BFLOAT16, 2}),
                         [](const ::testing::TestParamInfo<Case16>& info) {
                             return std::string(info.param.type == PSK_DATA_TYPE_FLOAT16 ? "f16_" : "bf16_") +
                                    (info.param.kind == 0 ? "polysketch" : info.param.kind == 1 ? "local_exact" : "softmax");
                         });

// pskCmdDecodeStep on 16-bit tensors: the host step's rows bit for bit; errors of 16-bit host inputs.
TEST_F(ContextTest, Decode16CmdStepAndErrors) {
    for (const PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16})
        for (int which = 0; which < 3; ++which) {
            SCOPED_TRACE(std::string(kKindNames[which]) + (type == PSK_DATA_TYPE_FLOAT16 ? " f16" : " bf16"));
            Config c = kindConfig(which);
            c.type = type;
            const auto a = makeAttention(ctx, c);
            ASSERT_TRUE(a);
            const uint32_t B = 2, capacity = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 64 : 0, steps = 19;
            PskDecodeStateCreateInfo ci{};
            ci.batchSize = B;
            ci.capacity = capacity;
            PskDecodeState host = nullptr, app = nullptr;
            ASSERT_EQ(pskCreateDecodeState(a->handle, &ci, &host), PSK_SUCCESS);
            ASSERT_EQ(pskCreateDecodeState(a->handle, &ci, &app), PSK_SUCCESS);
            CmdRig rig(ctx);
            const size_t elems[4] = {size_t(B) * c.Hq * c.h, size_t(B) * c.Hkv * c.h, size_t(B) * c.Hkv * c.dv, size_t(B) * c.Hq * c.dv};
            psk::Buffer bufs[4];
            VkDeviceSize stride[4];
            for (int i = 0; i < 4; ++i) {
                stride[i] = rig.aligned(elems[i] * 2);
                bufs[i] = rig.buffer(stride[i] * steps, i == 3 ? psk::MemoryUsage::HostReadback : psk::MemoryUsage::HostUpload);
            }
            std::vector<std::vector<uint16_t>> wants;
            rig.begin();
            for (uint32_t t = 0; t < steps; ++t) {  // past a block boundary (b = 16)
                std::vector<std::vector<uint16_t>> in(3);
                for (int i = 0; i < 3; ++i) {
                    in[i] = encode16(psk::test::randomNormal(elems[i], 100 + 3 * t + i), type);
                    std::memcpy(bufs[i].mapped() + stride[i] * t, in[i].data(), elems[i] * 2);
                }
                std::vector<uint16_t> out(elems[3]);
                ASSERT_EQ(step16(host, in[0], in[1], in[2], out), PSK_SUCCESS);
                wants.push_back(out);
                PskCmdDecodeStepInfo info{};
                PskVulkanTensor* ts[4] = {&info.q, &info.k, &info.v, &info.out};
                for (int i = 0; i < 4; ++i) {
                    ts[i]->buffer = bufs[i].handle();
                    ts[i]->offset = stride[i] * t;
                    ts[i]->size = elems[i] * 2;
                }
                ASSERT_EQ(pskCmdDecodeStep(app, rig.cmd, &info), PSK_SUCCESS);
            }
            rig.submit();
            for (uint32_t t = 0; t < steps; ++t) {
                std::vector<uint16_t> got(elems[3]);
                std::memcpy(got.data(), bufs[3].mapped() + stride[3] * t, elems[3] * 2);
                EXPECT_EQ(got, wants[t]) << "recorded step " << t;
            }
            EXPECT_EQ(serialize(host), serialize(app));

            // Errors: a 16-bit NaN or infinity, a short array; nothing consumed.
            psk::test::MessageLog& log = psk::test::sharedLog();
            log.clear();
            std::vector<uint16_t> q16 = encode16(psk::test::randomNormal(elems[0], 1), type),
                                  k16 = encode16(psk::test::randomNormal(elems[1], 2), type),
                                  v16 = encode16(psk::test::randomNormal(elems[2], 3), type), out(elems[3]);
            v16[3] = type == PSK_DATA_TYPE_FLOAT16 ? 0x7C00 : 0x7F80;  // +infinity
            EXPECT_EQ(step16(host, q16, k16, v16, out), PSK_ERROR_NON_FINITE_INPUT);
            v16[3] = type == PSK_DATA_TYPE_FLOAT16 ? 0x7E00 : 0x7FC0;  // NaN
            EXPECT_EQ(step16(host, q16, k16, v16, out), PSK_ERROR_NON_FINITE_INPUT);
            v16[3] = 0;
            q16.pop_back();
            EXPECT_EQ(step16(host, q16, k16, v16, out), PSK_ERROR_BUFFER_TOO_SMALL);
            q16.push_back(0);
            uint64_t pos = 0;
            EXPECT_EQ(pskGetDecodePosition(host, 0, &pos), PSK_SUCCESS);
            EXPECT_EQ(pos, steps) << "a failed step consumed nothing";
            EXPECT_EQ(step16(host, q16, k16, v16, out), PSK_SUCCESS);
            // State-only prefill: the 16-bit arrays are checked too.
            const uint32_t n = 5;
            std::vector<uint16_t> pq = encode16(psk::test::randomNormal(size_t(c.Hq) * n * c.h, 4), type),
                                  pk = encode16(psk::test::randomNormal(size_t(c.Hkv) * n * c.h, 5), type),
                                  pv = encode16(psk::test::randomNormal(size_t(c.Hkv) * n * c.dv, 6), type);
            PskDecodePrefillInfo pi{};
            pi.seqLen = n;
            setHostArrays(pi, pq, pk, pv, nullptr);
            pi.vBytes -= 1;
            EXPECT_EQ(pskDecodePrefillHost(host, &pi), PSK_ERROR_BUFFER_TOO_SMALL);
            pi.vBytes += 1;
            pk[7] = type == PSK_DATA_TYPE_FLOAT16 ? 0xFC00 : 0xFF80;  // -infinity
            EXPECT_EQ(pskDecodePrefillHost(host, &pi), PSK_ERROR_NON_FINITE_INPUT);
            EXPECT_EQ(pskGetDecodePosition(host, 0, &pos), PSK_SUCCESS);
            EXPECT_EQ(pos, steps + 1) << "a failed prefill changed nothing";
            pk[7] = 0;
            EXPECT_EQ(pskDecodePrefillHost(host, &pi), PSK_SUCCESS);
            EXPECT_EQ(pskGetDecodePosition(host, 0, &pos), PSK_SUCCESS);
            EXPECT_EQ(pos, n);
            log.clear();
            pskDestroyDecodeState(host);
            pskDestroyDecodeState(app);
        }
}

}  // namespace
