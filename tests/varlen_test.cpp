// Variable-length packed batches (PskForwardHostInfo::cuSeqlens, PskCmdForwardInfo::cuSeqlens):
// q, k, v of [total, H, d] with B + 1 token offsets; every sequence's rows must equal a forward on
// that sequence alone (blocks start at the sequence's first token; causal within it), for
// polysketch (causal, local exact or not; full), softmax, exact polynomial, GQA; the recorded form
// must equal the host form; bad offsets must fail with their code and write nothing; one packed
// forward without cuSeqlens must differ (so the comparison can fail).
//
// Metric: relativeMaxError of a sequence's rows against the same sequence alone (both float32 from
// the library, the same kernels on the same rows): 1e-6.
#include <polysketch/polysketch_vulkan.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "reference/storage_types.hpp"
#include "support/app_vulkan.hpp"
#include "support/handles.hpp"
#include "support/host_arrays.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;
using psk::test::relativeMaxError;
using psk::test::setHostArrays;

constexpr double kTolerance = 1e-6;

struct Spec {
    const char* name;
    PskAttentionKind kind = PSK_ATTENTION_KIND_POLYSKETCH;
    bool causal = true, localExact = false;
    uint32_t Hq = 2, Hkv = 2;
};

using Attention = psk::test::Attention;

constexpr uint32_t kDim = 16;

Attention makeAttention(PskContext ctx, const Spec& s) {
    PskAttentionCreateInfo info{};
    info.kind = s.kind;
    info.flags = (s.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (s.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    info.degree = s.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0 : 4;
    info.scale = s.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0.0f : 1.0f / std::sqrt(float(kDim));
    info.numQueryHeads = s.Hq;
    info.numKeyValueHeads = s.Hkv;
    info.headDim = kDim;
    info.valueDim = kDim;
    info.layout = PSK_LAYOUT_BNHD;
    if (s.kind == PSK_ATTENTION_KIND_POLYSKETCH) {
        info.sketchSize = 8;
        info.blockSize = 64;
        info.seed = 7;
    }
    PskAttention a = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &a), PSK_SUCCESS);
    return Attention(a);
}

/** Packed BNHD tokens: q [total, Hq, d], k, v [total, Hkv, d]. */
struct Packed {
    Spec s;
    std::vector<uint32_t> cu;
    std::vector<float> q, k, v;
    Packed(const Spec& spec, const std::vector<uint32_t>& lengths, uint64_t seed) : s(spec), cu{0} {
        for (uint32_t n : lengths) cu.push_back(cu.back() + n);
        q = psk::test::randomNormal(size_t(total()) * s.Hq * kDim, seed);
        k = psk::test::randomNormal(size_t(total()) * s.Hkv * kDim, seed + 1);
        v = psk::test::randomNormal(size_t(total()) * s.Hkv * kDim, seed + 2);
    }
    uint32_t total() const { return cu.back(); }
    uint32_t sequences() const { return uint32_t(cu.size() - 1); }
    size_t outFloats() const { return size_t(total()) * s.Hq * kDim; }
    /** Rows [t0, t0 + n) of a packed array with H heads (contiguous in BNHD). */
    static std::vector<float> rows(const std::vector<float>& x, uint32_t H, uint32_t t0, uint32_t n) {
        return std::vector<float>(x.begin() + size_t(t0) * H * kDim, x.begin() + size_t(t0 + n) * H * kDim);
    }
};

PskForwardHostInfo hostInfo(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                            std::vector<float>& out, uint32_t B, uint32_t n, const uint32_t* cu) {
    PskForwardHostInfo info{};
    info.batchSize = B;
    info.seqLen = n;
    setHostArrays(info, q, k, v, &out);
    info.cuSeqlens = cu;
    return info;
}

/** Each sequence alone (one call per non-empty sequence), its rows packed as the varlen output. */
std::vector<float> alone(PskAttention a, const Packed& x) {
    std::vector<float> all(x.outFloats(), NAN);
    for (uint32_t i = 0; i < x.sequences(); ++i) {
        const uint32_t t0 = x.cu[i], n = x.cu[i + 1] - t0;
        if (!n) continue;
        const std::vector<float> q = Packed::rows(x.q, x.s.Hq, t0, n), k = Packed::rows(x.k, x.s.Hkv, t0, n),
                                 v = Packed::rows(x.v, x.s.Hkv, t0, n);
        std::vector<float> out(size_t(n) * x.s.Hq * kDim);
        const PskForwardHostInfo info = hostInfo(q, k, v, out, 1, n, nullptr);
        EXPECT_EQ(pskAttentionForwardHost(a, &info), PSK_SUCCESS);
        std::copy(out.begin(), out.end(), all.begin() + size_t(t0) * x.s.Hq * kDim);
    }
    return all;
}

