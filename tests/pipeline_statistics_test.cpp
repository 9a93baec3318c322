// The compiler's statistics per pipeline (VK_KHR_pipeline_executable_properties) in the attention
// plan: with PSK_PIPELINE_STATISTICS=1, on a device that has the extension, each kernel of the
// plan gets a "# stats: <variant> <statistics>" comment line (registers, spills, ... as the driver
// names them), with no validation message from capturing them; without the variable the device is
// created without the extension and the plan has no such line. The text's format is checked on
// made-up statistics, since lavapipe (Mesa 22.3) does not advertise the extension.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#include "support/scoped_env.hpp"
#include "vk/context.hpp"
#include "vk/device_caps.hpp"
#include "vk/pipelines.hpp"

namespace {

using psk::test::ScopedEnv;

struct Log {
    std::mutex mutex;
    std::vector<std::string> validation;
    static void callback(PskMessageSeverity severity, PskResult, const char* message, void* user) {
        auto* log = static_cast<Log*>(user);
        std::lock_guard<std::mutex> lock(log->mutex);
        if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) log->validation.emplace_back(message);
    }
};

/** The plan's lines that start with `prefix`. */
std::vector<std::string> linesStartingWith(const std::string& plan, const std::string& prefix) {
    std::vector<std::string> out;
    size_t begin = 0;
    while (begin < plan.size()) {
        size_t end = plan.find('\n', begin);
        if (end == std::string::npos) end = plan.size();
        if (plan.compare(begin, prefix.size(), prefix) == 0) out.push_back(plan.substr(begin, end - begin));
        begin = end + 1;
    }
    return out;
}

struct Outcome {
    bool created = false;
    bool captures = false;  // the context's device captures statistics
    std::string device;
    std::string plan;
    std::vector<std::string> validation;
};

/** A context of its own (PSK_PIPELINE_STATISTICS is read at its creation) and a polysketch attention's plan. */
Outcome planOfNewContext() {
    Outcome o;
    Log log;
    PskContextCreateInfo ci{};
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    ci.flags = require && std::strcmp(require, "1") == 0 ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    ci.messageCallback = &Log::callback;
    ci.messageUserData = &log;
    PskContext ctx = nullptr;
    EXPECT_EQ(pskCreateContext(&ci, &ctx), PSK_SUCCESS);
    if (!ctx) return o;
    o.captures = ctx->caps().pipelineExecutableInfo && ctx->pipelines().capturesStatistics();
    o.device = ctx->caps().properties.deviceName;

    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = PSK_ATTENTION_CAUSAL_BIT;
    info.degree = 4;
    info.numQueryHeads = 2;
    info.numKeyValueHeads = 1;
    info.headDim = 16;
    info.valueDim = 24;
    info.scale = 1.0f / std::sqrt(16.0f);
    info.dataType = PSK_DATA_TYPE_FLOAT32;
    info.sketchSize = 16;
    info.blockSize = 32;
    info.seed = 20261127;
    PskAttention attn = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
    if (attn) {
        o.created = true;
        size_t size = 0;
        EXPECT_EQ(pskGetAttentionPlan(attn, nullptr, &size), PSK_SUCCESS);
        std::string text(size, '\0');
        EXPECT_EQ(pskGetAttentionPlan(attn, text.data(), &size), PSK_SUCCESS);
        o.plan = text.c_str();
        pskDestroyAttention(attn);
    }
    pskDestroyContext(ctx);
    std::lock_guard<std::mutex> lock(log.mutex);
    o.validation = log.validation;
    return o;
}

TEST(PipelineStatistics, PlanNamesEachKernelsStatisticsWhenAsked) {
    ScopedEnv env("PSK_PIPELINE_STATISTICS", "1");
    const Outcome o = planOfNewContext();
    ASSERT_TRUE(o.created);
    for (const std::string& m : o.validation) ADD_FAILURE() << "validation message: " << m;
    const std::vector<std::string> stats = linesStartingWith(o.plan, "# stats: ");
    if (!o.captures) {
        EXPECT_TRUE(stats.empty()) << o.plan;
        GTEST_SKIP() << "device \"" << o.device
                     << "\" does not support VK_KHR_pipeline_executable_properties (pipelineExecutableInfo): no statistics";
    }
    ASSERT_FALSE(stats.empty()) << "no '# stats:' line in the plan:\n" << o.plan;
    for (const std::string& line : stats) {
        std::cout << line << "\n";
        // "# stats: <variant> <text>": a variant the plan runs, and a non-empty text on one line.
        const std::string rest = line.substr(std::strlen("# stats: "));
        const size_t space = rest.find(' ');
        ASSERT_NE(space, std::string::npos) << line;
        const std::string variant = rest.substr(0, space), text = rest.substr(space + 1);
        EXPECT_FALSE(text.empty()) << line;
        EXPECT_NE(text.find(" = "), std::string::npos) << line;
        EXPECT_LE(text.size(), psk::Pipelines::kMaxStatisticsChars) << line;
        EXPECT_FALSE(linesStartingWith(o.plan, variant + " ").empty()) << variant << " is not a kernel of the plan:\n" << o.plan;
    }
}

