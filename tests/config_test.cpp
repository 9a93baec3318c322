// Unit tests of lib/attention_config.hpp: default strides, tensor extents and overlap, the defaults
// and checks of makeAttentionConfig and makeForwardGeometry. Pure host code: no Vulkan device, the
// DeviceCaps are built by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>

#include "forward/attention_config.hpp"
#include "util/error.hpp"

// PskTensorStrides is a global C struct: its operators must be global for gtest to find them.
static bool operator==(const PskTensorStrides& a, const PskTensorStrides& b) {
    return a.batch == b.batch && a.head == b.head && a.token == b.token;
}

static std::ostream& operator<<(std::ostream& os, const PskTensorStrides& s) {
    return os << "{batch " << s.batch << ", head " << s.head << ", token " << s.token << "}";
}

namespace {

using psk::AttentionConfig;
using psk::DeviceCaps;
using psk::ForwardGeometry;
using psk::TensorGeometry;

DeviceCaps testCaps(bool storage16 = true) {
    DeviceCaps caps;
    caps.properties.limits.maxComputeWorkGroupCount[0] = 65535;
    caps.properties.limits.maxComputeWorkGroupCount[1] = 65535;
    caps.properties.limits.maxComputeWorkGroupCount[2] = 65535;
    caps.properties.limits.maxStorageBufferRange = 1u << 27;
    caps.storageBuffer16BitAccess = storage16;
    return caps;
}

/** The PskResult a call throws as psk::Error, or PSK_SUCCESS when it returns. */
template <typename F>
PskResult codeOf(F&& f) {
    try {
        f();
    } catch (const psk::Error& e) {
        return e.code();
    }
    return PSK_SUCCESS;
}

TensorGeometry tensor(uint32_t batch, uint32_t heads, uint32_t tokens, uint32_t dim, PskTensorStrides strides) {
    TensorGeometry t;
    t.batch = batch;
    t.heads = heads;
    t.tokens = tokens;
    t.dim = dim;
    t.strides = strides;
    return t;
}

// ---------------------------------------------------------------------------------------------
// defaultStrides
// ---------------------------------------------------------------------------------------------

TEST(DefaultStrides, Bhnd) {
    // [B, H, n, d] contiguous: (H*n*d, n*d, d).
    EXPECT_EQ(psk::defaultStrides(PSK_LAYOUT_BHND, 3, 5, 7), (PskTensorStrides{105, 35, 7}));
    EXPECT_EQ(psk::defaultStrides(PSK_LAYOUT_BHND, 1, 1, 16), (PskTensorStrides{16, 16, 16}));
}

TEST(DefaultStrides, Bnhd) {
    // [B, n, H, d] contiguous: (n*H*d, d, H*d).
    EXPECT_EQ(psk::defaultStrides(PSK_LAYOUT_BNHD, 3, 5, 7), (PskTensorStrides{105, 7, 21}));
    EXPECT_EQ(psk::defaultStrides(PSK_LAYOUT_BNHD, 1, 1, 16), (PskTensorStrides{16, 16, 16}));
}

TEST(DefaultStrides, NoThirtyTwoBitOverflow) {
    // Products are formed in 64 bits.
    const PskTensorStrides s = psk::defaultStrides(PSK_LAYOUT_BHND, 65536, 65536, 256);
    EXPECT_EQ(s.batch, uint64_t(65536) * 65536 * 256);
    EXPECT_EQ(s.head, uint64_t(65536) * 256);
    const PskTensorStrides t = psk::defaultStrides(PSK_LAYOUT_BNHD, 65536, 65536, 256);
    EXPECT_EQ(t.batch, uint64_t(65536) * 65536 * 256);
    EXPECT_EQ(t.token, uint64_t(65536) * 256);
}

// ---------------------------------------------------------------------------------------------
// TensorGeometry
// ---------------------------------------------------------------------------------------------

TEST(TensorGeometry, ExtentOfDefaultLayoutsIsTheElementCount) {
    for (PskLayout layout : {PSK_LAYOUT_BHND, PSK_LAYOUT_BNHD}) {
        SCOPED_TRACE(int(layout));
        const TensorGeometry t = tensor(2, 3, 5, 7, psk::defaultStrides(layout, 3, 5, 7));
        EXPECT_EQ(t.extentElements(), 2u * 3 * 5 * 7);
        EXPECT_TRUE(t.nonOverlapping());
    }
}

TEST(TensorGeometry, ExtentWithPaddedRows) {
    // Rows of 7 elements padded to 10: the last row's padding is not part of the extent.
    const PskTensorStrides s{3 * 5 * 10, 5 * 10, 10};
    const TensorGeometry t = tensor(2, 3, 5, 7, s);
    EXPECT_EQ(t.extentElements(), 1u * 150 + 2u * 50 + 4u * 10 + 7);
    EXPECT_TRUE(t.nonOverlapping());
}

TEST(TensorGeometry, ExtentIsZeroForAnEmptyDimension) {
    const PskTensorStrides s = psk::defaultStrides(PSK_LAYOUT_BHND, 3, 5, 7);
    EXPECT_EQ(tensor(0, 3, 5, 7, s).extentElements(), 0u);
    EXPECT_EQ(tensor(2, 0, 5, 7, s).extentElements(), 0u);
    EXPECT_EQ(tensor(2, 3, 0, 7, s).extentElements(), 0u);
    EXPECT_EQ(tensor(2, 3, 5, 0, s).extentElements(), 0u);
}

TEST(TensorGeometry, ExtentWithBroadcastStrides) {
    // Single-element dimensions contribute nothing whatever their stride.
    const TensorGeometry t = tensor(1, 1, 4, 16, PskTensorStrides{999999, 888888, 16});
    EXPECT_EQ(t.extentElements(), 3u * 16 + 16);
    EXPECT_TRUE(t.nonOverlapping());
}

TEST(TensorGeometry, OverlappingTokenStride) {
    // Token stride smaller than the row: row t's tail is row t+1's head.
    EXPECT_FALSE(tensor(1, 1, 2, 16, PskTensorStrides{32, 32, 15}).nonOverlapping());
    EXPECT_FALSE(tensor(1, 1, 5, 16, PskTensorStrides{80, 80, 1}).nonOverlapping());
    // Exactly the row length is contiguous, not overlapping.
    EXPECT_TRUE(tensor(1, 1, 2, 16, PskTensorStrides{32, 32, 16}).nonOverlapping());
}

TEST(TensorGeometry, HeadStrideCollidingWithTokens) {
    // head 1, token 0 lands on head 0, token 1.
    EXPECT_FALSE(tensor(1, 2, 4, 8, PskTensorStrides{64, 8, 8}).nonOverlapping());
    // head 1, token 0 lands on head 0, token 3 (the last one).
    EXPECT_FALSE(tensor(1, 2, 4, 8, PskTensorStrides{64, 24, 8}).nonOverlapping());
    // One element short of clearing the previous head: the last row's tail is overlapped.
    EXPECT_FALSE(tensor(1, 2, 4, 8, PskTensorStrides{64, 31, 8}).nonOverlapping());
    EXPECT_TRUE(tensor(1, 2, 4, 8, PskTensorStrides{64, 32, 8}).nonOverlapping());
}

TEST(TensorGeometry, BatchStrideCollidingWithHeads) {
    EXPECT_FALSE(tensor(2, 2, 4, 8, PskTensorStrides{32, 32, 8}).nonOverlapping());
    EXPECT_TRUE(tensor(2, 2, 4, 8, PskTensorStrides{64, 32, 8}).nonOverlapping());
}

TEST(TensorGeometry, ZeroStrideOverlapsWhenTheDimensionHasSeveralEntries) {
    EXPECT_FALSE(tensor(1, 1, 2, 8, PskTensorStrides{16, 16, 0}).nonOverlapping());
    EXPECT_FALSE(tensor(2, 1, 2, 8, PskTensorStrides{0, 16, 8}).nonOverlapping());
}

TEST(TensorGeometry, InterleavedLayoutsDoNotOverlap) {
    // BNHD interleaves heads inside each token: head stride < token stride is fine.
    EXPECT_TRUE(tensor(2, 4, 3, 8, psk::defaultStrides(PSK_LAYOUT_BNHD, 4, 3, 8)).nonOverlapping());
    // Heads outermost, then batch (an unusual but valid arrangement).
    EXPECT_TRUE(tensor(2, 4, 3, 8, PskTensorStrides{24, 48, 8}).nonOverlapping());
}

// ---------------------------------------------------------------------------------------------
// makeAttentionConfig
// ---------------------------------------------------------------------------------------------

PskAttentionCreateInfo createInfo(PskAttentionKind kind, uint32_t headDim = 64) {
    PskAttentionCreateInfo info{};
    info.kind = kind;
    info.headDim = headDim;
    return info;
}

TEST(MakeAttentionConfig, SoftmaxDefaults) {
    const AttentionConfig c = psk::makeAttentionConfig(createInfo(PSK_ATTENTION_KIND_SOFTMAX, 64), testCaps());
    EXPECT_EQ(c.kind, PSK_ATTENTION_KIND_SOFTMAX);
    EXPECT_FLOAT_EQ(c.scale, 0.125f);  // 1 / sqrt(64)
    EXPECT_EQ(c.numQueryHeads, 1u);
    EXPECT_EQ(c.numKeyValueHeads, 1u);
    EXPECT_EQ(c.headDim, 64u);
    EXPECT_EQ(c.valueDim, 64u);
    EXPECT_EQ(c.dataType, PSK_DATA_TYPE_FLOAT32);
    EXPECT_EQ(c.layout, PSK_LAYOUT_BHND);
    EXPECT_FALSE(c.causal);
    EXPECT_FALSE(c.localExact);
    EXPECT_FALSE(c.referenceScaling);
}

TEST(MakeAttentionConfig, SoftmaxDefaultScaleFollowsHeadDim) {
    for (uint32_t h : {16u, 17u, 100u, 256u}) {
        const AttentionConfig c = psk::makeAttentionConfig(createInfo(PSK_ATTENTION_KIND_SOFTMAX, h), testCaps());
        EXPECT_FLOAT_EQ(c.scale, 1.0f / std::sqrt(float(h))) << h;
    }
}

TEST(MakeAttentionConfig, PolynomialAndPolysketchDefaults) {
    for (PskAttentionKind kind : {PSK_ATTENTION_KIND_POLYNOMIAL, PSK_ATTENTION_KIND_POLYSKETCH}) {
        SCOPED_TRACE(int(kind));
        const AttentionConfig c = psk::makeAttentionConfig(createInfo(kind, 64), testCaps());
        EXPECT_EQ(c.kind, kind);
        EXPECT_EQ(c.scale, 1.0f);
        EXPECT_EQ(c.degree, 4u);
        EXPECT_EQ(c.numQueryHeads, 1u);
        EXPECT_EQ(c.numKeyValueHeads, 1u);
        EXPECT_EQ(c.valueDim, 64u);
    }
    const AttentionConfig s = psk::makeAttentionConfig(createInfo(PSK_ATTENTION_KIND_POLYSKETCH), testCaps());
    EXPECT_EQ(s.sketchSize, 32u);
    EXPECT_EQ(s.blockSize, 256u);
}

TEST(MakeAttentionConfig, ExplicitValuesAreKept) {
    PskAttentionCreateInfo info = createInfo(PSK_ATTENTION_KIND_POLYNOMIAL, 32);
    info.flags = PSK_ATTENTION_CAUSAL_BIT;
    info.degree = 8;
    info.scale = 0.3f;
    info.numQueryHeads = 8;
    info.numKeyValueHeads = 2;
    info.valueDim = 48;
    info.dataType = PSK_DATA_TYPE_BFLOAT16;
    info.layout = PSK_LAYOUT_BNHD;
    const AttentionConfig c = psk::makeAttentionConfig(info, testCaps());
    EXPECT_TRUE(c.causal);
    EXPECT_EQ(c.degree, 8u);
    EXPECT_EQ(c.scale, 0.3f);
    EXPECT_EQ(c.numQueryHeads, 8u);
    EXPECT_EQ(c.numKeyValueHeads, 2u);
    EXPECT_EQ(c.headDim, 32u);
    EXPECT_EQ(c.valueDim, 48u);
    EXPECT_EQ(c.dataType, PSK_DATA_TYPE_BFLOAT16);
    EXPECT_EQ(c.layout, PSK_LAYOUT_BNHD);

    // A negative scale is finite, hence allowed, and kept as given.
    info.scale = -2.0f;
    EXPECT_EQ(psk::makeAttentionConfig(info, testCaps()).scale, -2.0f);
}

TEST(MakeAttentionConfig, KeyValueHeadsDefaultToQueryHeads) {
    PskAttentionCreateInfo info = createInfo(PSK_ATTENTION_KIND_SOFTMAX);
    info.numQueryHeads = 6;
    const AttentionConfig c = psk::makeAttentionConfig(info, testCaps());
    EXPECT_EQ(c.numQueryHeads, 6u);
    EXPECT_EQ(c.numKeyValueHeads, 6u);
}

TEST(MakeAttentionConfig, PolysketchFlags) {
    PskAttentionCreateInfo info = createInfo(PSK_ATTENTION_KIND_POLYSKETCH);
    info.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT | PSK_ATTENTION_REFERENCE_SCALING_BIT;
    info.sketchSize = 64;
    info.blockSize = 128;
    const AttentionConfig c = psk::makeAttentionConfig(info, testCaps());
    EXPECT_TRUE(c.causal);
    EXPECT_TRUE(c.localExact);
    EXPECT_TRUE(c.referenceScaling);
    EXPECT_EQ(c.sketchSize, 64u);
    EXPECT_EQ(c.blockSize, 128u);
}

TEST(MakeAttentionConfig, SoftmaxIgnoresDegreeAndSketchFields) {
    PskAttentionCreateInfo info = createInfo(PSK_ATTENTION_KIND_SOFTMAX);
    info.degree = 3;
    info.sketchSize = 1;
    info.blockSize = 1;
    EXPECT_EQ(codeOf([&] { psk::makeAttentionConfig(info, testCaps()); }), PSK_SUCCESS);
}

TEST(MakeAttentionConfig, RejectsEachBadField) {
    const DeviceCaps caps = testCaps();
    auto code = [&](void (*mutate)(PskAttentionCreateInfo&)) {
        PskAttentionCreateInfo info = createInfo(PSK_ATTENTION_KIND_SOFTMAX);
        mutate(info);
        return codeOf([&] { psk::makeAttentionConfig(info, caps); });
    };
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.kind = PSK_ATTENTION_KIND_NONE; }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.kind = static_cast<PskAttentionKind>(3 + 1); }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.flags = 0x8; }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.flags = PSK_ATTENTION_LOCAL_EXACT_BIT; }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.headDim = 0; }), PSK_ERROR_INVALID_SHAPE);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.headDim = 15; }), PSK_ERROR_INVALID_SHAPE);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.headDim = 257; }), PSK_ERROR_INVALID_SHAPE);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.valueDim = 257; }), PSK_ERROR_INVALID_SHAPE);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.valueDim = 1; }), PSK_SUCCESS);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) {
                  i.numQueryHeads = 6;
                  i.numKeyValueHeads = 4;
              }),
              PSK_ERROR_INVALID_SHAPE);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.numQueryHeads = 65536; }), PSK_ERROR_TOO_LARGE);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.numQueryHeads = 65535; }), PSK_SUCCESS);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) {
                  i.kind = PSK_ATTENTION_KIND_POLYNOMIAL;
                  i.degree = 6;
              }),
              PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.scale = std::numeric_limits<float>::quiet_NaN(); }),
              PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.scale = std::numeric_limits<float>::infinity(); }),
              PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.dataType = static_cast<PskDataType>(3); }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) { i.layout = static_cast<PskLayout>(2); }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) {
                  i.kind = PSK_ATTENTION_KIND_POLYSKETCH;
                  i.sketchSize = 129;
              }),
              PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) {
                  i.kind = PSK_ATTENTION_KIND_POLYSKETCH;
                  i.blockSize = 15;
              }),
              PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) {
                  i.kind = PSK_ATTENTION_KIND_POLYSKETCH;
                  i.sketchSource = static_cast<PskSketchSource>(3);
              }),
              PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(code([](PskAttentionCreateInfo& i) {
                  i.kind = PSK_ATTENTION_KIND_POLYSKETCH;
                  i.sketchSource = PSK_SKETCH_SOURCE_FILE;  // sketchFile NULL
              }),
              PSK_ERROR_INVALID_ARGUMENT);
}

