// Proves the validation plumbing can fail: a deliberately invalid Vulkan call must reach the
// message callback as PSK_MESSAGE_SEVERITY_VALIDATION. If the layer were silently absent, every
// other GPU test's "no validation message" check would prove nothing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "vk/context.hpp"

namespace {
struct Log {
    std::vector<std::string> validation;
    static void callback(PskMessageSeverity severity, PskResult, const char* message, void* user) {
        if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) static_cast<Log*>(user)->validation.emplace_back(message);
    }
};
}  // namespace

TEST(Validation, InvalidVulkanUsageIsReported) {
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    Log log;
    PskContextCreateInfo info{};
    info.flags = require && std::string(require) == "1" ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    info.messageCallback = &Log::callback;
    info.messageUserData = &log;
    PskContext ctx = nullptr;
    ASSERT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS);
    if (ctx->validationMessageCount() == 0 && log.validation.empty()) {
        // A zero-sized buffer is invalid usage (VUID-VkBufferCreateInfo-size-00912).
        VkBufferCreateInfo bufferInfo{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
        bufferInfo.size = 0;
        bufferInfo.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
        VkBuffer buffer = VK_NULL_HANDLE;
        const VkResult r = ctx->vk().vkCreateBuffer(ctx->device(), &bufferInfo, nullptr, &buffer);
        if (r == VK_SUCCESS && buffer) ctx->vk().vkDestroyBuffer(ctx->device(), buffer, nullptr);
    }
    const uint64_t seen = ctx->validationMessageCount();
    pskDestroyContext(ctx);
    if (!(require && std::string(require) == "1") && seen == 0) GTEST_SKIP() << "validation layer not installed";
    EXPECT_GE(seen, 1u);
    EXPECT_FALSE(log.validation.empty());
}
