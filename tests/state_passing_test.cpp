// State passing (docs/DECODING.md, "State passing"): a forward call with a decode state continues
// its sequences and leaves their final state in it. Chunked forwards (chunk boundaries on and off
// block boundaries, single tokens, chunks shorter than a block), forwards then decode steps, steps
// then forwards, and a serialize/restore in between must all give the rows of one causal forward
// over the whole sequence; the recorded form (pskCmdAttentionForward on an adopted device) must
// equal the host form; every error must leave the state as it was.
//
// Metric: relativeMaxError = max |chunked - whole| / max |whole| over all rows of a sequence, both
// float32 from the library (the same terms summed in another order): kDecodeVsForward (1e-5). The
// many-block case is also held to the float64 reference with the conformance threshold
// (reference/conformance_cases.hpp).
#include <polysketch/polysketch_vulkan.h>
#include "kernels/kernel_pipeline.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "decode/decode_blob.hpp"  // internals: the blob's checksum, to edit its positions
#include "forward/block_scan.hpp"  // internals: the scan's initial prefix on its own
#include "decode/softmax_decoder.hpp"  // internals: the tiling of a forward continuing the cache
#include "forward/attention.hpp"
#include "forward/tiled_forward.hpp"
#include "vk/context.hpp"
#include "vk/memory.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/sketch_fixtures.hpp"
#include "sketch/sketch_weights.hpp"
#include "support/app_vulkan.hpp"
#include "support/handles.hpp"
#include "support/host_arrays.hpp"
#include "support/kernel_paths.hpp"
#include "support/scoped_env.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;
using psk::test::relativeMaxError;
using psk::test::setHostArrays;

constexpr double kTolerance = psk::conformance::kDecodeVsForward;

struct Spec {
    PskAttentionKind kind = PSK_ATTENTION_KIND_POLYSKETCH;
    bool localExact = false;
    uint32_t degree = 4, r = 8, b = 16, h = 16, dv = 16, Hq = 4, Hkv = 2;
    PskLayout layout = PSK_LAYOUT_BHND;
    bool causal = true;
};

using Attention = psk::test::Attention;
using State = psk::test::DecodeState;

Attention makeAttention(PskContext ctx, const Spec& s, uint64_t sketchSeed = 7) {
    PskAttentionCreateInfo info{};
    info.kind = s.kind;
    info.flags = (s.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (s.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    info.degree = s.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0 : s.degree;
    info.scale = s.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0.0f : 1.0f / std::sqrt(float(s.h));
    info.numQueryHeads = s.Hq;
    info.numKeyValueHeads = s.Hkv;
    info.headDim = s.h;
    info.valueDim = s.dv;
    info.layout = s.layout;
    if (s.kind == PSK_ATTENTION_KIND_POLYSKETCH) {
        info.sketchSize = s.r;
        info.blockSize = s.b;
        info.seed = sketchSeed;
    }
    PskAttention a = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &a), PSK_SUCCESS);
    return Attention(a);
}

State makeState(PskAttention a, uint32_t B, uint32_t capacity = 0) {
    PskDecodeStateCreateInfo info{};
    info.batchSize = B;
    info.capacity = capacity;
    PskDecodeState s = nullptr;
    EXPECT_EQ(pskCreateDecodeState(a, &info, &s), PSK_SUCCESS);
    return State(s);
}

/** B sequences of N random tokens, q, k, v kept as [B][H][N][d]; out rows gathered the same way. */
struct Tokens {
    Spec s;
    uint32_t B, N;
    std::vector<float> q, k, v;
    Tokens(const Spec& spec, uint32_t batch, uint32_t tokens, uint64_t seed) : s(spec), B(batch), N(tokens) {
        q = psk::test::randomNormal(size_t(B) * s.Hq * N * s.h, seed);
        k = psk::test::randomNormal(size_t(B) * s.Hkv * N * s.h, seed + 1);
        v = psk::test::randomNormal(size_t(B) * s.Hkv * N * s.dv, seed + 2);
    }
    /** Rows [t0, t0 + n) of sequences [b0, b0 + count) of x, in the attention's layout. */
    std::vector<float> slice(const std::vector<float>& x, uint32_t H, uint32_t d, uint32_t b0, uint32_t count, uint32_t t0,
                             uint32_t n) const {
        std::vector<float> y(size_t(count) * H * n * d);
        for (uint32_t b = 0; b < count; ++b)
            for (uint32_t hd = 0; hd < H; ++hd)
                for (uint32_t t = 0; t < n; ++t) {
                    const size_t dst = s.layout == PSK_LAYOUT_BNHD ? ((size_t(b) * n + t) * H + hd) * d : ((size_t(b) * H + hd) * n + t) * d;
                    std::memcpy(&y[dst], &x[((size_t(b0 + b) * H + hd) * N + t0 + t) * d], d * 4);
                }
        return y;
    }
    /** The inverse of slice for out: rows of `y` (count sequences of n rows, layout) into all [B][Hq][N][dv]. */
    void scatter(const std::vector<float>& y, std::vector<float>& all, uint32_t b0, uint32_t count, uint32_t t0, uint32_t n) const {
        all.resize(size_t(B) * s.Hq * N * s.dv, NAN);
        const uint32_t H = s.Hq, d = s.dv;
        for (uint32_t b = 0; b < count; ++b)
            for (uint32_t hd = 0; hd < H; ++hd)
                for (uint32_t t = 0; t < n; ++t) {
                    const size_t src = s.layout == PSK_LAYOUT_BNHD ? ((size_t(b) * n + t) * H + hd) * d : ((size_t(b) * H + hd) * n + t) * d;
                    std::memcpy(&all[((size_t(b0 + b) * H + hd) * N + t0 + t) * d], &y[src], d * 4);
                }
    }
    /** Sequence b's rows of all [B][Hq][N][dv]. */
    std::vector<float> sequence(const std::vector<float>& all, uint32_t b) const {
        const size_t per = size_t(s.Hq) * N * s.dv;
        return std::vector<float>(all.begin() + b * per, all.begin() + (b + 1) * per);
    }
};

/**
 * One forward over rows [t0, t0 + n) of sequences [b0, b0 + count), with `state` (NULL: none)
 * continuing sequences `first`..; its rows go into `all` (when it succeeds).
 */
PskResult forward(PskAttention a, const Tokens& x, uint32_t b0, uint32_t count, uint32_t t0, uint32_t n, PskDecodeState state,
                  uint32_t first, std::vector<float>& all) {
    const Spec& s = x.s;
    const std::vector<float> q = x.slice(x.q, s.Hq, s.h, b0, count, t0, n), k = x.slice(x.k, s.Hkv, s.h, b0, count, t0, n),
                             v = x.slice(x.v, s.Hkv, s.dv, b0, count, t0, n);
    std::vector<float> out(size_t(count) * s.Hq * n * s.dv, NAN);
    PskForwardHostInfo info{};
    info.batchSize = count;
    info.seqLen = n;
    setHostArrays(info, q, k, v, &out);
    info.state = state;
    info.stateFirstSequence = first;
    const PskResult r = pskAttentionForwardHost(a, &info);
    if (r == PSK_SUCCESS) x.scatter(out, all, b0, count, t0, n);
    return r;
}

/** One forward over the whole sequences, no state. */
std::vector<float> wholeForward(PskAttention a, const Tokens& x) {
    std::vector<float> all;
    EXPECT_EQ(forward(a, x, 0, x.B, 0, x.N, nullptr, 0, all), PSK_SUCCESS);
    return all;
}