TEST(MakeAttentionConfig, SixteenBitStorageNeedsTheFeature) {
    for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16}) {
        PskAttentionCreateInfo info = createInfo(PSK_ATTENTION_KIND_SOFTMAX);
        info.dataType = type;
        EXPECT_EQ(codeOf([&] { psk::makeAttentionConfig(info, testCaps(false)); }), PSK_ERROR_UNSUPPORTED) << int(type);
        EXPECT_EQ(codeOf([&] { psk::makeAttentionConfig(info, testCaps(true)); }), PSK_SUCCESS) << int(type);
    }
    PskAttentionCreateInfo info = createInfo(PSK_ATTENTION_KIND_SOFTMAX);
    EXPECT_EQ(codeOf([&] { psk::makeAttentionConfig(info, testCaps(false)); }), PSK_SUCCESS);
}

TEST(ElementBytes, PerDataType) {
    EXPECT_EQ(psk::elementBytes(PSK_DATA_TYPE_FLOAT32), 4u);
    EXPECT_EQ(psk::elementBytes(PSK_DATA_TYPE_FLOAT16), 2u);
    EXPECT_EQ(psk::elementBytes(PSK_DATA_TYPE_BFLOAT16), 2u);
    EXPECT_STREQ(psk::dataTypeSuffix(PSK_DATA_TYPE_FLOAT32), "f32");
    EXPECT_STREQ(psk::dataTypeSuffix(PSK_DATA_TYPE_FLOAT16), "f16");
    EXPECT_STREQ(psk::dataTypeSuffix(PSK_DATA_TYPE_BFLOAT16), "bf16");
}

