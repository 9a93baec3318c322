// block_scan.comp and block_reduce.comp against the float64 reference (exclusivePrefix, and the
// plain sum over blocks for the reduction): random states, several sequences, block counts around
// every segment and lane-count boundary (1, 2, 3, 4, 5, 16, 17, 255, 256, 257, 1000), element
// counts that are multiples of 4 (the vec4 path: elems / 4 columns per block) and that are not
// (the scalar path), and column counts that leave a workgroup partly idle.
//
// Metric: exact equality. The data are random multiples of 1/8 in [-8, 8], so every partial sum
// of up to a few thousand terms is exactly representable in float32 and the result does not depend
// on the order of summation; any wrong, missing or doubled term shows. The states sit inside a
// larger buffer at a non-zero offset, and the sentinels around them must survive (no stray
// writes); the reduction must leave blocks 1..t-1 as they were.
//
// The 65535-block cases are the most a forward dispatches (maxComputeWorkGroupCount[1] blocks): one
// cluster then runs 4096 segments of the scan, or 8192 iterations of the reduction, and llvmpipe
// silently ends an invocation's loops after 65535 iterations in all. A shader whose inner loops the
// driver keeps (they count too) fails these cases; the first version of the subgroup scan did.
#include <gtest/gtest.h>
#include "kernels/kernel_pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "vk/context.hpp"
#include "forward/block_scan.hpp"
#include "reference/reference.hpp"

namespace {

struct Log {
    std::vector<std::string> validation, errors;
    static void callback(PskMessageSeverity severity, PskResult, const char* message, void* user) {
        if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) static_cast<Log*>(user)->validation.emplace_back(message);
        if (severity == PSK_MESSAGE_SEVERITY_ERROR) static_cast<Log*>(user)->errors.emplace_back(message);
    }
};

enum class Op { Scan, Reduce };

struct Case {
    Op op;
    uint32_t sequences, blocks, elems;
};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
    const Case& c = info.param;
    return std::string(c.op == Op::Scan ? "scan" : "reduce") + "_s" + std::to_string(c.sequences) + "_t" +
           std::to_string(c.blocks) + "_e" + std::to_string(c.elems) + (c.elems % 4 == 0 ? "_vec4" : "_scalar");
}

// Expected contents of the states after the operation, in float64.
std::vector<double> expected(const Case& c, const std::vector<float>& data) {
    std::vector<double> out(data.begin(), data.end());
    for (uint32_t s = 0; s < c.sequences; ++s) {
        const size_t seq = size_t(s) * c.blocks * c.elems;
        if (c.op == Op::Scan) {
            std::vector<std::vector<double>> H(c.blocks, std::vector<double>(c.elems));
            for (uint32_t l = 0; l < c.blocks; ++l)
                for (uint32_t e = 0; e < c.elems; ++e) H[l][e] = data[seq + size_t(l) * c.elems + e];
            const auto Z = psk::ref::exclusivePrefix(H);
            for (uint32_t l = 0; l < c.blocks; ++l)
                for (uint32_t e = 0; e < c.elems; ++e) out[seq + size_t(l) * c.elems + e] = Z[l][e];
        } else {
            for (uint32_t e = 0; e < c.elems; ++e) {
                double sum = 0;
                for (uint32_t l = 0; l < c.blocks; ++l) sum += data[seq + size_t(l) * c.elems + e];
                out[seq + e] = sum;
            }
        }
    }
    return out;
}

void PrintTo(const Case& c, std::ostream* os) {
    *os << (c.op == Op::Scan ? "scan" : "reduce") << " of " << c.sequences << " x " << c.blocks << " blocks x " << c.elems
        << " floats";
}

// One context for the suite: the NVIDIA driver (580, H200) refused a vkCreateInstance after about
// 30 instances had been created and destroyed in one process (the loader could not get
// vkCreateInstance from the ICD again; docs/RELIABILITY.md), which is not what these cases test.
class BlockScan : public ::testing::TestWithParam<Case> {
protected:
    static void SetUpTestSuite() {
        log_ = new Log;
        PskContextCreateInfo info{};
        info.flags = PSK_CONTEXT_ENABLE_VALIDATION_BIT;
        info.messageCallback = &Log::callback;
        info.messageUserData = log_;
        if (pskCreateContext(&info, &ctx_) != PSK_SUCCESS) {
            why_ = log_->errors.empty() ? "(no message)" : log_->errors.front();
            ctx_ = nullptr;
        }
    }
    static void TearDownTestSuite() {
        if (ctx_) pskDestroyContext(ctx_);
        ctx_ = nullptr;
        delete log_;
        log_ = nullptr;
    }
    void SetUp() override { log_->validation.clear(); }
    void TearDown() override {
        for (const auto& m : log_->validation) ADD_FAILURE() << "validation: " << m;
    }
    static Log* log_;
    static PskContext ctx_;
    static std::string why_;
};
Log* BlockScan::log_ = nullptr;
PskContext BlockScan::ctx_ = nullptr;
std::string BlockScan::why_;