/** One decode step of every sequence of the state at token t (all at position t); its rows into `all`. */
void step(PskDecodeState state, const Tokens& x, uint32_t t, std::vector<float>& all) {
    const Spec& s = x.s;
    auto row = [&](const std::vector<float>& src, uint32_t H, uint32_t d) {
        std::vector<float> r(size_t(x.B) * H * d);
        for (uint32_t b = 0; b < x.B; ++b)
            for (uint32_t hd = 0; hd < H; ++hd) std::memcpy(&r[(size_t(b) * H + hd) * d], &src[((size_t(b) * H + hd) * x.N + t) * d], d * 4);
        return r;
    };
    const std::vector<float> q = row(x.q, s.Hq, s.h), k = row(x.k, s.Hkv, s.h), v = row(x.v, s.Hkv, s.dv);
    std::vector<float> out(size_t(x.B) * s.Hq * s.dv, NAN);
    PskDecodeStepInfo info{};
    setHostArrays(info, q, k, v, &out);
    ASSERT_EQ(pskDecodeStepHost(state, &info), PSK_SUCCESS);
    all.resize(size_t(x.B) * s.Hq * x.N * s.dv, NAN);
    for (uint32_t b = 0; b < x.B; ++b)
        for (uint32_t hd = 0; hd < s.Hq; ++hd)
            std::memcpy(&all[((size_t(b) * s.Hq + hd) * x.N + t) * s.dv], &out[(size_t(b) * s.Hq + hd) * s.dv], s.dv * 4);
}

/** The largest relative error of any sequence of `got` against `want`. */
double worstError(const Tokens& x, const std::vector<float>& got, const std::vector<float>& want) {
    double worst = 0;
    for (uint32_t b = 0; b < x.B; ++b) {
        const std::vector<float> w = x.sequence(want, b);
        worst = std::max(worst, relativeMaxError(x.sequence(got, b), std::vector<double>(w.begin(), w.end())));
    }
    return worst;
}

std::vector<uint8_t> serialize(PskDecodeState s) {
    size_t size = 0;
    EXPECT_EQ(pskSerializeDecodeState(s, nullptr, &size), PSK_SUCCESS);
    std::vector<uint8_t> blob(size);
    EXPECT_EQ(pskSerializeDecodeState(s, blob.data(), &size), PSK_SUCCESS);
    return blob;
}

uint64_t position(PskDecodeState s, uint32_t sequence) {
    uint64_t p = ~0ull;
    EXPECT_EQ(pskGetDecodePosition(s, sequence, &p), PSK_SUCCESS);
    return p;
}

// ---- the scan's initial prefix (block_scan.comp bindings 1 and 2) and tail (binding 3), both column paths ----

TEST_F(ContextTest, ScanStartsFromAnInitialPrefix) {
    // Z_l = z + sum_{j<l} H'_j with H'_0 = H_0 + h (addH) in the first `row` columns of each state
    // row of `stride` floats; z and h hold [sequence][F][row] from element `base`. The tail, in the
    // states' rows: Z_{t-1} + H'_{t-1} (Total) or Z_{t-1} then H'_{t-1} (Split), what a
    // decode state keeps after a forward. Multiples of 1/8: exact in any order, so the result must
    // match exactly.
    struct Case {
        uint32_t blocks, F, stride, row;
        bool addH;
    };
    using Tail = psk::ScanInitial::Tail;
    const Case cases[] = {{1, 3, 8, 5, true}, {2, 3, 8, 5, false}, {5, 3, 8, 8, true}, {17, 2, 8, 5, true},
                          {1, 3, 5, 4, true}, {3, 3, 5, 4, true},  {17, 2, 5, 5, false}, {16, 2, 8, 5, true},
                          {32, 2, 5, 4, true}, {33, 2, 8, 8, false}};
    for (const Case& c : cases)
    for (const Tail mode : {Tail::None, Tail::Total, Tail::Split}) {
        const uint32_t sequences = 3, elems = c.F * c.stride, base = 7;
        SCOPED_TRACE("blocks " + std::to_string(c.blocks) + ", stride " + std::to_string(c.stride) + (elems % 4 ? " (scalar)" : " (vec4)") +
                     ", tail " + std::to_string(int(mode)));
        std::mt19937_64 rng(c.blocks * 131 + c.stride);
        std::uniform_int_distribution<int> eighths(-64, 64);
        const size_t count = size_t(sequences) * c.blocks * elems, initCount = base + size_t(sequences) * c.F * c.row;
        std::vector<float> H(count), z(initCount), h(initCount);
        for (float& x : H) x = float(eighths(rng)) / 8.0f;
        for (float& x : z) x = float(eighths(rng)) / 8.0f;
        for (float& x : h) x = float(eighths(rng)) / 8.0f;
        const VkBufferUsageFlags usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        psk::Buffer states(ctx->allocator(), count * 4, usage, psk::MemoryUsage::HostReadback),
            zBuf(ctx->allocator(), initCount * 4, usage, psk::MemoryUsage::HostUpload),
            hBuf(ctx->allocator(), initCount * 4, usage, psk::MemoryUsage::HostUpload);
        // The tail starts as a value no sum takes, so that an entry left unwritten shows.
        const size_t part = size_t(sequences) * elems;
        const float unwritten = 1e30f;
        std::vector<float> tailInit(2 * part, unwritten);
        psk::Buffer tailBuf(ctx->allocator(), 2 * part * 4, usage, psk::MemoryUsage::HostReadback);
        ASSERT_TRUE(states.mapped() && zBuf.mapped() && hBuf.mapped() && tailBuf.mapped());
        std::memcpy(tailBuf.mapped(), tailInit.data(), 2 * part * 4);
        std::memcpy(states.mapped(), H.data(), count * 4);
        std::memcpy(zBuf.mapped(), z.data(), initCount * 4);
        std::memcpy(hBuf.mapped(), h.data(), initCount * 4);
        psk::ScanInitial init;
        init.z = {zBuf.handle(), 0, zBuf.size()};
        init.h = {hBuf.handle(), 0, hBuf.size()};
        init.row = c.row;
        init.stride = c.stride;
        init.base = base;
        init.addH = c.addH;
        init.tailMode = mode;
        init.tail = {tailBuf.handle(), 0, tailBuf.size()};
        const psk::BlockScanPlan plan = psk::planBlockScan(c.blocks, ctx->caps());
        VkPipeline pipeline = psk::kernelPipeline(ctx->pipelines(), plan.kernel);
        ctx->execute([&](psk::Recorder& rec) {
            psk::recordBlockScan(rec, pipeline, plan, {states.handle(), 0, count * 4}, sequences, c.blocks, elems, &init);
        });
        const float* got = reinterpret_cast<const float*>(states.mapped());
        const float* tail = reinterpret_cast<const float*>(tailBuf.mapped());
        size_t wrong = 0, wrongTail = 0;
        for (uint32_t sq = 0; sq < sequences; ++sq)
            for (uint32_t e = 0; e < elems; ++e) {
                const uint32_t f = e / c.stride, col = e % c.stride;
                const size_t i = base + (size_t(sq) * c.F + f) * c.row + col;
                double carry = col < c.row ? z[i] : 0.0, own = 0.0;
                for (uint32_t l = 0; l < c.blocks; ++l) {
                    const size_t at = (size_t(sq) * c.blocks + l) * elems + e;
                    wrong += double(got[at]) != carry;
                    own = H[at] + (l == 0 && c.addH && col < c.row ? h[i] : 0.0);
                    if (l + 1 < c.blocks) carry += own;
                }
                if (col >= c.row) continue;  // padding columns: written, but not part of a state
                const size_t t = size_t(sq) * elems + e;
                const double want0 = mode == Tail::None ? unwritten : mode == Tail::Total ? carry + own : carry;
                const double want1 = mode == Tail::Split ? own : unwritten;
                wrongTail += double(tail[t]) != want0;
                wrongTail += double(tail[part + t]) != want1;
            }
        EXPECT_EQ(wrong, 0u);
        EXPECT_EQ(wrongTail, 0u);
    }
}