// ---------------------------------------------------------------------------------------------
// makeForwardGeometry
// ---------------------------------------------------------------------------------------------

AttentionConfig config(uint32_t Hq, uint32_t Hkv, uint32_t h, uint32_t dv, PskLayout layout = PSK_LAYOUT_BHND,
                       PskDataType type = PSK_DATA_TYPE_FLOAT32) {
    PskAttentionCreateInfo info = createInfo(PSK_ATTENTION_KIND_SOFTMAX, h);
    info.numQueryHeads = Hq;
    info.numKeyValueHeads = Hkv;
    info.valueDim = dv;
    info.layout = layout;
    info.dataType = type;
    return psk::makeAttentionConfig(info, testCaps());
}

TEST(MakeForwardGeometry, DefaultStridesFromTheLayout) {
    for (PskLayout layout : {PSK_LAYOUT_BHND, PSK_LAYOUT_BNHD}) {
        SCOPED_TRACE(int(layout));
        const AttentionConfig c = config(4, 2, 32, 16, layout);
        const ForwardGeometry g = psk::makeForwardGeometry(c, testCaps(), 3, 10, nullptr, nullptr, nullptr, nullptr);
        EXPECT_EQ(g.batch, 3u);
        EXPECT_EQ(g.tokens, 10u);
        EXPECT_EQ(g.q.strides, psk::defaultStrides(layout, 4, 10, 32));
        EXPECT_EQ(g.k.strides, psk::defaultStrides(layout, 2, 10, 32));
        EXPECT_EQ(g.v.strides, psk::defaultStrides(layout, 2, 10, 16));
        EXPECT_EQ(g.out.strides, psk::defaultStrides(layout, 4, 10, 16));
        EXPECT_EQ(g.q.extentElements(), 3u * 4 * 10 * 32);
        EXPECT_EQ(g.k.extentElements(), 3u * 2 * 10 * 32);
        EXPECT_EQ(g.v.extentElements(), 3u * 2 * 10 * 16);
        EXPECT_EQ(g.out.extentElements(), 3u * 4 * 10 * 16);
        EXPECT_EQ(g.q.heads, 4u);
        EXPECT_EQ(g.k.heads, 2u);
        EXPECT_EQ(g.v.dim, 16u);
    }
}