/** The largest relative error over the sequences of `got` against `want` (packed rows). */
double worstError(const Packed& x, const std::vector<float>& got, const std::vector<float>& want) {
    double worst = 0;
    for (uint32_t i = 0; i < x.sequences(); ++i) {
        const uint32_t t0 = x.cu[i], n = x.cu[i + 1] - t0;
        if (!n) continue;
        const std::vector<float> g = Packed::rows(got, x.s.Hq, t0, n), w = Packed::rows(want, x.s.Hq, t0, n);
        worst = std::max(worst, relativeMaxError(g, std::vector<double>(w.begin(), w.end())));
    }
    return worst;
}

const std::vector<uint32_t> kLengths = {1, 17, 64, 130, 0, 300};

std::vector<Spec> specs() {
    return {
        {"polysketch causal", PSK_ATTENTION_KIND_POLYSKETCH, true, false, 2, 2},
        {"polysketch causal local exact", PSK_ATTENTION_KIND_POLYSKETCH, true, true, 2, 2},
        {"polysketch full", PSK_ATTENTION_KIND_POLYSKETCH, false, false, 2, 2},
        {"polysketch causal local exact GQA", PSK_ATTENTION_KIND_POLYSKETCH, true, true, 4, 2},
        {"softmax causal", PSK_ATTENTION_KIND_SOFTMAX, true, false, 2, 2},
        {"softmax causal GQA", PSK_ATTENTION_KIND_SOFTMAX, true, false, 4, 1},
        {"exact polynomial causal", PSK_ATTENTION_KIND_POLYNOMIAL, true, false, 2, 2},
    };
}

class VarlenTest : public ContextTest {};

TEST_F(VarlenTest, EachSequenceEqualsItselfAlone) {
    for (const Spec& s : specs()) {
        SCOPED_TRACE(s.name);
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        const Packed x(s, kLengths, 100);
        std::vector<float> out(x.outFloats(), NAN);
        PskForwardStats stats{};
        PskForwardHostInfo info = hostInfo(x.q, x.k, x.v, out, x.sequences(), x.total(), x.cu.data());
        info.stats = &stats;
        ASSERT_EQ(pskAttentionForwardHost(a.get(), &info), PSK_SUCCESS);
        const std::vector<float> want = alone(a.get(), x);
        EXPECT_LE(worstError(x, out, want), kTolerance);
        // The documented workspace bound: pskGetWorkspaceSize of batch 1 and the total tokens.
        uint64_t whole = 0;
        ASSERT_EQ(pskGetWorkspaceSize(a.get(), 1, x.total(), &whole), PSK_SUCCESS);
        EXPECT_LE(stats.workspaceBytes, whole);

        // Control: the same packed rows as one sequence (no cuSeqlens) attend across sequences.
        if (s.causal) {
            std::vector<float> packed(x.outFloats(), NAN);
            const PskForwardHostInfo plain = hostInfo(x.q, x.k, x.v, packed, 1, x.total(), nullptr);
            ASSERT_EQ(pskAttentionForwardHost(a.get(), &plain), PSK_SUCCESS);
            EXPECT_GT(worstError(x, packed, want), 1e-3) << "the control does not differ: the comparison could not fail";
        }
    }
}

TEST_F(VarlenTest, SingleSequenceAndEmptyEnds) {
    const Spec s{"polysketch causal local exact", PSK_ATTENTION_KIND_POLYSKETCH, true, true, 2, 2};
    const Attention a = makeAttention(ctx, s);
    ASSERT_TRUE(a);
    for (const std::vector<uint32_t>& lengths : {std::vector<uint32_t>{200}, std::vector<uint32_t>{0, 0, 65, 0}}) {
        const Packed x(s, lengths, 300);
        std::vector<float> out(x.outFloats(), NAN);
        const PskForwardHostInfo info = hostInfo(x.q, x.k, x.v, out, x.sequences(), x.total(), x.cu.data());
        ASSERT_EQ(pskAttentionForwardHost(a.get(), &info), PSK_SUCCESS);
        EXPECT_LE(worstError(x, out, alone(a.get(), x)), kTolerance);
    }
}