// ---- chunked forwards with the state equal one forward ----

struct ChunkCase {
    const char* name;
    Spec spec;
    std::vector<uint32_t> chunks;
};

Spec local(Spec s = {}) {
    s.localExact = true;
    return s;
}

class ChunksEqualWhole : public ContextTest, public ::testing::WithParamInterface<ChunkCase> {};

TEST_P(ChunksEqualWhole, RowsAndFinalState) {
    const ChunkCase& c = GetParam();
    const Attention a = makeAttention(ctx, c.spec);
    ASSERT_TRUE(a);
    const uint32_t B = 2, N = std::accumulate(c.chunks.begin(), c.chunks.end(), 0u);
    const Tokens x(c.spec, B, N, 100);
    const std::vector<float> whole = wholeForward(a.get(), x);
    const State state = makeState(a.get(), B);
    std::vector<float> chunked;
    uint32_t t0 = 0;
    for (uint32_t n : c.chunks) {
        ASSERT_EQ(forward(a.get(), x, 0, B, t0, n, state.get(), 0, chunked), PSK_SUCCESS) << "chunk at " << t0;
        t0 += n;
        EXPECT_EQ(position(state.get(), 0), t0);
        EXPECT_EQ(position(state.get(), 1), t0);
    }
    const double e = worstError(x, chunked, whole);
    EXPECT_LE(e, kTolerance);
    psk::conformance::printError("state-fwd", PSK_DATA_TYPE_FLOAT32, "-", std::string("chunks_") + c.name, e, kTolerance);

    // The final state is the whole sequence's: a prefill of the whole prompt followed by the same
    // steps as after the chunks gives the same rows (within rounding).
    const Tokens more(c.spec, B, 20, 300);
    const State prefilled = makeState(a.get(), B);
    std::vector<float> unused;
    ASSERT_EQ(forward(a.get(), x, 0, B, 0, N, prefilled.get(), 0, unused), PSK_SUCCESS);
    std::vector<float> afterChunks, afterWhole;
    ASSERT_EQ(forward(a.get(), more, 0, B, 0, 20, state.get(), 0, afterChunks), PSK_SUCCESS);
    ASSERT_EQ(forward(a.get(), more, 0, B, 0, 20, prefilled.get(), 0, afterWhole), PSK_SUCCESS);
    EXPECT_LE(worstError(more, afterChunks, afterWhole), kTolerance) << "the states after the chunks and after one call differ";
}

const ChunkCase kChunkCases[] = {
    {"sketched_aligned", {}, {16, 16, 16}},
    {"sketched_unaligned", {}, {5, 20, 23}},
    {"sketched_single_tokens", {}, {1, 1, 17, 1, 28}},
    {"local_aligned", local(), {16, 16, 16}},
    {"local_unaligned", local(), {5, 20, 23}},
    {"local_single_tokens", local(), {1, 1, 1, 13, 1, 31}},
    {"local_shorter_than_block", local(), {3, 7, 4, 5, 29}},
    {"local_inside_then_many_blocks", local(), {4, 41, 3}},
    {"local_completes_first_block", local(), {10, 6, 32}},
    // A call that starts inside a block and ends on a later block boundary: the state takes the
    // scan's inclusive prefix, with h added to a block that is not the last.
    {"local_inside_to_a_later_boundary", local(), {5, 27, 16, 3}},
    {"sketched_to_a_later_boundary", {}, {5, 27, 16, 3}},
    {"local_degree2", local({PSK_ATTENTION_KIND_POLYSKETCH, false, 2}), {7, 30, 11}},
    {"local_degree8", local({PSK_ATTENTION_KIND_POLYSKETCH, false, 8}), {9, 23, 16}},
    {"local_dv13", local({PSK_ATTENTION_KIND_POLYSKETCH, false, 4, 8, 16, 16, 13}), {5, 20, 23}},
    {"local_bnhd", local({PSK_ATTENTION_KIND_POLYSKETCH, false, 4, 8, 16, 16, 16, 4, 2, PSK_LAYOUT_BNHD}), {5, 20, 23}},
    {"sketched_bnhd", {PSK_ATTENTION_KIND_POLYSKETCH, false, 4, 8, 16, 16, 16, 4, 2, PSK_LAYOUT_BNHD}, {5, 20, 23}},
    {"local_mha_b32", local({PSK_ATTENTION_KIND_POLYSKETCH, false, 4, 8, 32, 16, 16, 2, 2}), {3, 30, 1, 40}},
};

INSTANTIATE_TEST_SUITE_P(Polysketch, ChunksEqualWhole, ::testing::ValuesIn(kChunkCases),
                         [](const ::testing::TestParamInfo<ChunkCase>& info) { return std::string(info.param.name); });

// Many blocks at the default block size: 8269 tokens (33 blocks at b = 256, the last partial) in
// chunks that start and end inside blocks, span many blocks, and end on a block boundary, with the
// library's default configuration (p = 4, r = 32, b = 256) at h = dv = 128, local exact, two query
// heads on one key/value head. The rows equal one forward over all tokens (kTolerance) and the
// float64 reference (the float32 polysketch conformance threshold), on the default (lane-team)
// and the generic kernels; the reference is computed once. The cases above stop at 3 blocks of 16.
TEST_F(ContextTest, ManyBlockChunksMatchOneForwardAndTheReferenceOnEveryPath) {
    Spec s = local();
    s.r = 32;
    s.b = 256;
    s.h = 128;
    s.dv = 128;
    s.Hq = 2;
    s.Hkv = 1;
    const std::string caseName = "state_passing_long_p4_r32_b256_localexact_h128_dv128_Hq2_Hkv1_n8269";
    const uint64_t seed = psk::conformance::caseSeed(caseName);
    const std::vector<uint32_t> chunks{77, 2483, 1536, 4173};  // 77, 2560 (inside block 10), 4096 (a boundary), 8269
    const uint32_t N = std::accumulate(chunks.begin(), chunks.end(), 0u);
    const Tokens x(s, 1, N, seed + 1);

    psk::ref::PolysketchConfig config;
    config.sketch = psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(seed, s.degree, s.h, s.r)));
    config.degree = int(s.degree);
    config.scale = 1.0f / std::sqrt(float(s.h));
    config.causal = true;
    config.localExact = true;
    config.blockSize = int(s.b);
    std::vector<double> want;
    psk::ref::polysketchAttention({1, int(s.Hq), int(s.Hkv), int(N), int(s.h), int(s.dv)}, std::vector<double>(x.q.begin(), x.q.end()),
                                  std::vector<double>(x.k.begin(), x.k.end()), std::vector<double>(x.v.begin(), x.v.end()), config, want);
    const double threshold = psk::conformance::kPolysketchFloat32;

    for (psk::test::KernelPath path : {psk::test::KernelPath::Default, psk::test::KernelPath::Generic}) {
        SCOPED_TRACE(psk::test::kernelPathName(path));
        const psk::test::KernelPathScope scope(path);
        const Attention a = makeAttention(ctx, s, seed);
        ASSERT_TRUE(a);
        size_t planSize = 0;
        ASSERT_EQ(pskGetAttentionPlan(a.get(), nullptr, &planSize), PSK_SUCCESS);
        std::string plan(planSize, '\0');
        ASSERT_EQ(pskGetAttentionPlan(a.get(), plan.data(), &planSize), PSK_SUCCESS);
        // The default path is the lane-team kernels on a CPU driver; a GPU's plan says why it has
        // none (the generic kernels then run on both paths).
        const bool gpu = plan.find("team kernels are for CPU drivers") != std::string::npos;
        EXPECT_EQ(plan.find(" (team)") != std::string::npos, path == psk::test::KernelPath::Default && !gpu) << plan;
        const std::vector<float> whole = wholeForward(a.get(), x);
        const State state = makeState(a.get(), 1);
        std::vector<float> chunked;
        uint32_t t0 = 0;
        for (uint32_t n : chunks) {
            ASSERT_EQ(forward(a.get(), x, 0, 1, t0, n, state.get(), 0, chunked), PSK_SUCCESS) << "chunk at " << t0;
            t0 += n;
        }
        EXPECT_EQ(position(state.get(), 0), N);
        const double eWhole = worstError(x, chunked, whole), eRef = relativeMaxError(chunked, want), eWholeRef = relativeMaxError(whole, want);
        EXPECT_LE(eWhole, kTolerance) << "chunks vs one forward";
        EXPECT_LE(eRef, threshold) << "chunks vs the float64 reference";
        EXPECT_LE(eWholeRef, threshold) << "one forward vs the float64 reference";
        const std::string label = caseName + "@" + psk::test::kernelPathName(path), kernels = psk::test::planImplementations(plan);
        psk::conformance::printError("state-fwd", PSK_DATA_TYPE_FLOAT32, kernels, label, eWhole, kTolerance);
        psk::conformance::printError("state-ref", PSK_DATA_TYPE_FLOAT32, kernels, label, eRef, threshold);
        psk::conformance::printError("polysketch", PSK_DATA_TYPE_FLOAT32, kernels, label + "_whole", eWholeRef, threshold);
    }
}

