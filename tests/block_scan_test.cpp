// block_scan.comp against the float64 reference's exclusivePrefix: random states, block counts
// around every segment boundary (1, 2, 3, 255, 256, 257, 1000), several sequences.
// Metric: max |gpu - ref| / max |ref|, threshold 1e-5 (float32 sums of at most ~1000 terms).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "context.hpp"
#include "kernels.hpp"
#include "reference/reference.hpp"

namespace {

struct Log {
    std::vector<std::string> validation;
    static void callback(PskMessageSeverity severity, PskResult, const char* message, void* user) {
        if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) static_cast<Log*>(user)->validation.emplace_back(message);
    }
};

class BlockScan : public ::testing::TestWithParam<std::tuple<uint32_t, uint32_t, uint32_t>> {};

TEST_P(BlockScan, MatchesReferencePrefix) {
    const auto [sequences, blocks, elems] = GetParam();
    Log log;
    PskContextCreateInfo info{};
    info.flags = PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    info.messageCallback = &Log::callback;
    info.messageUserData = &log;
    PskContext ctx = nullptr;
    ASSERT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS);
    {
        std::mt19937_64 rng(blocks * 1000 + elems);
        std::normal_distribution<float> normal;
        const size_t count = size_t(sequences) * blocks * elems;
        std::vector<float> data(count);
        for (float& x : data) x = normal(rng);

        psk::Buffer buffer(ctx->allocator(), count * 4, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                           psk::MemoryUsage::HostReadback);
        ASSERT_NE(buffer.mapped(), nullptr);
        std::memcpy(buffer.mapped(), data.data(), count * 4);
        const psk::BlockScanPlan plan = psk::planBlockScan(blocks, ctx->caps());
        VkPipeline pipeline = ctx->pipelines().get(psk::blockScanShader(), plan.specConstants);
        ctx->execute([&](psk::Recorder& rec) {
            psk::recordBlockScan(rec, pipeline, plan, {buffer.handle(), 0, count * 4}, sequences, blocks, elems);
        });
        std::vector<float> got(count);
        std::memcpy(got.data(), buffer.mapped(), count * 4);

        double maxErr = 0, maxRef = 0;
        for (uint32_t s = 0; s < sequences; ++s) {
            std::vector<std::vector<double>> H(blocks, std::vector<double>(elems));
            for (uint32_t l = 0; l < blocks; ++l)
                for (uint32_t e = 0; e < elems; ++e) H[l][e] = data[(size_t(s) * blocks + l) * elems + e];
            const auto Z = psk::ref::exclusivePrefix(H);
            for (uint32_t l = 0; l < blocks; ++l)
                for (uint32_t e = 0; e < elems; ++e) {
                    maxRef = std::max(maxRef, std::fabs(Z[l][e]));
                    maxErr = std::max(maxErr, std::fabs(Z[l][e] - got[(size_t(s) * blocks + l) * elems + e]));
                }
        }
        if (blocks > 1) ASSERT_GT(maxRef, 0.1);
        EXPECT_LE(maxErr / std::max(maxRef, 1.0), 1e-5) << "sequences " << sequences << " blocks " << blocks;
    }
    pskDestroyContext(ctx);
    for (const auto& m : log.validation) ADD_FAILURE() << "validation: " << m;
}

INSTANTIATE_TEST_SUITE_P(Sizes, BlockScan,
                         ::testing::Values(std::make_tuple(1u, 1u, 7u), std::make_tuple(2u, 2u, 5u), std::make_tuple(3u, 3u, 33u),
                                           std::make_tuple(1u, 255u, 10u), std::make_tuple(2u, 256u, 9u),
                                           std::make_tuple(1u, 257u, 12u), std::make_tuple(1u, 1000u, 3u),
                                           std::make_tuple(1u, 5u, 70000u)));

}  // namespace
