// z_operands.comp (the prefix states packed as the cooperative output's B operands, Z_PACKED)
// against a CPU reference of every record: for each (sequence, block, chunk) the header's scale
// (operands.glsl's operand_scale of the chunk's largest |Z| over features < F and columns 0..dv)
// and, for each of the chunk's rows and the `columns` operand columns, hi = cm_split_high(Z scale)
// and lo = Z scale - hi, both as the operand type's 16 bits (float16 rounded to nearest even,
// subnormals included; bfloat16 by the kernel's integer rounding), zero past feature F or column dv.
//
// Metric: exact equality of every 16-bit operand and of the header's four words, i.e. of every
// byte of the output region. The reference reproduces the kernel's arithmetic bit for bit: the
// scale is a power of two (so Z scale is exact in float32), the split is integer arithmetic on the
// bits, lo = x - hi is exact in float32, and the only rounding left is lo's (and, for float16,
// hi's exact) conversion to 16 bits, which Vulkan's packHalf2x16 and the kernel's bfloat16 packing
// both do to nearest even on the devices the library has met; so any difference is a wrong
// operand, not noise. The states have a widely varying magnitude (sign x 2^[-20, 30] x [1, 2) with
// full random mantissas, plus values planted on the split's and the conversions' ties) so that
// lo is exercised everywhere, including float16 subnormals (hi = 0); one case puts the chunk's
// maximum below 2^-46 (the scale's clamp at 2^60); one has a whole chunk of zeros (scale 1, all
// operands 0). Negative zeros are not planted: GLSL leaves their sign to the driver.
//
// Shapes: features F that are not a multiple of the chunk (136 at 32: a last chunk of 8; 10 at 16)
// and that are (64 at 64); dv = 24 and 64 (columns 32 and 80, the output's 16-column fragments)
// and dv = 7 with 8 columns; state rows of (dv + 1) rounded up to 4 floats; causal packing (every
// block) and full (block 0 of each of t state blocks). Columns past dv in the state rows, the state
// blocks a full packing must not read and the floats around the states hold -1e30 (finite, not
// NaN: llvmpipe's max() drops a NaN, so a NaN read into the maximum would not show): reading any
// of them into the maximum (the scale) or into an operand shows. The records sit at an offset
// inside a larger buffer and the sentinel words around them must survive. A kernel writing lo = 0
// fails (at least one lo must be non-zero, and the comparison catches it anyway).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "forward/z_operands.hpp"
#include "support/test_context.hpp"
#include "kernels/kernel_pipeline.hpp"
#include "vk/context.hpp"

namespace {

using psk::CoopOperand;


enum class Data { Wide, Tiny, ZeroChunk, Alternating };

struct Case {
    CoopOperand operand;
    uint32_t sequences, stateBlocks, blocks;  // blocks packed: stateBlocks (causal) or 1 (full)
    uint32_t features, chunk, dv, columns;
    Data data = Data::Wide;
    bool walk = false;  // WALK = 1: the states are H_l, the records those of the prefix Z_l
};

uint32_t stateStride(const Case& c) { return (c.dv + 1 + 3) / 4 * 4; }
uint32_t chunks(const Case& c) { return (c.features + c.chunk - 1) / c.chunk; }

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
    const Case& c = info.param;
    return std::string(c.operand == CoopOperand::BF16 ? "bf16" : "f16") + "_s" + std::to_string(c.sequences) + "_t" +
           std::to_string(c.stateBlocks) + (c.blocks == c.stateBlocks ? "_causal" : "_full") + "_F" + std::to_string(c.features) +
           "_chunk" + std::to_string(c.chunk) + "_dv" + std::to_string(c.dv) + "_nc" + std::to_string(c.columns) +
           (c.data == Data::Tiny ? "_tiny" : c.data == Data::ZeroChunk ? "_zerochunk" : c.data == Data::Alternating ? "_alternating" : "") +
           (c.walk ? "_walk" : "");
}

void PrintTo(const Case& c, std::ostream* os) {
    *os << caseName(::testing::TestParamInfo<Case>(c, 0));
}