TEST_F(ContextTest, WithoutTheStateTheRowsDiffer) {
    // The control: the same chunks without a state are fresh sequences, far from the whole forward.
    for (bool localExact : {false, true}) {
        SCOPED_TRACE(localExact ? "local exact" : "sketched");
        Spec s;
        s.localExact = localExact;
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        const Tokens x(s, 2, 48, 100);
        const std::vector<float> whole = wholeForward(a.get(), x);
        std::vector<float> fresh;
        ASSERT_EQ(forward(a.get(), x, 0, 2, 0, 5, nullptr, 0, fresh), PSK_SUCCESS);
        ASSERT_EQ(forward(a.get(), x, 0, 2, 5, 43, nullptr, 0, fresh), PSK_SUCCESS);
        EXPECT_GT(worstError(x, fresh, whole), 1e-2);
    }
}

TEST_F(ContextTest, SomeSequencesOfTheState) {
    // Sequences 1 and 2 of a state of 3 continue; sequence 0, at another position, is untouched.
    for (bool localExact : {false, true}) {
        SCOPED_TRACE(localExact ? "local exact" : "sketched");
        Spec s;
        s.localExact = localExact;
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        const Tokens x(s, 3, 40, 200);
        const std::vector<float> whole = wholeForward(a.get(), x);
        const State state = makeState(a.get(), 3);
        std::vector<float> got;
        ASSERT_EQ(forward(a.get(), x, 0, 1, 0, 9, state.get(), 0, got), PSK_SUCCESS);
        ASSERT_EQ(forward(a.get(), x, 1, 2, 0, 21, state.get(), 1, got), PSK_SUCCESS);
        ASSERT_EQ(forward(a.get(), x, 1, 2, 21, 19, state.get(), 1, got), PSK_SUCCESS);
        ASSERT_EQ(forward(a.get(), x, 0, 1, 9, 31, state.get(), 0, got), PSK_SUCCESS);
        EXPECT_EQ(position(state.get(), 0), 40u);
        EXPECT_EQ(position(state.get(), 1), 40u);
        EXPECT_EQ(position(state.get(), 2), 40u);
        EXPECT_LE(worstError(x, got, whole), kTolerance);
    }
}

// ---- forwards and decode steps interoperate ----

TEST_F(ContextTest, ForwardThenStepsEqualWhole) {
    for (bool localExact : {false, true}) {
        SCOPED_TRACE(localExact ? "local exact" : "sketched");
        Spec s;
        s.localExact = localExact;
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        const Tokens x(s, 2, 48, 400);
        const std::vector<float> whole = wholeForward(a.get(), x);
        const State state = makeState(a.get(), 2);
        std::vector<float> got;
        ASSERT_EQ(forward(a.get(), x, 0, 2, 0, 21, state.get(), 0, got), PSK_SUCCESS);
        for (uint32_t t = 21; t < 48; ++t) step(state.get(), x, t, got);
        const double e = worstError(x, got, whole);
        EXPECT_LE(e, kTolerance);
        psk::conformance::printError("state-fwd", PSK_DATA_TYPE_FLOAT32, "-", localExact ? "forward_then_steps_localexact" : "forward_then_steps_sketched",
                                     e, kTolerance);
    }
}

TEST_F(ContextTest, StepsThenForwardEqualWhole) {
    for (bool localExact : {false, true}) {
        SCOPED_TRACE(localExact ? "local exact" : "sketched");
        Spec s;
        s.localExact = localExact;
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        const Tokens x(s, 2, 56, 500);
        const std::vector<float> whole = wholeForward(a.get(), x);
        const State state = makeState(a.get(), 2);
        std::vector<float> got;
        // A prefill (the decode API's), steps, a forward from inside a block, steps, a forward.
        const std::vector<float> q = x.slice(x.q, s.Hq, s.h, 0, 2, 0, 5), k = x.slice(x.k, s.Hkv, s.h, 0, 2, 0, 5),
                                 v = x.slice(x.v, s.Hkv, s.dv, 0, 2, 0, 5);
        std::vector<float> out(size_t(2) * s.Hq * 5 * s.dv);
        PskDecodePrefillInfo p{};
        p.batchSize = 2;
        p.seqLen = 5;
        setHostArrays(p, q, k, v, &out);
        ASSERT_EQ(pskDecodePrefillHost(state.get(), &p), PSK_SUCCESS);
        x.scatter(out, got, 0, 2, 0, 5);
        for (uint32_t t = 5; t < 11; ++t) step(state.get(), x, t, got);
        ASSERT_EQ(forward(a.get(), x, 0, 2, 11, 20, state.get(), 0, got), PSK_SUCCESS);
        for (uint32_t t = 31; t < 34; ++t) step(state.get(), x, t, got);
        ASSERT_EQ(forward(a.get(), x, 0, 2, 34, 14, state.get(), 0, got), PSK_SUCCESS);  // ends on a block boundary
        for (uint32_t t = 48; t < 56; ++t) step(state.get(), x, t, got);
        const double e = worstError(x, got, whole);
        EXPECT_LE(e, kTolerance);
        psk::conformance::printError("state-fwd", PSK_DATA_TYPE_FLOAT32, "-", localExact ? "steps_and_forwards_localexact" : "steps_and_forwards_sketched",
                                     e, kTolerance);
    }
}

TEST_F(ContextTest, SerializeRestoreBetweenChunks) {
    for (bool localExact : {false, true}) {
        SCOPED_TRACE(localExact ? "local exact" : "sketched");
        Spec s;
        s.localExact = localExact;
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        const Tokens x(s, 2, 48, 600);
        const std::vector<float> whole = wholeForward(a.get(), x);
        const State first = makeState(a.get(), 2);
        std::vector<float> got;
        ASSERT_EQ(forward(a.get(), x, 0, 2, 0, 21, first.get(), 0, got), PSK_SUCCESS);
        const std::vector<uint8_t> blob = serialize(first.get());
        const State second = makeState(a.get(), 2);
        ASSERT_EQ(pskRestoreDecodeState(second.get(), blob.data(), blob.size()), PSK_SUCCESS);
        EXPECT_EQ(position(second.get(), 1), 21u);
        ASSERT_EQ(forward(a.get(), x, 0, 2, 21, 27, second.get(), 0, got), PSK_SUCCESS);
        EXPECT_LE(worstError(x, got, whole), kTolerance);
        // The restored state continues exactly as the original does (bit for bit; rows [0, 21) are NaN in both).
        std::vector<float> fromOriginal;
        ASSERT_EQ(forward(a.get(), x, 0, 2, 21, 27, first.get(), 0, fromOriginal), PSK_SUCCESS);
        ASSERT_EQ(fromOriginal.size(), got.size());
        size_t compared = 0;
        for (size_t i = 0; i < got.size(); ++i)
            if (!std::isnan(fromOriginal[i])) {
                ASSERT_EQ(fromOriginal[i], got[i]) << "element " << i;
                ++compared;
            }
        EXPECT_EQ(compared, size_t(2) * s.Hq * 27 * s.dv);
        EXPECT_EQ(serialize(first.get()), serialize(second.get()));
    }
}