TEST(MakeForwardGeometry, BatchZeroMeansOne) {
    const ForwardGeometry g = psk::makeForwardGeometry(config(1, 1, 16, 16), testCaps(), 0, 4, nullptr, nullptr, nullptr, nullptr);
    EXPECT_EQ(g.batch, 1u);
    EXPECT_EQ(g.q.batch, 1u);
}

TEST(MakeForwardGeometry, ExplicitStridesAreUsed) {
    const PskTensorStrides padded{4 * 20, 20, 20};  // 1 head, 4 tokens, rows of 16 padded to 20
    const ForwardGeometry g =
        psk::makeForwardGeometry(config(1, 1, 16, 16), testCaps(), 1, 4, &padded, &padded, &padded, &padded);
    EXPECT_EQ(g.out.strides, padded);
    EXPECT_EQ(g.out.extentElements(), 3u * 20 + 16);
}

TEST(MakeForwardGeometry, Rejections) {
    const AttentionConfig c = config(2, 1, 16, 16);
    const DeviceCaps caps = testCaps();
    auto code = [&](uint32_t batch, uint32_t tokens, const PskTensorStrides* qs, const PskTensorStrides* os) {
        return codeOf([&] { psk::makeForwardGeometry(c, caps, batch, tokens, qs, nullptr, nullptr, os); });
    };
    EXPECT_EQ(code(1, 0, nullptr, nullptr), PSK_ERROR_INVALID_SHAPE);
    EXPECT_EQ(code(1, (1u << 30) + 1, nullptr, nullptr), PSK_ERROR_TOO_LARGE);
    EXPECT_EQ(code(1u << 31, 4, nullptr, nullptr), PSK_ERROR_TOO_LARGE);
    EXPECT_EQ(code(65536, 1, nullptr, nullptr), PSK_ERROR_TOO_LARGE);  // dispatch limit
    const PskTensorStrides zero{128, 64, 0};
    EXPECT_EQ(code(1, 4, &zero, nullptr), PSK_ERROR_INVALID_SHAPE);
    EXPECT_EQ(code(1, 4, nullptr, &zero), PSK_ERROR_INVALID_SHAPE);
    const PskTensorStrides overlapping{128, 64, 15};
    EXPECT_EQ(code(1, 4, &overlapping, nullptr), PSK_SUCCESS) << "inputs may overlap (broadcast)";
    EXPECT_EQ(code(1, 4, nullptr, &overlapping), PSK_ERROR_INVALID_SHAPE);
    const PskTensorStrides huge{128, 64, uint64_t(1) << 31};  // 3 * 2^31 > 2^32
    EXPECT_EQ(code(1, 4, &huge, nullptr), PSK_ERROR_TOO_LARGE);
    const PskTensorStrides wrap{128, 64, ~uint64_t(0)};
    EXPECT_EQ(code(1, 4, &wrap, nullptr), PSK_ERROR_TOO_LARGE);
}