uint32_t bitsOf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float fromBits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// float32 -> float16, round to nearest even, with subnormals, overflow to infinity and NaN.
uint16_t toHalf(float f) {
    const uint32_t u = bitsOf(f);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) return uint16_t(sign | 0x7C00u | (a > 0x7F800000u ? 0x200u : 0u));
    if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // >= 65520: rounds to infinity
    if (a >= 0x38800000u) {                                   // >= 2^-14: normal
        uint32_t r = a - 0x38000000u;                         // exponent bias 127 -> 15
        r += 0xFFFu + ((r >> 13) & 1u);
        return uint16_t(sign | (r >> 13));
    }
    const uint32_t e = a >> 23;
    if (e < 102) return uint16_t(sign);  // below 2^-25: zero
    // Subnormal: a multiple of 2^-24; the value is m 2^(e - 150), m 24 bits.
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u, shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal: right
    return uint16_t(sign | q);
}

// z_operands.comp's bfloat16 packing (nearest even on the bits; no NaN reaches it here).
uint16_t toBf16(float f) {
    const uint32_t u = bitsOf(f);
    return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// operands.glsl, operand_scale.
float operandScale(float x) {
    if (!(x > 0.0f)) return 1.0f;
    int e = 0;
    std::frexp(x, &e);
    return std::ldexp(1.0f, std::clamp(14 - e, -60, 60));
}

// operands.glsl, cm_split_high.
float splitHigh(float v, CoopOperand op) {
    const uint32_t u = bitsOf(v);
    if ((u & 0x7F800000u) == 0x7F800000u) return v;
    if (op == CoopOperand::F16) {
        if ((u & 0x7F800000u) < (113u << 23)) return 0.0f;
        return fromBits((u + 0x1000u) & 0xFFFFE000u);
    }
    return fromBits((u + 0x8000u) & 0xFFFF0000u);
}

// A random state value: sign x 2^[emin, emax] x [1, 2) with a random 23-bit fraction, one in
// eight of them with the low bits on float16's split tie (0x1000 of 13), one in eight on
// bfloat16's (0x8000 of 16), one in eight exact in float16 (lo = 0).
float randomValue(std::mt19937_64& rng, int emin, int emax) {
    const int e = std::uniform_int_distribution<int>(emin, emax)(rng);
    uint32_t frac = uint32_t(rng()) & 0x7FFFFFu;
    switch (rng() % 8) {
    case 0: frac = (frac & ~0x1FFFu) | 0x1000u; break;
    case 1: frac = (frac & ~0xFFFFu) | 0x8000u; break;
    case 2: frac &= ~0x1FFFu; break;
    default: break;
    }
    const float m = fromBits(0x3F800000u | frac);  // [1, 2)
    return (rng() & 1u ? -1.0f : 1.0f) * std::ldexp(m, e);
}

// The walking form's input, its exclusive prefix: Z_0 = 0, Z_{l+1} = Z_l + H_l in float32, in that
// order (the kernel's), every column of the state rows (the padding's sums are never read).
std::vector<float> exclusivePrefix(const Case& c, const std::vector<float>& h) {
    const size_t rowFloats = size_t(c.features) * stateStride(c);
    std::vector<float> z(h.size(), 0.0f);
    for (uint32_t s = 0; s < c.sequences; ++s)
        for (uint32_t l = 1; l < c.stateBlocks; ++l) {
            const size_t at = (size_t(s) * c.stateBlocks + l) * rowFloats, before = at - rowFloats;
            for (size_t i = 0; i < rowFloats; ++i) z[at + i] = z[before + i] + h[before + i];
        }
    return z;
}

// The expected records, as 16-bit slots ([sequence][block][chunk], plan.record uvec4 = 8 slots each).
std::vector<uint16_t> expected(const Case& c, const std::vector<float>& states, uint32_t record) {
    const uint32_t stride = stateStride(c), nChunks = chunks(c), colSlots = c.chunk, part = c.chunk * c.columns / 8;
    std::vector<uint16_t> out(size_t(c.sequences) * c.blocks * nChunks * record * 8, 0);
    auto encode = [&](float v) { return c.operand == CoopOperand::F16 ? toHalf(v) : toBf16(v); };
    for (uint32_t s = 0; s < c.sequences; ++s)
        for (uint32_t l = 0; l < c.blocks; ++l)
            for (uint32_t k = 0; k < nChunks; ++k) {
                const uint32_t f0 = k * c.chunk, flen = std::min(c.chunk, c.features - f0);
                const float* z = states.data() + ((size_t(s) * c.stateBlocks + l) * c.features + f0) * stride;
                float zMax = 0.0f;
                for (uint32_t f = 0; f < flen; ++f)
                    for (uint32_t col = 0; col <= c.dv; ++col) zMax = std::max(zMax, std::fabs(z[size_t(f) * stride + col]));
                const float scale = operandScale(zMax);
                uint16_t* rec = out.data() + ((size_t(s) * c.blocks + l) * nChunks + k) * record * 8;
                const uint32_t sb = bitsOf(scale);
                rec[0] = uint16_t(sb & 0xFFFFu);
                rec[1] = uint16_t(sb >> 16);  // the other three words stay zero
                for (uint32_t f = 0; f < c.chunk; ++f)
                    for (uint32_t col = 0; col < c.columns; ++col) {
                        const float x = f < flen && col <= c.dv ? z[size_t(f) * stride + col] * scale : 0.0f;
                        const float hi = splitHigh(x, c.operand);
                        const float lo = x - hi;
                        rec[8 * (1 + col * colSlots / 8) + f] = encode(hi);  // B column-major
                        rec[8 * (1 + part + col * colSlots / 8) + f] = encode(lo);
                    }
            }
    return out;
}

// The shared context of the test support (validation on; a validation message fails the test).
class ZOperands : public psk::test::ContextTest, public ::testing::WithParamInterface<Case> {};

// The converter the reference relies on, at its edges.
TEST(ZOperandsReference, HalfConversion) {
    EXPECT_EQ(toHalf(1.0f), 0x3C00);
    EXPECT_EQ(toHalf(-2.0f), 0xC000);
    EXPECT_EQ(toHalf(65504.0f), 0x7BFF);
    EXPECT_EQ(toHalf(65519.996f), 0x7BFF);
    EXPECT_EQ(toHalf(65520.0f), 0x7C00);
    EXPECT_EQ(toHalf(std::ldexp(1.0f, -14)), 0x0400);
    EXPECT_EQ(toHalf(std::ldexp(1.0f, -24)), 0x0001);
    EXPECT_EQ(toHalf(std::ldexp(1.0f, -25)), 0x0000);                 // tie to even: 0
    EXPECT_EQ(toHalf(std::ldexp(1.5f, -25)), 0x0001);                 // above the tie
    EXPECT_EQ(toHalf(std::ldexp(3.0f, -25)), 0x0002);                 // 1.5 ulp: tie to even 2
    EXPECT_EQ(toHalf(std::ldexp(5.0f, -25)), 0x0002);                 // 2.5 ulp: tie to even 2
    EXPECT_EQ(toHalf(std::ldexp(1023.5f, -24)), 0x0400);             // carries into the smallest normal
    EXPECT_EQ(toHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);          // tie to even
    EXPECT_EQ(toHalf(1.0f + std::ldexp(3.0f, -11)), 0x3C02);          // tie to even, upwards
    EXPECT_EQ(toHalf(-std::ldexp(1.0f, -30)), 0x8000);
    EXPECT_EQ(toHalf(std::numeric_limits<float>::infinity()), 0x7C00);
}

TEST_P(ZOperands, MatchesReferenceExactly) {
    const Case c = GetParam();
    const uint32_t stride = stateStride(c), nChunks = chunks(c);
    const float forbidden = -1e30f;  // what the kernel must never read

    // The states: [sequence][stateBlocks][features][stride]; `forbidden` in columns past dv and in
    // the state blocks a full packing must not read.
    std::mt19937_64 rng(uint64_t(c.sequences) * 1000003u + c.stateBlocks * 7919u + c.blocks * 131u + c.features * 17u +
                        c.chunk * 5u + c.dv * 3u + c.columns + 100000u * unsigned(c.operand) + 1000u * unsigned(c.data));
    const size_t count = size_t(c.sequences) * c.stateBlocks * c.features * stride;
    std::vector<float> states(count, forbidden);
    for (uint32_t s = 0; s < c.sequences; ++s)
        for (uint32_t l = 0; l < c.blocks; ++l)
            for (uint32_t f = 0; f < c.features; ++f)
                for (uint32_t col = 0; col <= c.dv; ++col)
                    states[((size_t(s) * c.stateBlocks + l) * c.features + f) * stride + col] =
                        c.data == Data::Tiny ? randomValue(rng, -100, -60) : randomValue(rng, -20, 30);
    if (c.data == Data::Alternating) {
        // Odd blocks cancel the block before them (but for a term of at most 1, mostly lost to the
        // rounding of 2^30): the prefix the walk packs swings between ~2^30 and ~0 block by block,
        // and so does each record's scale, so that a maximum kept from an earlier block (a shared
        // word reset out of turn, or never) shows.
        for (uint32_t s = 0; s < c.sequences; ++s)
            for (uint32_t l = 0; l < c.blocks; ++l)
                for (uint32_t f = 0; f < c.features; ++f)
                    for (uint32_t col = 0; col <= c.dv; ++col) {
                        float& x = states[((size_t(s) * c.stateBlocks + l) * c.features + f) * stride + col];
                        x = l % 2 == 0 ? std::ldexp(randomValue(rng, 0, 0), 30)
                                       : -states[((size_t(s) * c.stateBlocks + l - 1) * c.features + f) * stride + col] +
                                             randomValue(rng, -2, 0);
                    }
    }
    if (c.data == Data::ZeroChunk) {  // sequence 0, block 0, last chunk (partial when chunk does not divide F)
        for (uint32_t f = (nChunks - 1) * c.chunk; f < c.features; ++f)
            for (uint32_t col = 0; col <= c.dv; ++col) states[size_t(f) * stride + col] = 0.0f;
    }

    const psk::ZOperandsPlan plan = psk::planZOperands(c.operand, c.dv, stride, c.chunk, c.columns,
                                                       ctx->caps().limits().maxComputeWorkGroupInvocations, c.walk);
    ASSERT_EQ(plan.walkKernel.empty(), !c.walk);
    ASSERT_EQ(plan.chunk, c.chunk);
    ASSERT_EQ(plan.record, 1 + 2 * c.chunk * c.columns / 8);
    const uint64_t outBytes = psk::zOperandsBytes(plan, c.features, c.sequences, c.blocks);
    ASSERT_EQ(outBytes, uint64_t(c.sequences) * c.blocks * nChunks * plan.record * 16);

    // Both regions sit at an offset inside their buffers: `forbidden` around the states, sentinel words
    // around the records.
    const VkDeviceSize offsetBytes = std::max<VkDeviceSize>(256, ctx->caps().limits().minStorageBufferOffsetAlignment);
    const size_t pad = offsetBytes / 4;
    const VkBufferUsageFlags usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    psk::Buffer statesBuffer(ctx->allocator(), (count + 2 * pad) * 4, usage, psk::MemoryUsage::HostReadback);
    ASSERT_NE(statesBuffer.mapped(), nullptr);
    float* statesMapped = reinterpret_cast<float*>(statesBuffer.mapped());
    std::fill(statesMapped, statesMapped + count + 2 * pad, forbidden);
    std::memcpy(statesMapped + pad, states.data(), count * 4);

    const size_t outWords = outBytes / 4;
    const uint32_t sentinel = 0xA5C3E1F7u;
    psk::Buffer outBuffer(ctx->allocator(), (outWords + 2 * pad) * 4, usage, psk::MemoryUsage::HostReadback);
    ASSERT_NE(outBuffer.mapped(), nullptr);
    uint32_t* outMapped = reinterpret_cast<uint32_t*>(outBuffer.mapped());
    std::fill(outMapped, outMapped + outWords + 2 * pad, sentinel);

    const psk::KernelPipeline pipeline = psk::kernelPipeline(ctx->pipelines(), c.walk ? plan.walkKernel : plan.kernel);
    ctx->execute([&](psk::Recorder& rec) {
        const psk::BufferRange in{statesBuffer.handle(), offsetBytes, count * 4}, out{outBuffer.handle(), offsetBytes, outBytes};
        if (c.walk)
            psk::recordZOperandsWalk(rec, pipeline, plan, in, out, c.sequences, c.stateBlocks, c.features);
        else
            psk::recordZOperands(rec, pipeline, plan, in, out, c.sequences, c.stateBlocks, c.blocks, c.features);
    });

    // The walk packs the prefix of what it read; every other record is of the states as given.
    const std::vector<uint16_t> want = expected(c, c.walk ? exclusivePrefix(c, states) : states, plan.record);
    ASSERT_EQ(want.size() * 2, outBytes);
    std::vector<uint16_t> got(want.size());
    std::memcpy(got.data(), outMapped + pad, outBytes);  // little-endian: operand 2j in the low half of word j

    const size_t recordSlots = size_t(plan.record) * 8, part = size_t(c.chunk) * c.columns;
    size_t wrong = 0, firstWrong = 0, loNonZero = 0, hiNonZero = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (got[i] != want[i] && wrong++ == 0) firstWrong = i;
        const size_t slot = i % recordSlots;
        if (slot >= 8 && slot < 8 + part) hiNonZero += want[i] != 0;
        if (slot >= 8 + part) loNonZero += want[i] != 0;
    }
    ASSERT_GT(hiNonZero, 0u);
    ASSERT_GT(loNonZero, 0u);  // a kernel writing lo = 0 must fail
    auto wantScale = [&](size_t r) { return uint32_t(want[r * recordSlots]) | uint32_t(want[r * recordSlots + 1]) << 16; };
    // The planted data's records: block 0's (walk: block 1's, Z_1 = H_0; block 0's are Z_0 = 0).
    const size_t planted = c.walk ? nChunks : 0;
    if (c.data == Data::ZeroChunk) ASSERT_EQ(wantScale(planted + nChunks - 1), 0x3F800000u);  // the zero chunk's scale: 1
    if (c.data == Data::Tiny) ASSERT_EQ(wantScale(planted), bitsOf(std::ldexp(1.0f, 60)));  // the clamp
    if (c.walk)
        for (size_t i = 0; i < recordSlots * nChunks; ++i)  // sequence 0's Z_0: scale 1, operands 0
            ASSERT_EQ(want[i], i % recordSlots == 1 ? 0x3F80 : 0) << "slot " << i;
    if (wrong) {
        const size_t i = firstWrong, r = i / recordSlots, slot = i % recordSlots;
        std::ostringstream where;
        where << "sequence " << r / (size_t(c.blocks) * nChunks) << ", block " << r / nChunks % c.blocks << ", chunk "
              << r % nChunks;
        if (slot < 8) {
            where << ", header slot " << slot;
        } else {
            const bool lo = slot >= 8 + part;
            const size_t e = slot - 8 - (lo ? part : 0);
            const size_t col = e / c.chunk, row = e % c.chunk;  // B column-major
            const size_t f = size_t(r % nChunks) * c.chunk + row;
            where << ", row " << row << " (feature " << f << "), column " << col << ", " << (lo ? "lo" : "hi");
            if (f < c.features && col <= c.dv) {
                const size_t z = ((size_t(r / (size_t(c.blocks) * nChunks)) * c.stateBlocks + r / nChunks % c.blocks) *
                                      c.features + f) * stride + col;
                char buf[64];
                std::snprintf(buf, sizeof buf, "%a", double(c.walk ? exclusivePrefix(c, states)[z] : states[z]));
                where << " (Z = " << buf << ")";
            }
        }
        char gw[64];
        std::snprintf(gw, sizeof gw, ": got 0x%04x, want 0x%04x", got[i], want[i]);
        ADD_FAILURE() << wrong << " of " << want.size() << " 16-bit slots differ; the first at " << where.str() << gw;
    }
    for (size_t i = 0; i < pad; ++i) {
        ASSERT_EQ(outMapped[i], sentinel) << "write before the records, " << pad - i << " words ahead";
        ASSERT_EQ(outMapped[pad + outWords + i], sentinel) << "write after the records, " << i << " words past";
    }
}