TEST_P(BlockScan, MatchesReferenceExactly) {
    const Case c = GetParam();
    ASSERT_NE(ctx_, nullptr) << "pskCreateContext failed: " << why_;
    PskContext ctx = ctx_;
    {
        std::mt19937_64 rng(uint64_t(c.blocks) * 1000003u + c.elems * 31u + c.sequences + (c.op == Op::Reduce));
        std::uniform_int_distribution<int> eighths(-64, 64);
        const size_t count = size_t(c.sequences) * c.blocks * c.elems;
        std::vector<float> data(count);
        for (float& x : data) x = float(eighths(rng)) / 8.0f;

        // Sentinels before and after the states; the offset keeps the storage-buffer alignment.
        const VkDeviceSize offsetBytes = std::max<VkDeviceSize>(256, ctx->caps().limits().minStorageBufferOffsetAlignment);
        const size_t pad = offsetBytes / 4;
        const float sentinel = 1234.5f;
        psk::Buffer buffer(ctx->allocator(), (count + 2 * pad) * 4,
                           VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, psk::MemoryUsage::HostReadback);
        ASSERT_NE(buffer.mapped(), nullptr);
        float* mapped = reinterpret_cast<float*>(buffer.mapped());
        std::fill(mapped, mapped + count + 2 * pad, sentinel);
        std::memcpy(mapped + pad, data.data(), count * 4);

        const psk::BufferRange states{buffer.handle(), offsetBytes, count * 4};
        const bool scan = c.op == Op::Scan;
        const psk::BlockScanPlan plan = scan ? psk::planBlockScan(c.blocks, ctx->caps()) : psk::planBlockReduce(c.blocks, ctx->caps());
        VkPipeline pipeline = psk::kernelPipeline(ctx->pipelines(), plan.kernel);
        ctx->execute([&](psk::Recorder& rec) {
            if (scan)
                psk::recordBlockScan(rec, pipeline, plan, states, c.sequences, c.blocks, c.elems);
            else
                psk::recordBlockReduce(rec, pipeline, plan, states, c.sequences, c.blocks, c.elems);
        });

        const std::vector<double> want = expected(c, data);
        size_t wrong = 0, firstWrong = 0, changed = 0;
        for (size_t i = 0; i < count; ++i) {
            changed += want[i] != double(data[i]);
            if (double(mapped[pad + i]) != want[i] && wrong++ == 0) firstWrong = i;
        }
        ASSERT_GT(changed, 0u);  // leaving the states as they were must fail
        EXPECT_EQ(wrong, 0u) << "first wrong element " << firstWrong << " (sequence "
                             << firstWrong / (size_t(c.blocks) * c.elems) << ", block "
                             << firstWrong / c.elems % c.blocks << ", column " << firstWrong % c.elems
                             << "): got " << (wrong ? mapped[pad + firstWrong] : 0.0f) << ", want "
                             << (wrong ? want[firstWrong] : 0.0);
        for (size_t i = 0; i < pad; ++i) {
            ASSERT_EQ(mapped[i], sentinel) << "write before the states, " << pad - i << " floats ahead";
            ASSERT_EQ(mapped[pad + count + i], sentinel) << "write after the states, " << i << " floats past";
        }
    }
}

// The scan's variants switch at 4 blocks (2 or 8 lanes, segments of 4 or 16 blocks), the
// reduction's at 4 too; 68 floats are 17 vec4 columns, one more than a workgroup of 128
// invocations at 8 lanes holds.
INSTANTIATE_TEST_SUITE_P(
    Sizes, BlockScan,
    ::testing::Values(Case{Op::Scan, 1, 1, 7}, Case{Op::Scan, 2, 1, 8}, Case{Op::Scan, 2, 2, 5}, Case{Op::Scan, 2, 2, 12},
                      Case{Op::Scan, 3, 3, 33}, Case{Op::Scan, 3, 3, 36}, Case{Op::Scan, 2, 4, 9}, Case{Op::Scan, 1, 5, 68},
                      Case{Op::Scan, 2, 16, 68}, Case{Op::Scan, 2, 17, 30}, Case{Op::Scan, 1, 255, 10},
                      Case{Op::Scan, 2, 255, 20}, Case{Op::Scan, 2, 256, 9}, Case{Op::Scan, 3, 256, 64},
                      Case{Op::Scan, 1, 257, 12}, Case{Op::Scan, 2, 257, 13}, Case{Op::Scan, 1, 1000, 3},
                      Case{Op::Scan, 2, 1000, 4}, Case{Op::Scan, 1, 5, 70001}, Case{Op::Scan, 1, 5, 70004},
                      Case{Op::Scan, 1, 65535, 4}, Case{Op::Scan, 1, 65535, 3},
                      Case{Op::Reduce, 1, 2, 7}, Case{Op::Reduce, 2, 2, 8}, Case{Op::Reduce, 3, 3, 33},
                      Case{Op::Reduce, 2, 4, 36}, Case{Op::Reduce, 2, 5, 9}, Case{Op::Reduce, 2, 17, 68},
                      Case{Op::Reduce, 1, 255, 10}, Case{Op::Reduce, 2, 256, 12}, Case{Op::Reduce, 1, 257, 13},
                      Case{Op::Reduce, 2, 1000, 3}, Case{Op::Reduce, 1, 1000, 64}, Case{Op::Reduce, 1, 5, 70004},
                      Case{Op::Reduce, 1, 65535, 4}, Case{Op::Reduce, 1, 65535, 5}),
    caseName);

}  // namespace