// ---- softmax: a fresh sequence's forward fills the KV cache ----

TEST_F(ContextTest, SoftmaxForwardFillsTheCache) {
    Spec s;
    s.kind = PSK_ATTENTION_KIND_SOFTMAX;
    const Attention a = makeAttention(ctx, s);
    ASSERT_TRUE(a);
    const Tokens x(s, 2, 30, 700);
    const std::vector<float> whole = wholeForward(a.get(), x);
    const State state = makeState(a.get(), 2, 32);
    std::vector<float> got, plain;
    ASSERT_EQ(forward(a.get(), x, 0, 2, 0, 20, state.get(), 0, got), PSK_SUCCESS);
    ASSERT_EQ(forward(a.get(), x, 0, 2, 0, 20, nullptr, 0, plain), PSK_SUCCESS);
    for (uint32_t b = 0; b < 2; ++b) {
        const std::vector<float> g = x.sequence(got, b), p = x.sequence(plain, b);
        for (uint32_t hd = 0; hd < s.Hq; ++hd)
            for (uint32_t i = 0; i < 20 * s.dv; ++i) ASSERT_EQ(g[hd * 30 * s.dv + i], p[hd * 30 * s.dv + i]) << "the forward's own rows";
    }
    EXPECT_EQ(position(state.get(), 0), 20u);
    for (uint32_t t = 20; t < 30; ++t) step(state.get(), x, t, got);
    EXPECT_LE(worstError(x, got, whole), kTolerance);

    // Past the cache's capacity, at position 0 or later: nothing changes.
    psk::test::MessageLog& log = psk::test::sharedLog();
    std::vector<float> unused;
    log.clear();
    const State small = makeState(a.get(), 2, 8);
    EXPECT_EQ(forward(a.get(), x, 0, 2, 0, 9, small.get(), 0, unused), PSK_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(position(small.get(), 0), 0u);
    ASSERT_EQ(forward(a.get(), x, 0, 2, 0, 5, small.get(), 0, unused), PSK_SUCCESS);
    const std::vector<uint8_t> before = serialize(small.get());
    log.clear();
    EXPECT_EQ(forward(a.get(), x, 0, 2, 5, 4, small.get(), 0, unused), PSK_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(log.errors.size(), 1u);
    EXPECT_EQ(position(small.get(), 0), 5u);
    EXPECT_EQ(serialize(small.get()), before);
    log.clear();
}

// ---- softmax: forwards continue the KV cache at any position ----

// A softmax sequence as chunks of forwards with the state (the first at position 0 fills the
// cache; each later one runs its queries over the cache, its own rows included, with the keys
// split across workgroups and merged by attention_combine), then steps: the rows of one forward
// over the whole sequence. Chunks of 1 token, shorter and longer than a workgroup's rows, at
// positions on and off the key tiles; grouped-query heads; both layouts; the keys in 1, 3 and 7
// splits (PSK_SOFTMAX_CACHE_SPLITS; most of 7 splits are empty at the first positions); and the
// cache bound slot by slot, as where it exceeds one binding (PSK_DECODE_SPLIT_CACHE=1).
TEST_F(ContextTest, SoftmaxForwardContinuesTheCache) {
    for (PskLayout layout : {PSK_LAYOUT_BHND, PSK_LAYOUT_BNHD})
        for (const char* splits : {"1", "3", "7", "3 slot by slot"}) {
            SCOPED_TRACE(std::string(layout == PSK_LAYOUT_BNHD ? "BNHD" : "BHND") + ", splits " + splits);
            psk::test::ScopedEnv env("PSK_SOFTMAX_CACHE_SPLITS", std::string(splits).substr(0, 1).c_str());
            psk::test::ScopedEnv slotBySlot("PSK_DECODE_SPLIT_CACHE", std::string(splits).size() > 1 ? "1" : nullptr);
            Spec s;
            s.kind = PSK_ATTENTION_KIND_SOFTMAX;
            s.layout = layout;
            const Attention a = makeAttention(ctx, s);
            ASSERT_TRUE(a);
            const Tokens x(s, 2, 100, 710);
            const std::vector<float> whole = wholeForward(a.get(), x);
            const State state = makeState(a.get(), 2, 128);
            std::vector<float> got;
            uint32_t t = 0;
            for (uint32_t n : {37u, 1u, 5u, 40u}) {
                ASSERT_EQ(forward(a.get(), x, 0, 2, t, n, state.get(), 0, got), PSK_SUCCESS) << "chunk at " << t;
                t += n;
                EXPECT_EQ(position(state.get(), 1), t);
            }
            for (; t < 100; ++t) step(state.get(), x, t, got);
            EXPECT_LE(worstError(x, got, whole), kTolerance);
        }
}

// A chunk after a cache longer than one dispatch's keys (kBaselineKeysPerDispatch, 8192): each
// split's state is carried from one dispatch to the next, the splits merged after.
TEST_F(ContextTest, SoftmaxForwardContinuesALongCache) {
    for (const char* splits : {"1", "2"}) {
        SCOPED_TRACE(std::string("splits ") + splits);
        psk::test::ScopedEnv env("PSK_SOFTMAX_CACHE_SPLITS", splits);
        Spec s;
        s.kind = PSK_ATTENTION_KIND_SOFTMAX;
        s.Hq = s.Hkv = 1;
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        const Tokens x(s, 1, 16500, 720);
        const std::vector<float> whole = wholeForward(a.get(), x);
        const State state = makeState(a.get(), 1, 16500);
        std::vector<float> got;
        ASSERT_EQ(forward(a.get(), x, 0, 1, 0, 16450, state.get(), 0, got), PSK_SUCCESS);
        ASSERT_EQ(forward(a.get(), x, 0, 1, 16450, 50, state.get(), 0, got), PSK_SUCCESS);
        EXPECT_LE(worstError(x, got, whole), kTolerance);
    }
}

// A device's table may name the FP32 FlashAttention-2 kernel's tiling (baselines.fp32_tile: on an
// H200 the model's first tiling sat at the 255-register cap, and a forward continuing the cache runs
// this kernel too); the cache's calls then run the table's tiling, and the table's
// baselines.fp32_rows 1 (the one-row kernel for the attention's own forward, as the H200's table
// has) does not apply to them: that kernel has no split keys. The chunks still equal one forward.
TEST_F(ContextTest, SoftmaxForwardContinuesTheCacheOnTheTablesTiling) {
    psk::test::TempFile table("psk_cache_tiling");
    {
        FILE* f = std::fopen(table.path().c_str(), "w");
        ASSERT_NE(f, nullptr);
        std::fputs("psk-tuning 1\ndevice any\nbaselines.fp32_tile 3\nbaselines.fp32_rows 1\n", f);
        std::fclose(f);
    }
    psk::test::ScopedEnv env("PSK_TUNING_TABLE", table.path().c_str());
    Spec s;
    s.kind = PSK_ATTENTION_KIND_SOFTMAX;
    const Attention a = makeAttention(ctx, s);
    ASSERT_TRUE(a);
    const psk::TuningTable* tuning = a.get()->tuningTable();
    ASSERT_NE(tuning, nullptr);
    const psk::AttentionConfig& c = a.get()->config();
    const auto cache = psk::softmaxCacheSpec(ctx->caps(), c, 100, tuning);
    const auto tuned = psk::tunedFlashFp32Spec(c, ctx->caps(), tuning);
    const auto model = psk::modelFlashFp32Spec(c, ctx->caps());
    ASSERT_TRUE(cache && tuned && model);
    const std::string got = psk::kernel::SpecConstants::of(*cache).describe();
    EXPECT_EQ(got, psk::kernel::SpecConstants::of(*tuned).describe());
    EXPECT_NE(got, psk::kernel::SpecConstants::of(*model).describe()) << "the table's tiling is the model's: this test would prove nothing";
    EXPECT_EQ(psk::kernel::SpecConstants::of(*psk::softmaxCacheSpec(ctx->caps(), c, 100)).describe(),
              psk::kernel::SpecConstants::of(*model).describe());  // without the table, the model's
    const Tokens x(s, 2, 90, 740);
    const std::vector<float> whole = wholeForward(a.get(), x);
    const State state = makeState(a.get(), 2, 128);
    std::vector<float> got_rows;
    uint32_t t = 0;
    for (uint32_t n : {33u, 40u, 17u}) {
        ASSERT_EQ(forward(a.get(), x, 0, 2, t, n, state.get(), 0, got_rows), PSK_SUCCESS) << "chunk at " << t;
        t += n;
    }
    EXPECT_LE(worstError(x, got_rows, whole), kTolerance);
}

// Where the split-key kernel is not available (a device where no tiling of the FP32
// FlashAttention-2 kernel fits; here PSK_FP32_BASELINE=rows, which keeps the one-row kernel), a
// later position is unsupported with the state unchanged; position 0 works.
TEST_F(ContextTest, SoftmaxForwardAtALaterPositionWithoutItsKernel) {
    psk::test::ScopedEnv rows("PSK_FP32_BASELINE", "rows");
    Spec s;
    s.kind = PSK_ATTENTION_KIND_SOFTMAX;
    const Attention a = makeAttention(ctx, s);
    ASSERT_TRUE(a);
    const Tokens x(s, 1, 12, 730);
    const State state = makeState(a.get(), 1, 16);
    std::vector<float> got;
    ASSERT_EQ(forward(a.get(), x, 0, 1, 0, 8, state.get(), 0, got), PSK_SUCCESS);
    const std::vector<uint8_t> before = serialize(state.get());
    psk::test::MessageLog& log = psk::test::sharedLog();
    log.clear();
    EXPECT_EQ(forward(a.get(), x, 0, 1, 8, 2, state.get(), 0, got), PSK_ERROR_UNSUPPORTED);
    ASSERT_EQ(log.errors.size(), 1u);
    EXPECT_NE(log.errors[0].find("PSK_FP32_BASELINE=rows"), std::string::npos) << log.errors[0];
    EXPECT_EQ(serialize(state.get()), before);
    EXPECT_EQ(position(state.get(), 0), 8u);
    log.clear();
}

// ---- errors leave the state unchanged ----

TEST_F(ContextTest, ErrorsLeaveTheStateUnchanged) {
    psk::test::MessageLog& log = psk::test::sharedLog();
    Spec s;
    s.localExact = true;
    const Attention a = makeAttention(ctx, s);
    const Attention twin = makeAttention(ctx, s);  // the same configuration, another object
    ASSERT_TRUE(a && twin);
    const Tokens x(s, 2, 40, 800);
    const State state = makeState(a.get(), 2);
    std::vector<float> all;
    ASSERT_EQ(forward(a.get(), x, 0, 2, 0, 7, state.get(), 0, all), PSK_SUCCESS);
    ASSERT_EQ(forward(a.get(), x, 1, 1, 7, 3, state.get(), 1, all), PSK_SUCCESS);  // sequence 1 at 10, sequence 0 at 7
    const std::vector<uint8_t> before = serialize(state.get());
    log.clear();

    auto expectFails = [&](PskResult got, PskResult want, const char* what) {
        EXPECT_EQ(got, want) << what;
        EXPECT_EQ(log.errors.size(), 1u) << what;
        log.clear();
        EXPECT_EQ(position(state.get(), 0), 7u) << what;
        EXPECT_EQ(position(state.get(), 1), 10u) << what;
        EXPECT_EQ(serialize(state.get()), before) << what;
    };
    const std::vector<float> q = x.slice(x.q, s.Hq, s.h, 0, 2, 10, 4), k = x.slice(x.k, s.Hkv, s.h, 0, 2, 10, 4),
                             v = x.slice(x.v, s.Hkv, s.dv, 0, 2, 10, 4);
    std::vector<float> out(size_t(2) * s.Hq * 4 * s.dv, 42.0f);
    PskForwardHostInfo good{};
    good.batchSize = 1;
    good.seqLen = 4;
    setHostArrays(good, q, k, v, &out);
    good.state = state.get();

    PskForwardHostInfo bad = good;
    expectFails(pskAttentionForwardHost(twin.get(), &bad), PSK_ERROR_INVALID_ARGUMENT, "a state of another attention");
    bad.stateFirstSequence = 2;
    expectFails(pskAttentionForwardHost(a.get(), &bad), PSK_ERROR_INVALID_ARGUMENT, "sequence beyond the state");
    bad = good;
    bad.stateFirstSequence = 1;
    bad.batchSize = 2;
    expectFails(pskAttentionForwardHost(a.get(), &bad), PSK_ERROR_INVALID_ARGUMENT, "batch beyond the state");
    bad = good;
    bad.batchSize = 2;
    expectFails(pskAttentionForwardHost(a.get(), &bad), PSK_ERROR_INVALID_SHAPE, "sequences at different positions");
    bad = good;
    bad.state = nullptr;
    bad.stateFirstSequence = 1;
    expectFails(pskAttentionForwardHost(a.get(), &bad), PSK_ERROR_INVALID_ARGUMENT, "stateFirstSequence without a state");
    bad = good;
    bad.outBytes -= 4 * (size_t(s.Hq) * 4 * s.dv + 1);  // less than one sequence's rows
    expectFails(pskAttentionForwardHost(a.get(), &bad), PSK_ERROR_BUFFER_TOO_SMALL, "short out");
    bad = good;
    bad.seqLen = 0;
    expectFails(pskAttentionForwardHost(a.get(), &bad), PSK_ERROR_INVALID_SHAPE, "seqLen 0");
    std::vector<float> nanK = k;
    nanK[3] = NAN;
    bad = good;
    bad.k = nanK.data();
    expectFails(pskAttentionForwardHost(a.get(), &bad), PSK_ERROR_NON_FINITE_INPUT, "NaN in k");
    bad = good;
    bad.q = nullptr;
    expectFails(pskAttentionForwardHost(a.get(), &bad), PSK_ERROR_INVALID_ARGUMENT, "NULL q");
    // Kinds without decode states: the call says UNSUPPORTED before it looks at the state.
    Spec poly = s;
    poly.kind = PSK_ATTENTION_KIND_POLYNOMIAL;
    poly.localExact = false;
    const Attention polynomial = makeAttention(ctx, poly);
    Spec full = s;
    full.causal = false;
    full.localExact = false;
    const Attention nonCausal = makeAttention(ctx, full);
    ASSERT_TRUE(polynomial && nonCausal);
    expectFails(pskAttentionForwardHost(polynomial.get(), &good), PSK_ERROR_UNSUPPORTED, "POLYNOMIAL");
    expectFails(pskAttentionForwardHost(nonCausal.get(), &good), PSK_ERROR_UNSUPPORTED, "non-causal");
    uint64_t bytes = 0;
    EXPECT_EQ(pskGetStateWorkspaceSize(polynomial.get(), 1, 16, &bytes), PSK_ERROR_UNSUPPORTED);
    EXPECT_EQ(pskGetStateWorkspaceSize(nonCausal.get(), 1, 16, &bytes), PSK_ERROR_UNSUPPORTED);
    EXPECT_EQ(pskGetStateWorkspaceSize(a.get(), 1, 16, nullptr), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(pskGetStateWorkspaceSize(nullptr, 1, 16, &bytes), PSK_ERROR_INVALID_ARGUMENT);
    log.clear();
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float f) { return f == 42.0f; })) << "a failed call wrote out";

    // The good call works (positive control) and moves sequence 0 alone.
    EXPECT_EQ(pskAttentionForwardHost(a.get(), &good), PSK_SUCCESS);
    EXPECT_EQ(position(state.get(), 0), 11u);
    EXPECT_EQ(position(state.get(), 1), 10u);
}