// Columns: the output's 16-column fragments over dv + 1 (32 for dv = 24, 80 for 64) and the
// 8-column granularity (8 for dv = 7, state rows of 8 floats, no padding). Chunks: 136 = 4 x 32 + 8,
// 10 < 16, 64 = 64.
INSTANTIATE_TEST_SUITE_P(
    Shapes, ZOperands,
    ::testing::Values(
        Case{CoopOperand::F16, 1, 1, 1, 136, 32, 24, 32}, Case{CoopOperand::BF16, 1, 1, 1, 136, 32, 24, 32},
        Case{CoopOperand::F16, 2, 2, 2, 136, 32, 64, 80}, Case{CoopOperand::BF16, 2, 2, 2, 136, 32, 64, 80},
        Case{CoopOperand::F16, 3, 5, 5, 10, 16, 24, 32}, Case{CoopOperand::BF16, 3, 5, 5, 10, 16, 24, 32},
        Case{CoopOperand::F16, 2, 5, 1, 64, 64, 64, 80}, Case{CoopOperand::BF16, 2, 5, 1, 64, 64, 64, 80},
        Case{CoopOperand::F16, 2, 5, 1, 136, 32, 24, 32}, Case{CoopOperand::BF16, 3, 2, 1, 136, 32, 64, 80},
        Case{CoopOperand::F16, 2, 2, 2, 10, 16, 7, 8}, Case{CoopOperand::BF16, 2, 2, 2, 10, 16, 7, 8},
        Case{CoopOperand::F16, 1, 5, 5, 136, 32, 64, 80, Data::ZeroChunk},
        Case{CoopOperand::BF16, 2, 2, 2, 136, 32, 24, 32, Data::ZeroChunk},
        Case{CoopOperand::F16, 2, 1, 1, 64, 64, 24, 32, Data::Tiny}, Case{CoopOperand::BF16, 1, 2, 2, 136, 32, 64, 80, Data::Tiny}),
    caseName);