// float16 storage: each sequence within the float16 output threshold (2e-3) of itself alone.
TEST_F(VarlenTest, Float16EachSequenceEqualsItselfAlone) {
    const Spec s{"polysketch causal local exact f16", PSK_ATTENTION_KIND_POLYSKETCH, true, true, 2, 2};
    PskAttentionCreateInfo ci{};
    ci.kind = s.kind;
    ci.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    ci.degree = 4;
    ci.scale = 1.0f / std::sqrt(float(kDim));
    ci.numQueryHeads = ci.numKeyValueHeads = 2;
    ci.headDim = ci.valueDim = kDim;
    ci.layout = PSK_LAYOUT_BNHD;
    ci.dataType = PSK_DATA_TYPE_FLOAT16;
    ci.sketchSize = 8;
    ci.blockSize = 64;
    ci.seed = 7;
    PskAttention raw = nullptr;
    const PskResult created = pskCreateAttention(ctx, &ci, &raw);
    if (created == PSK_ERROR_UNSUPPORTED) {
        psk::test::sharedLog().clear();
        GTEST_SKIP() << "no float16 storage on this device";
    }
    ASSERT_EQ(created, PSK_SUCCESS);
    const Attention a(raw);
    const Packed x(s, kLengths, 900);
    using psk::storage::decode;
    using psk::storage::encode;
    const PskDataType f16 = PSK_DATA_TYPE_FLOAT16;
    auto call = [&](const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, uint32_t B, uint32_t n,
                    const uint32_t* cu) {
        const std::vector<uint8_t> qh = encode(q, f16), kh = encode(k, f16), vh = encode(v, f16);
        std::vector<uint8_t> out(size_t(n) * s.Hq * kDim * 2, 0xFF);
        PskForwardHostInfo info{};
        info.batchSize = B;
        info.seqLen = n;
        setHostArrays(info, qh, kh, vh, &out);
        info.cuSeqlens = cu;
        EXPECT_EQ(pskAttentionForwardHost(a.get(), &info), PSK_SUCCESS);
        return decode(out, f16);
    };
    const std::vector<float> got = call(x.q, x.k, x.v, x.sequences(), x.total(), x.cu.data());
    std::vector<float> want(x.outFloats(), NAN);
    for (uint32_t i = 0; i < x.sequences(); ++i) {
        const uint32_t t0 = x.cu[i], n = x.cu[i + 1] - t0;
        if (!n) continue;
        const std::vector<float> o = call(Packed::rows(x.q, s.Hq, t0, n), Packed::rows(x.k, s.Hkv, t0, n),
                                          Packed::rows(x.v, s.Hkv, t0, n), 1, n, nullptr);
        std::copy(o.begin(), o.end(), want.begin() + size_t(t0) * s.Hq * kDim);
    }
    EXPECT_LE(worstError(x, got, want), 2e-3);
}

TEST_F(VarlenTest, BadOffsetsFailAndWriteNothing) {
    const Spec s{"polysketch causal", PSK_ATTENTION_KIND_POLYSKETCH, true, false, 2, 2};
    const Attention a = makeAttention(ctx, s);
    ASSERT_TRUE(a);
    const Packed x(s, {10, 20, 30}, 500);
    struct Case {
        const char* what;
        std::vector<uint32_t> cu;
        PskResult code;
    };
    const Case cases[] = {
        {"cu[0] != 0", {1, 10, 30, 60}, PSK_ERROR_INVALID_ARGUMENT},
        {"decreasing", {0, 30, 10, 60}, PSK_ERROR_INVALID_ARGUMENT},
        {"cu[B] < seqLen", {0, 10, 30, 59}, PSK_ERROR_INVALID_SHAPE},
        {"cu[B] > seqLen", {0, 10, 30, 61}, PSK_ERROR_INVALID_SHAPE},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        std::vector<float> out(x.outFloats(), 123.0f);
        const PskForwardHostInfo info = hostInfo(x.q, x.k, x.v, out, 3, 60, c.cu.data());
        EXPECT_EQ(pskAttentionForwardHost(a.get(), &info), c.code);
        EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float f) { return f == 123.0f; })) << "out was written";
    }
    psk::test::sharedLog().clear();  // the expected errors

    // With a decode state: unsupported.
    PskDecodeStateCreateInfo si{};
    si.batchSize = 3;
    PskDecodeState state = nullptr;
    ASSERT_EQ(pskCreateDecodeState(a.get(), &si, &state), PSK_SUCCESS);
    std::vector<float> out(x.outFloats(), 123.0f);
    PskForwardHostInfo info = hostInfo(x.q, x.k, x.v, out, 3, 60, x.cu.data());
    info.state = state;
    EXPECT_EQ(pskAttentionForwardHost(a.get(), &info), PSK_ERROR_UNSUPPORTED);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float f) { return f == 123.0f; })) << "out was written";
    pskDestroyDecodeState(state);
    psk::test::sharedLog().clear();
}