TEST_F(ContextTest, PositionLimit) {
    // Sequences 3 tokens before 2^53 (a restored blob, resealed): 4 more tokens fail with
    // TOO_LARGE and change nothing; 3 reach the limit.
    Spec s = local();
    const Attention a = makeAttention(ctx, s);
    ASSERT_TRUE(a);
    const Tokens x(s, 2, 16, 1000);
    const State state = makeState(a.get(), 2);
    std::vector<float> all;
    ASSERT_EQ(forward(a.get(), x, 0, 2, 0, 7, state.get(), 0, all), PSK_SUCCESS);
    std::vector<uint8_t> blob = serialize(state.get());
    const uint64_t limit = uint64_t(1) << 53;
    const size_t positionsAt = 72;  // docs/DECODING.md, "Serialization"
    for (size_t s8 = 0; s8 < 2; ++s8)
        for (int i = 0; i < 8; ++i) blob[positionsAt + 8 * s8 + i] = uint8_t((limit - 3) >> (8 * i));
    const uint64_t checksum = psk::decodeBlobChecksum(blob.data(), blob.size() - 8);
    for (int i = 0; i < 8; ++i) blob[blob.size() - 8 + i] = uint8_t(checksum >> (8 * i));
    ASSERT_EQ(pskRestoreDecodeState(state.get(), blob.data(), blob.size()), PSK_SUCCESS);
    psk::test::MessageLog& log = psk::test::sharedLog();
    log.clear();
    EXPECT_EQ(forward(a.get(), x, 0, 2, 7, 4, state.get(), 0, all), PSK_ERROR_TOO_LARGE);
    EXPECT_EQ(log.errors.size(), 1u);
    log.clear();
    EXPECT_EQ(serialize(state.get()), blob);
    EXPECT_EQ(forward(a.get(), x, 0, 2, 7, 3, state.get(), 0, all), PSK_SUCCESS);
    EXPECT_EQ(position(state.get(), 1), limit);
}