TEST(MakeForwardGeometry, StorageBufferRangeBoundary) {
    // maxStorageBufferRange 2^27 bytes: 2^25 float32 elements fit exactly, one token more does not.
    const DeviceCaps caps = testCaps();
    const AttentionConfig f32 = config(1, 1, 256, 256);
    const uint32_t fits = (1u << 25) / 256;  // tokens
    EXPECT_EQ(codeOf([&] { psk::makeForwardGeometry(f32, caps, 1, fits, nullptr, nullptr, nullptr, nullptr); }), PSK_SUCCESS);
    EXPECT_EQ(codeOf([&] { psk::makeForwardGeometry(f32, caps, 1, fits + 1, nullptr, nullptr, nullptr, nullptr); }),
              PSK_ERROR_TOO_LARGE);
    // 16-bit storage halves the bytes: twice the tokens fit.
    const AttentionConfig f16 = config(1, 1, 256, 256, PSK_LAYOUT_BHND, PSK_DATA_TYPE_FLOAT16);
    EXPECT_EQ(codeOf([&] { psk::makeForwardGeometry(f16, caps, 1, 2 * fits, nullptr, nullptr, nullptr, nullptr); }), PSK_SUCCESS);
    EXPECT_EQ(codeOf([&] { psk::makeForwardGeometry(f16, caps, 1, 2 * fits + 1, nullptr, nullptr, nullptr, nullptr); }),
              PSK_ERROR_TOO_LARGE);
}

}  // namespace