TEST(PipelineStatistics, NoStatisticsUnlessAsked) {
    for (const char* value : {static_cast<const char*>(nullptr), "0", ""}) {
        ScopedEnv env("PSK_PIPELINE_STATISTICS", value);
        const Outcome o = planOfNewContext();
        ASSERT_TRUE(o.created);
        for (const std::string& m : o.validation) ADD_FAILURE() << "validation message: " << m;
        EXPECT_FALSE(o.captures) << "PSK_PIPELINE_STATISTICS=" << (value ? value : "(unset)");
        EXPECT_TRUE(linesStartingWith(o.plan, "# stats:").empty()) << o.plan;
    }
}

TEST(PipelineStatistics, AnAppsDeviceNeverCapturesThem) {
    // The app created its device: the library cannot have enabled the extension on it.
    psk::DeviceCaps caps;
    caps.pipelineExecutableInfo = true;
    EXPECT_FALSE(psk::restrictDeviceCaps(caps, 0, "test").pipelineExecutableInfo);
}

VkPipelineExecutableStatisticKHR statistic(const char* name, VkPipelineExecutableStatisticFormatKHR format) {
    VkPipelineExecutableStatisticKHR s{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR};
    std::strncpy(s.name, name, sizeof(s.name) - 1);
    s.format = format;
    return s;
}

TEST(PipelineStatistics, FormatsEachValueTypeOnOneLine) {
    auto registers = statistic("Register count", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR);
    registers.value.u64 = 128;
    auto delta = statistic("Delta", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR);
    delta.value.i64 = -3;
    auto spills = statistic("Spills", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR);
    spills.value.b32 = VK_FALSE;
    auto occupancy = statistic("Occu\npancy", VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR);
    occupancy.value.f64 = 0.123456;
    EXPECT_EQ(psk::formatPipelineStatistics({{"Compute", {registers, delta, spills, occupancy}}}, 300),
              "Register count = 128, Delta = -3, Spills = false, Occu pancy = 0.1235");
    // Several executables: each after its name; one without statistics is left out.
    EXPECT_EQ(psk::formatPipelineStatistics({{"A", {registers}}, {"B", {}}, {"C", {spills}}}, 300),
              "A: Register count = 128; C: Spills = false");
    EXPECT_EQ(psk::formatPipelineStatistics({{"A", {}}}, 300), "");
    EXPECT_EQ(psk::formatPipelineStatistics({}, 300), "");
    // Cut short with "..." within the bound.
    const std::string cut = psk::formatPipelineStatistics({{"Compute", {registers, delta, spills}}}, 20);
    EXPECT_EQ(cut, "Register count = ...");
    EXPECT_EQ(cut.size(), 20u);
}

/**
 * A device of made-up functions, enough for psk::Pipelines: what a pipeline was created with, and
 * two executables' statistics to report (lavapipe cannot show the path that reads them).
 */