// The walking form (WALK = 1): the states are H_l and the records those of their exclusive prefix,
// summed in block order. Blocks 7 and 9 cycle the kernel's three shared maxima more than twice (a
// maximum reset out of turn mixes two blocks' scales); block 0's records are Z_0 = 0 (scale 1, all
// operands zero), the zero chunk keeps Z_1's last chunk at zero; one sequence or several, a last
// chunk of 8 features, 16-column fragments over dv + 1 and the 8-column granularity.
INSTANTIATE_TEST_SUITE_P(
    Walk, ZOperands,
    ::testing::Values(Case{CoopOperand::F16, 1, 7, 7, 136, 32, 64, 80, Data::Wide, true},
                      Case{CoopOperand::BF16, 2, 9, 9, 136, 32, 24, 32, Data::Wide, true},
                      Case{CoopOperand::F16, 3, 5, 5, 10, 16, 7, 8, Data::Wide, true},
                      Case{CoopOperand::F16, 2, 4, 4, 64, 64, 64, 80, Data::Wide, true},
                      Case{CoopOperand::BF16, 1, 7, 7, 136, 32, 64, 80, Data::ZeroChunk, true},
                      Case{CoopOperand::F16, 2, 3, 3, 136, 32, 64, 80, Data::Tiny, true},
                      Case{CoopOperand::F16, 2, 9, 9, 136, 32, 64, 80, Data::Alternating, true},
                      Case{CoopOperand::BF16, 1, 8, 8, 64, 64, 24, 32, Data::Alternating, true}),
    caseName);

}  // namespace