TEST_F(ContextTest, StateWorkspaceSize) {
    // At least the plain forward's; local exact also holds the staged tensors of b - 1 more rows.
    for (bool localExact : {false, true}) {
        Spec s;
        s.localExact = localExact;
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        uint64_t ws = 0, plain = 0;
        ASSERT_EQ(pskGetStateWorkspaceSize(a.get(), 2, 100, &ws), PSK_SUCCESS);
        ASSERT_EQ(pskGetWorkspaceSize(a.get(), 2, 100, &plain), PSK_SUCCESS);
        EXPECT_GT(ws, plain);
        std::printf("[ state ] workspace for 2 x 100 tokens, %s: %llu bytes (without a state %llu)\n",
                    localExact ? "local exact" : "sketched", (unsigned long long)ws, (unsigned long long)plain);
    }
    // Softmax: the split keys' states of a forward continuing the cache, (m, l, O) per split and
    // query row (the plain forward needs none at 100 tokens); the splits forced, as the count
    // follows the device.
    Spec soft;
    soft.kind = PSK_ATTENTION_KIND_SOFTMAX;
    const Attention a = makeAttention(ctx, soft);
    for (uint32_t splits : {1u, 3u}) {
        psk::test::ScopedEnv env("PSK_SOFTMAX_CACHE_SPLITS", std::to_string(splits).c_str());
        uint64_t ws = 1, plain = 2;
        ASSERT_EQ(pskGetStateWorkspaceSize(a.get(), 2, 100, &ws), PSK_SUCCESS);
        ASSERT_EQ(pskGetWorkspaceSize(a.get(), 2, 100, &plain), PSK_SUCCESS);
        EXPECT_EQ(plain, 0u);
        EXPECT_EQ(ws, uint64_t(splits) * 2 * soft.Hq * 100 * (soft.dv + 2) * 4);
    }
    // Never less for a longer call (the split count falls as the rows grow; the size does not).
    uint64_t last = 0;
    for (uint32_t n = 1; n <= 300; ++n) {
        uint64_t ws = 0;
        ASSERT_EQ(pskGetStateWorkspaceSize(a.get(), 1, n, &ws), PSK_SUCCESS);
        EXPECT_GE(ws, last) << n;
        last = ws;
    }
}

TEST_F(ContextTest, StatsOfAForwardWithAState) {
    // The workspace a call with a state reports is pskGetStateWorkspaceSize's; its stages are timed.
    const Spec s = local();
    const Attention a = makeAttention(ctx, s);
    ASSERT_TRUE(a);
    const Tokens x(s, 1, 30, 1100);
    const State state = makeState(a.get(), 1);
    for (uint32_t t0 : {0u, 5u}) {  // on a block boundary, then inside a block (staged)
        const uint32_t n = t0 ? 25 : 5;
        const std::vector<float> q = x.slice(x.q, s.Hq, s.h, 0, 1, t0, n), k = x.slice(x.k, s.Hkv, s.h, 0, 1, t0, n),
                                 v = x.slice(x.v, s.Hkv, s.dv, 0, 1, t0, n);
        std::vector<float> out(size_t(s.Hq) * n * s.dv);
        PskForwardStats stats{};
        PskForwardHostInfo info{};
        info.seqLen = n;
        setHostArrays(info, q, k, v, &out);
        info.stats = &stats;
        info.state = state.get();
        ASSERT_EQ(pskAttentionForwardHost(a.get(), &info), PSK_SUCCESS);
        uint64_t ws = 0;
        ASSERT_EQ(pskGetStateWorkspaceSize(a.get(), 1, n, &ws), PSK_SUCCESS);
        EXPECT_EQ(stats.workspaceBytes, ws);
        // Every stage was timed, the staging and the state's update inside the span.
        double sum = 0;
        for (double ms : stats.stageMilliseconds) {
            EXPECT_GT(ms, 0.0);
            sum += ms;
        }
        EXPECT_LE(sum, stats.gpuMilliseconds * (1 + 1e-9) + 1e-6);
    }
}

// ---- the recorded form (an app's device) equals the host form ----

/** The app's buffers of one chunk: q, k, v, out at aligned offsets of one buffer. */
struct CmdChunk {
    std::unique_ptr<psk::test::AppVulkan::HostBuffer> buf;
    VkDeviceSize off[4] = {}, bytes[4] = {};
    PskCmdForwardInfo info{};
};