struct FakeDevice {
    VkPipelineCreateFlags createFlags = 0;
    int statisticsQueries = 0;
    static FakeDevice& the() {
        static FakeDevice device;
        return device;
    }
    template <typename Handle>
    static Handle handle(uintptr_t value) {
        return reinterpret_cast<Handle>(value);
    }
    static VkResult VKAPI_CALL createSetLayout(VkDevice, const VkDescriptorSetLayoutCreateInfo*, const VkAllocationCallbacks*,
                                               VkDescriptorSetLayout* out) {
        *out = handle<VkDescriptorSetLayout>(0x10);
        return VK_SUCCESS;
    }
    static VkResult VKAPI_CALL createLayout(VkDevice, const VkPipelineLayoutCreateInfo*, const VkAllocationCallbacks*,
                                            VkPipelineLayout* out) {
        *out = handle<VkPipelineLayout>(0x20);
        return VK_SUCCESS;
    }
    static VkResult VKAPI_CALL createModule(VkDevice, const VkShaderModuleCreateInfo*, const VkAllocationCallbacks*,
                                            VkShaderModule* out) {
        *out = handle<VkShaderModule>(0x30);
        return VK_SUCCESS;
    }
    static VkResult VKAPI_CALL createPipelines(VkDevice, VkPipelineCache, uint32_t, const VkComputePipelineCreateInfo* info,
                                               const VkAllocationCallbacks*, VkPipeline* out) {
        the().createFlags = info->flags;
        *out = handle<VkPipeline>(0x40);
        return VK_SUCCESS;
    }
    static void VKAPI_CALL destroySetLayout(VkDevice, VkDescriptorSetLayout, const VkAllocationCallbacks*) {}
    static void VKAPI_CALL destroyLayout(VkDevice, VkPipelineLayout, const VkAllocationCallbacks*) {}
    static void VKAPI_CALL destroyModule(VkDevice, VkShaderModule, const VkAllocationCallbacks*) {}
    static void VKAPI_CALL destroyPipeline(VkDevice, VkPipeline, const VkAllocationCallbacks*) {}
    static VkResult VKAPI_CALL executables(VkDevice, const VkPipelineInfoKHR* info, uint32_t* count,
                                           VkPipelineExecutablePropertiesKHR* out) {
        EXPECT_EQ(info->sType, VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR);
        EXPECT_EQ(info->pipeline, handle<VkPipeline>(0x40));
        if (!out) {
            *count = 2;
            return VK_SUCCESS;
        }
        const char* names[2] = {"Compute", "Internal"};
        for (uint32_t i = 0; i < *count && i < 2; ++i) {
            EXPECT_EQ(out[i].sType, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR);
            std::strncpy(out[i].name, names[i], sizeof(out[i].name) - 1);
        }
        return *count < 2 ? VK_INCOMPLETE : VK_SUCCESS;
    }
    static VkResult VKAPI_CALL statistics(VkDevice, const VkPipelineExecutableInfoKHR* info, uint32_t* count,
                                          VkPipelineExecutableStatisticKHR* out) {
        EXPECT_EQ(info->sType, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR);
        EXPECT_LT(info->executableIndex, 2u);
        ++the().statisticsQueries;
        const uint32_t available = info->executableIndex == 0 ? 2 : 1;
        if (!out) {
            *count = available;
            return VK_SUCCESS;
        }
        for (uint32_t i = 0; i < *count && i < available; ++i) {
            EXPECT_EQ(out[i].sType, VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR);
            std::strncpy(out[i].name, i == 0 ? "Register count" : "Spill count", sizeof(out[i].name) - 1);
            out[i].format = VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR;
            out[i].value.u64 = i == 0 ? 96 + info->executableIndex : 0;
        }
        return VK_SUCCESS;
    }
    psk::DeviceFunctions functions(bool withStatistics) const {
        psk::DeviceFunctions vk;
        vk.vkCreateDescriptorSetLayout = createSetLayout;
        vk.vkDestroyDescriptorSetLayout = destroySetLayout;
        vk.vkCreatePipelineLayout = createLayout;
        vk.vkDestroyPipelineLayout = destroyLayout;
        vk.vkCreateShaderModule = createModule;
        vk.vkDestroyShaderModule = destroyModule;
        vk.vkCreateComputePipelines = createPipelines;
        vk.vkDestroyPipeline = destroyPipeline;
        if (withStatistics) {
            vk.vkGetPipelineExecutablePropertiesKHR = executables;
            vk.vkGetPipelineExecutableStatisticsKHR = statistics;
        }
        return vk;
    }
};

TEST(PipelineStatistics, PipelinesCaptureReadAndLookUpStatistics) {
    const uint32_t words[5] = {0x07230203u, 0x00010000u, 0, 1, 0};
    const psk::ShaderCode shader{"fake.f32", words, sizeof(words)};
    const psk::ShaderCode other{"other.f32", words, sizeof(words)};
    const VkDevice device = FakeDevice::handle<VkDevice>(0x1);
    psk::DeviceCaps caps;
    for (bool enabled : {true, false}) {
        FakeDevice& fake = FakeDevice::the();
        fake = FakeDevice{};
        caps.pipelineExecutableInfo = enabled;
        const psk::DeviceFunctions vk = fake.functions(enabled);
        psk::Pipelines pipelines(vk, device, caps);
        EXPECT_EQ(pipelines.capturesStatistics(), enabled);
        pipelines.get(shader, {7, 8}, 0);
        EXPECT_EQ((fake.createFlags & VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR) != 0, enabled);
        EXPECT_EQ(fake.statisticsQueries, enabled ? 4 : 0);
        EXPECT_EQ(pipelines.statistics(shader, {7, 8}, 0),
                  enabled ? "Compute: Register count = 96, Spill count = 0; Internal: Register count = 97" : "");
        // A lookup of what was not created creates nothing and has no statistics.
        EXPECT_EQ(pipelines.statistics(shader, {7, 9}, 0), "");
        EXPECT_EQ(pipelines.statistics(other, {7, 8}, 0), "");
        EXPECT_EQ(pipelines.statistics(shader, {7, 8}, 32), "");
        EXPECT_EQ(pipelines.size(), 1u);
    }
}

}  // namespace