// ---- the recorded form (an app's device) equals the host form ----

TEST(VarlenCmd, RecordedEqualsHost) {
    psk::test::AppVulkan app(0);
    ASSERT_NE(app.device, VK_NULL_HANDLE);
    psk::test::MessageLog log;
    PskContext ctx = app.context(log);
    ASSERT_NE(ctx, nullptr);
    for (const Spec& s : specs()) {
        SCOPED_TRACE(s.name);
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        const Packed x(s, kLengths, 700);
        std::vector<float> host(x.outFloats(), NAN);
        const PskForwardHostInfo hi = hostInfo(x.q, x.k, x.v, host, x.sequences(), x.total(), x.cu.data());
        ASSERT_EQ(pskAttentionForwardHost(a.get(), &hi), PSK_SUCCESS) << (log.errors.empty() ? "" : log.errors.back());

        const VkDeviceSize align = std::max<VkDeviceSize>(app.limits.minStorageBufferOffsetAlignment, 4);
        auto up = [&](VkDeviceSize v) { return (v + align - 1) / align * align; };
        const std::vector<float>* in[3] = {&x.q, &x.k, &x.v};
        VkDeviceSize off[4], bytes[4];
        VkDeviceSize at = align;  // a non-zero offset
        for (int i = 0; i < 4; ++i) {
            bytes[i] = (i < 3 ? in[i]->size() : x.outFloats()) * 4;
            off[i] = at;
            at = up(at + bytes[i]) + align;
        }
        auto buf = app.buffer(at);
        for (int i = 0; i < 3; ++i) std::memcpy(buf->data + off[i], in[i]->data(), bytes[i]);
        std::memset(buf->data + off[3], 0xFF, bytes[3]);
        uint64_t wsBytes = 0;
        ASSERT_EQ(pskGetWorkspaceSize(a.get(), 1, x.total(), &wsBytes), PSK_SUCCESS);
        auto ws = app.buffer(std::max<uint64_t>(wsBytes, 4));
        PskCmdForwardInfo info{};
        info.batchSize = x.sequences();
        info.seqLen = x.total();
        PskVulkanTensor* t[4] = {&info.q, &info.k, &info.v, &info.out};
        for (int i = 0; i < 4; ++i) *t[i] = {buf->buffer, off[i], bytes[i], nullptr};
        info.workspace = wsBytes ? ws->buffer : VK_NULL_HANDLE;
        info.workspaceSize = wsBytes;
        info.cuSeqlens = x.cu.data();
        app.run([&](VkCommandBuffer cmd) {
            psk::test::appBarrier(cmd, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                  VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
            EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &info), PSK_SUCCESS) << (log.errors.empty() ? "" : log.errors.back());
            psk::test::appBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                                  VK_ACCESS_HOST_READ_BIT);
        });
        std::vector<float> recorded(x.outFloats());
        std::memcpy(recorded.data(), buf->data + off[3], bytes[3]);
        EXPECT_LE(worstError(x, recorded, host), kTolerance);

        // A bad offset array records nothing.
        const uint32_t bad[] = {0, 1, 2, 3, 4, 5, x.total() + 1};
        info.cuSeqlens = bad;
        std::memset(buf->data + off[3], 0xFF, bytes[3]);
        app.run([&](VkCommandBuffer cmd) { EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &info), PSK_ERROR_INVALID_SHAPE); });
        EXPECT_TRUE(std::all_of(buf->data + off[3], buf->data + off[3] + bytes[3], [](uint8_t b) { return b == 0xFF; }));
        EXPECT_EQ(pskResetCommandDescriptors(a.get()), PSK_SUCCESS);
    }
    pskDestroyContext(ctx);
}

}  // namespace