CmdChunk cmdChunk(psk::test::AppVulkan& app, const Tokens& x, uint32_t t0, uint32_t n, PskDecodeState state, VkBuffer workspace,
                  VkDeviceSize workspaceBytes) {
    const Spec& s = x.s;
    const std::vector<float> in[3] = {x.slice(x.q, s.Hq, s.h, 0, x.B, t0, n), x.slice(x.k, s.Hkv, s.h, 0, x.B, t0, n),
                                      x.slice(x.v, s.Hkv, s.dv, 0, x.B, t0, n)};
    const VkDeviceSize align = std::max<VkDeviceSize>(app.limits.minStorageBufferOffsetAlignment, 4);
    auto up = [&](VkDeviceSize v) { return (v + align - 1) / align * align; };
    CmdChunk c;
    VkDeviceSize at = align;  // a non-zero offset
    for (int i = 0; i < 4; ++i) {
        c.bytes[i] = i < 3 ? in[i].size() * 4 : VkDeviceSize(x.B) * s.Hq * n * s.dv * 4;
        c.off[i] = at;
        at = up(at + c.bytes[i]) + align;
    }
    c.buf = app.buffer(at);
    for (int i = 0; i < 3; ++i) std::memcpy(c.buf->data + c.off[i], in[i].data(), c.bytes[i]);
    std::memset(c.buf->data + c.off[3], 0xFF, c.bytes[3]);
    c.info.batchSize = x.B;
    c.info.seqLen = n;
    PskVulkanTensor* t[4] = {&c.info.q, &c.info.k, &c.info.v, &c.info.out};
    for (int i = 0; i < 4; ++i) *t[i] = {c.buf->buffer, c.off[i], c.bytes[i], nullptr};
    c.info.workspace = workspace;
    c.info.workspaceSize = workspaceBytes;
    c.info.state = state;
    return c;
}

std::vector<float> cmdOut(const CmdChunk& c) {
    std::vector<float> out(c.bytes[3] / 4);
    std::memcpy(out.data(), c.buf->data + c.off[3], c.bytes[3]);
    return out;
}

void cmdMatchesHost(PskDeviceCapabilityFlags wanted) {
    psk::test::AppVulkan app(wanted);
    ASSERT_NE(app.device, VK_NULL_HANDLE);
    psk::test::MessageLog log;
    PskContext ctx = app.context(log);
    ASSERT_NE(ctx, nullptr);
    Spec soft;
    soft.kind = PSK_ATTENTION_KIND_SOFTMAX;
    for (const Spec& s : {Spec{}, local(), local({PSK_ATTENTION_KIND_POLYSKETCH, false, 4, 8, 16, 16, 16, 4, 2, PSK_LAYOUT_BNHD}), soft}) {
        const bool softmax = s.kind == PSK_ATTENTION_KIND_SOFTMAX;
        SCOPED_TRACE(softmax ? "softmax" : s.localExact ? "local exact" : "sketched");
        const Attention a = makeAttention(ctx, s);
        ASSERT_TRUE(a);
        const uint32_t B = 2, N = 48;
        const Tokens x(s, B, N, 900);
        const uint32_t capacity = softmax ? N : 0;
        const State host = makeState(a.get(), B, capacity), recorded = makeState(a.get(), B, capacity);
        uint64_t wsBytes = 0;
        ASSERT_EQ(pskGetStateWorkspaceSize(a.get(), B, 22, &wsBytes), PSK_SUCCESS);  // the largest chunk
        auto ws = app.buffer(std::max<uint64_t>(wsBytes, 4));
        std::vector<float> hostRows, cmdRows;
        // Submissions of chunks: the last one records two forwards into one command buffer.
        const std::vector<std::vector<uint32_t>> submissions = {{5}, {20}, {1, 22}};
        uint32_t t0 = 0;
        for (const std::vector<uint32_t>& sub : submissions) {
            std::vector<CmdChunk> pending;
            uint32_t c0 = t0;
            for (uint32_t n : sub) {
                ASSERT_EQ(forward(a.get(), x, 0, B, c0, n, host.get(), 0, hostRows), PSK_SUCCESS);
                pending.push_back(cmdChunk(app, x, c0, n, recorded.get(), wsBytes ? ws->buffer : VK_NULL_HANDLE, wsBytes));
                c0 += n;
            }
            app.run([&](VkCommandBuffer cmd) {
                psk::test::appBarrier(cmd, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                      VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
                for (CmdChunk& c : pending)
                    EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &c.info), PSK_SUCCESS) << (log.errors.empty() ? "" : log.errors.back());
                psk::test::appBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                      VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                                      VK_ACCESS_HOST_READ_BIT);
            });
            for (const CmdChunk& c : pending) {
                x.scatter(cmdOut(c), cmdRows, 0, B, t0, c.info.seqLen);
                t0 += c.info.seqLen;
            }
            EXPECT_EQ(position(recorded.get(), 0), t0);
        }
        for (uint32_t t = t0; t < N; ++t) {  // steps, where the chunks leave rows
            step(host.get(), x, t, hostRows);
            step(recorded.get(), x, t, cmdRows);
        }
        EXPECT_EQ(cmdRows, hostRows) << "the recorded forwards differ from the host forwards";
        EXPECT_EQ(serialize(recorded.get()), serialize(host.get())) << "the recorded forwards left another state";
        EXPECT_LE(worstError(x, hostRows, wholeForward(a.get(), x)), kTolerance);
        EXPECT_EQ(pskResetCommandDescriptors(a.get()), PSK_SUCCESS);

        // Misuse of the recorded form: nothing recorded, the state unchanged.
        if (!softmax) {  // (the softmax state is full here)
            const std::vector<uint8_t> before = serialize(recorded.get());
            CmdChunk c = cmdChunk(app, x, 0, 22, recorded.get(), ws->buffer, wsBytes);
            uint64_t plain = 0;
            ASSERT_EQ(pskGetWorkspaceSize(a.get(), B, 22, &plain), PSK_SUCCESS);
            EXPECT_LT(plain, wsBytes);
            app.run([&](VkCommandBuffer cmd) {
                PskCmdForwardInfo bad = c.info;
                bad.workspaceSize = wsBytes - 4;
                EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &bad), PSK_ERROR_BUFFER_TOO_SMALL);
                bad.workspaceSize = plain;
                EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &bad), PSK_ERROR_BUFFER_TOO_SMALL);
                bad = c.info;
                bad.workspace = VK_NULL_HANDLE;
                EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &bad), PSK_ERROR_INVALID_ARGUMENT);
                bad = c.info;
                bad.stateFirstSequence = 1;
                EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &bad), PSK_ERROR_INVALID_ARGUMENT);
                bad = c.info;
                bad.state = nullptr;
                bad.stateFirstSequence = 1;
                EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &bad), PSK_ERROR_INVALID_ARGUMENT);
                bad = c.info;
                bad.out.size -= 4;
                EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &bad), PSK_ERROR_BUFFER_TOO_SMALL);
                EXPECT_EQ(pskCmdAttentionForward(a.get(), VK_NULL_HANDLE, &c.info), PSK_ERROR_INVALID_ARGUMENT);
            });
            EXPECT_EQ(log.errors.size(), 7u);
            log.clear();
            EXPECT_EQ(position(recorded.get(), 0), uint64_t(N));
            EXPECT_EQ(serialize(recorded.get()), before);
            const std::vector<float> untouched = cmdOut(c);
            EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float f) { return std::isnan(f); })) << "a failed call wrote out";
        }
    }
    EXPECT_TRUE(log.validation.empty());
    for (const std::string& m : log.validation) ADD_FAILURE() << m;
    pskDestroyContext(ctx);
}

TEST(StatePassingEmbed, CmdForwardMatchesHostWithPushDescriptors) { cmdMatchesHost(PSK_DEVICE_CAPABILITY_ALL); }

TEST(StatePassingEmbed, CmdForwardMatchesHostWithDescriptorPools) {
    cmdMatchesHost(PSK_DEVICE_CAPABILITY_ALL & ~PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT);
}

}  // namespace
