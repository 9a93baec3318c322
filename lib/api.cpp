// The C API boundary: argument checks that need no device, and the guard that turns every
// exception into a PskResult plus a message. Nothing below this file is visible to callers.
#include <polysketch/polysketch.h>
#include <polysketch/polysketch_vulkan.h>

#include <cstring>
#include <new>
#include <string>

#include "forward/attention.hpp"
#include "forward/coopmat_self_test.hpp"
#include "forward/coopmat_switches.hpp"
#include "forward/polysketch_forward.hpp"
#include "forward/polysketch_plan.hpp"
#include "forward/tiled_forward.hpp"
#include "kernels/kernel_pipeline.hpp"
#include "vk/context.hpp"
#include "decode/decode_state.hpp"
#include "util/error.hpp"
#include "vk/instance.hpp"

using namespace psk;

namespace {

/** Runs `body`; maps exceptions to codes and reports them through `report`. */
template <typename Body, typename Report>
PskResult guarded(Body&& body, Report&& report) noexcept {
    try {
        body();
        return PSK_SUCCESS;
    } catch (const Error& e) {
        report(e.code(), e.what());
        return e.code();
    } catch (const std::bad_alloc&) {
        report(PSK_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
        return PSK_ERROR_OUT_OF_HOST_MEMORY;
    } catch (const std::exception& e) {
        report(PSK_ERROR_INTERNAL, e.what());
        return PSK_ERROR_INTERNAL;
    } catch (...) {
        report(PSK_ERROR_INTERNAL, "unknown exception");
        return PSK_ERROR_INTERNAL;
    }
}

template <typename Body>
PskResult guarded(PskContext context, const char* function, Body&& body) noexcept {
    return guarded(std::forward<Body>(body), [&](PskResult code, const char* what) {
        if (context) {
            try {
                context->message(PSK_MESSAGE_SEVERITY_ERROR, code, cat(function, ": ", what));
            } catch (...) {
            }
        }
    });
}

void noSink(PskMessageSeverity, PskResult, const std::string&) {}

}  // namespace

extern "C" {

uint32_t pskGetVersion(void) { return PSK_HEADER_VERSION; }

const char* pskResultToString(PskResult result) {
    // Any int from C: switched on as an integer (a C++ enum value out of the enum's range is
    // undefined behaviour, and with -fstrict-enums the switch's range check may be dropped).
    switch (enumValue(result)) {
#define PSK_CASE(x) \
    case x:         \
        return #x;
        PSK_CASE(PSK_SUCCESS)
        PSK_CASE(PSK_ERROR_INVALID_ARGUMENT)
        PSK_CASE(PSK_ERROR_INVALID_SHAPE)
        PSK_CASE(PSK_ERROR_UNSUPPORTED)
        PSK_CASE(PSK_ERROR_BUFFER_TOO_SMALL)
        PSK_CASE(PSK_ERROR_NON_FINITE_INPUT)
        PSK_CASE(PSK_ERROR_TOO_LARGE)
        PSK_CASE(PSK_ERROR_OUT_OF_HOST_MEMORY)
        PSK_CASE(PSK_ERROR_OUT_OF_DEVICE_MEMORY)
        PSK_CASE(PSK_ERROR_NO_DEVICE)
        PSK_CASE(PSK_ERROR_DEVICE_LOST)
        PSK_CASE(PSK_ERROR_VULKAN)
        PSK_CASE(PSK_ERROR_BAD_FILE)
        PSK_CASE(PSK_ERROR_INTERNAL)
        PSK_CASE(PSK_ERROR_COMMUNICATION)
#undef PSK_CASE
    }
    return "PSK_ERROR_UNKNOWN";
}

PskResult pskCreateContext(const PskContextCreateInfo* createInfo, PskContext* pContext) {
    const PskContextCreateInfo defaults{};
    const PskContextCreateInfo& info = createInfo ? *createInfo : defaults;
    return guarded(
        [&] {
            if (!pContext) fail(PSK_ERROR_INVALID_ARGUMENT, "pContext must not be NULL");
            const uint32_t known = PSK_CONTEXT_ENABLE_VALIDATION_BIT | PSK_CONTEXT_REQUIRE_VALIDATION_BIT;
            if (info.flags & ~known) fail(PSK_ERROR_INVALID_ARGUMENT, "unknown bits in flags");
            if (info.externalVulkan && info.device && info.device[0])
                fail(PSK_ERROR_INVALID_ARGUMENT, "device must be NULL with externalVulkan (the app chose its device)");
            if (info.externalVulkan && info.flags)
                fail(PSK_ERROR_INVALID_ARGUMENT, "validation flags do not apply with externalVulkan: enable the validation "
                     "layer on your own instance");
            *pContext = new PskContext_T(info);
        },
        [&](PskResult code, const char* what) {
            if (info.messageCallback)
                info.messageCallback(PSK_MESSAGE_SEVERITY_ERROR, code, cat("pskCreateContext: ", what).c_str(),
                                     info.messageUserData);
        });
}

void pskDestroyContext(PskContext context) { delete context; }

PskResult pskEnumerateDevices(uint32_t* pCount) {
    return guarded(nullptr, "pskEnumerateDevices", [&] {
        if (!pCount) fail(PSK_ERROR_INVALID_ARGUMENT, "pCount must not be NULL");
        Instance instance(0, noSink);
        *pCount = static_cast<uint32_t>(instance.physicalDevices().size());
    });
}

PskResult pskGetPhysicalDeviceInfo(uint32_t index, PskDeviceInfo* pInfo) {
    return guarded(nullptr, "pskGetPhysicalDeviceInfo", [&] {
        if (!pInfo) fail(PSK_ERROR_INVALID_ARGUMENT, "pInfo must not be NULL");
        Instance instance(0, noSink);
        const auto devices = instance.physicalDevices();
        if (index >= devices.size()) fail(PSK_ERROR_NO_DEVICE, "device index ", index, " does not exist");
        queryDeviceCaps(instance.vk(), devices[index], instance.apiVersion()).fillInfo(pInfo);
    });
}

PskResult pskGetDeviceInfo(PskContext context, PskDeviceInfo* pInfo) {
    return guarded(context, "pskGetDeviceInfo", [&] {
        if (!context) fail(PSK_ERROR_INVALID_ARGUMENT, "context must not be NULL");
        if (!pInfo) fail(PSK_ERROR_INVALID_ARGUMENT, "pInfo must not be NULL");
        context->caps().fillInfo(pInfo);
        pInfo->maxAllocationSize = context->maxAllocationSize();
    });
}

PskResult pskCreateAttention(PskContext context, const PskAttentionCreateInfo* createInfo, PskAttention* pAttention) {
    return guarded(context, "pskCreateAttention", [&] {
        if (!context) fail(PSK_ERROR_INVALID_ARGUMENT, "context must not be NULL");
        if (!createInfo) fail(PSK_ERROR_INVALID_ARGUMENT, "createInfo must not be NULL");
        if (!pAttention) fail(PSK_ERROR_INVALID_ARGUMENT, "pAttention must not be NULL");
        *pAttention = new PskAttention_T(context, *createInfo);
    });
}

void pskDestroyAttention(PskAttention attention) { delete attention; }

PskResult pskIsAttentionSupported(PskContext context, const PskAttentionCreateInfo* createInfo) {
    return guarded(context, "pskIsAttentionSupported", [&] {
        if (!context) fail(PSK_ERROR_INVALID_ARGUMENT, "context must not be NULL");
        if (!createInfo) fail(PSK_ERROR_INVALID_ARGUMENT, "createInfo must not be NULL");
        const psk::AttentionConfig config = psk::makeAttentionConfig(*createInfo, context->caps());
        if (config.kind != PSK_ATTENTION_KIND_POLYSKETCH) (void)psk::planTiledAttention(config, context->caps());
    });
}

PskResult pskGetVulkanDeviceRequirements(PFN_vkGetInstanceProcAddr getInstanceProcAddr, VkInstance instance,
                                         uint32_t instanceApiVersion, VkPhysicalDevice physicalDevice,
                                         PskDeviceCapabilityFlags requested, PskVulkanDeviceRequirements* pRequirements) {
    return guarded(nullptr, "pskGetVulkanDeviceRequirements", [&] {
        if (!getInstanceProcAddr) fail(PSK_ERROR_INVALID_ARGUMENT, "getInstanceProcAddr must not be NULL");
        if (!instance) fail(PSK_ERROR_INVALID_ARGUMENT, "instance must not be VK_NULL_HANDLE");
        if (!physicalDevice) fail(PSK_ERROR_INVALID_ARGUMENT, "physicalDevice must not be VK_NULL_HANDLE");
        if (!pRequirements) fail(PSK_ERROR_INVALID_ARGUMENT, "pRequirements must not be NULL");
        if (requested & ~uint32_t(PSK_DEVICE_CAPABILITY_ALL)) fail(PSK_ERROR_INVALID_ARGUMENT, "unknown bits in requested");
        const uint32_t apiVersion = instanceApiVersion ? instanceApiVersion : VK_API_VERSION_1_1;
        if (apiVersion < VK_API_VERSION_1_1) fail(PSK_ERROR_UNSUPPORTED, "polysketch needs a Vulkan 1.1 instance");
        psk::InstanceFunctions vki;
        vki.load(getInstanceProcAddr, instance);
        if (!vki.vkGetPhysicalDeviceProperties2 || !vki.vkGetPhysicalDeviceFeatures2)
            fail(PSK_ERROR_UNSUPPORTED, "the instance has no vkGetPhysicalDeviceProperties2 (Vulkan 1.1 is needed)");
        const psk::DeviceCaps caps = psk::queryDeviceCaps(vki, physicalDevice, apiVersion);
        psk::fillDeviceRequirements(caps, apiVersion, requested, pRequirements);
    });
}

PskResult pskCmdAttentionForward(PskAttention attention, VkCommandBuffer commandBuffer, const PskCmdForwardInfo* info) {
    return guarded(attention ? attention->context() : nullptr, "pskCmdAttentionForward", [&] {
        if (!attention) fail(PSK_ERROR_INVALID_ARGUMENT, "attention must not be NULL");
        if (!info) fail(PSK_ERROR_INVALID_ARGUMENT, "info must not be NULL");
        if (info->state && info->cuSeqlens)
            fail(PSK_ERROR_UNSUPPORTED, "info->cuSeqlens with info->state: state passing continues sequences at one position; "
                                        "call once per sequence");
        if (info->state)
            info->state->cmdForward(attention, commandBuffer, *info);
        else if (info->stateFirstSequence)
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->stateFirstSequence is ", info->stateFirstSequence, " but info->state is NULL");
        else
            attention->cmdForward(commandBuffer, *info);
    });
}

PskResult pskResetCommandDescriptors(PskAttention attention) {
    return guarded(attention ? attention->context() : nullptr, "pskResetCommandDescriptors", [&] {
        if (!attention) fail(PSK_ERROR_INVALID_ARGUMENT, "attention must not be NULL");
        attention->resetCommandDescriptors();
    });
}

PskResult pskAttentionForwardHost(PskAttention attention, const PskForwardHostInfo* info) {
    return guarded(attention ? attention->context() : nullptr, "pskAttentionForwardHost", [&] {
        if (!attention) fail(PSK_ERROR_INVALID_ARGUMENT, "attention must not be NULL");
        if (!info) fail(PSK_ERROR_INVALID_ARGUMENT, "info must not be NULL");
        if (info->state && info->cuSeqlens)
            fail(PSK_ERROR_UNSUPPORTED, "info->cuSeqlens with info->state: state passing continues sequences at one position; "
                                        "call once per sequence");
        if (info->state)
            info->state->forwardHost(attention, *info);
        else if (info->stateFirstSequence)
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->stateFirstSequence is ", info->stateFirstSequence, " but info->state is NULL");
        else
            attention->forwardHost(*info);
    });
}

PskResult pskGetWorkspaceSize(PskAttention attention, uint32_t batchSize, uint32_t seqLen, uint64_t* pBytes) {
    return guarded(attention ? attention->context() : nullptr, "pskGetWorkspaceSize", [&] {
        if (!attention) fail(PSK_ERROR_INVALID_ARGUMENT, "attention must not be NULL");
        if (!pBytes) fail(PSK_ERROR_INVALID_ARGUMENT, "pBytes must not be NULL");
        const psk::ForwardGeometry g = psk::makeForwardGeometry(attention->config(), attention->context()->caps(), batchSize,
                                                                seqLen, nullptr, nullptr, nullptr, nullptr);
        *pBytes = attention->workspaceBytes(g);
    });
}

PskResult pskGetStateWorkspaceSize(PskAttention attention, uint32_t batchSize, uint32_t seqLen, uint64_t* pBytes) {
    return guarded(attention ? attention->context() : nullptr, "pskGetStateWorkspaceSize", [&] {
        if (!attention) fail(PSK_ERROR_INVALID_ARGUMENT, "attention must not be NULL");
        if (!pBytes) fail(PSK_ERROR_INVALID_ARGUMENT, "pBytes must not be NULL");
        const psk::ForwardGeometry g = psk::makeForwardGeometry(attention->config(), attention->context()->caps(), batchSize,
                                                                seqLen, nullptr, nullptr, nullptr, nullptr);
        *pBytes = psk::stateForwardWorkspaceBytes(*attention, g);
    });
}

PskResult pskGetWorkspaceLayout(PskAttention attention, const PskWorkspaceLayoutInfo* info, uint32_t* pBufferCount,
                                uint64_t* pBufferSizes) {
    return guarded(attention ? attention->context() : nullptr, "pskGetWorkspaceLayout", [&] {
        if (!attention) fail(PSK_ERROR_INVALID_ARGUMENT, "attention must not be NULL");
        if (!info) fail(PSK_ERROR_INVALID_ARGUMENT, "info must not be NULL");
        if (!pBufferCount) fail(PSK_ERROR_INVALID_ARGUMENT, "pBufferCount must not be NULL");
        const psk::ForwardGeometry g = psk::makeForwardGeometry(attention->config(), attention->context()->caps(), info->batchSize,
                                                                info->seqLen, nullptr, nullptr, nullptr, nullptr);
        const psk::WorkspaceLayout layout =
            info->withDecodeState ? psk::stateForwardWorkspaceLayout(*attention, g) : attention->workspaceLayout(g);
        // maxBufferSize 0: exactly the host form's packing; otherwise the app's own cap as given.
        const psk::WorkspacePacking packing =
            info->maxBufferSize ? psk::packWorkspace(layout, info->maxBufferSize, "info->maxBufferSize")
                                : attention->hostPacking(layout);
        const uint32_t count = static_cast<uint32_t>(packing.bufferBytes.size());
        if (!pBufferSizes) {
            *pBufferCount = count;
            return;
        }
        if (*pBufferCount < count) {
            const uint32_t given = *pBufferCount;
            *pBufferCount = count;
            fail(PSK_ERROR_BUFFER_TOO_SMALL, "the workspace needs ", count, " buffers; *pBufferCount was ", given);
        }
        for (uint32_t i = 0; i < count; ++i) pBufferSizes[i] = packing.bufferBytes[i];
        *pBufferCount = count;
    });
}

PskResult pskGetAttentionPlan(PskAttention attention, char* text, size_t* pSize) {
    return guarded(attention ? attention->context() : nullptr, "pskGetAttentionPlan", [&] {
        if (!attention) fail(PSK_ERROR_INVALID_ARGUMENT, "attention must not be NULL");
        if (!pSize) fail(PSK_ERROR_INVALID_ARGUMENT, "pSize must not be NULL");
        std::string plan;
        for (const psk::KernelChoice& k : attention->forward().kernels()) plan += k.describe() + "\n";
        // Comment lines ("# "): the forward's own notes (the tuning table it read), the cooperative
        // switches that differ from the defaults, and the self-test's verdicts on this device
        // (forward/coopmat_self_test.hpp).
        for (const std::string& note : attention->forward().planNotes()) plan += "# " + note + "\n";
        std::string switches = psk::describeCoopMatSwitches(psk::coopMatSwitches());
        if (psk::coopMatEmulationRequested()) {
            const psk::CoopMatShapeChoice shape = psk::coopMatEmulationShape();
            if (shape.m != 16 || shape.n != 16 || shape.k != 16)
                switches += psk::cat(switches.empty() ? "" : ", ", "emulated shape ", shape.m, "x", shape.n, "x", shape.k);
        }
        if (!switches.empty()) plan += "# cooperative switches: " + switches + "\n";
        for (const psk::CoopSelfTestVerdict& v : psk::coopSelfTestVerdicts(attention->context()->caps()))
            plan += "# self-test: " + v.kernel + ": " + (v.passed ? "passed" : "FAILED, disabled on this device") + " (" + v.detail + ")\n";
        // The compiler's statistics of each kernel's pipeline (registers, spills, ...), where the
        // context captures them (PSK_PIPELINE_STATISTICS=1, vk/pipelines.hpp): which kernel spills.
        for (const psk::KernelChoice& k : attention->forward().kernels()) {
            const std::string stats = psk::kernelStatistics(attention->context()->pipelines(), k);
            if (!stats.empty()) plan += "# stats: " + k.variant + " " + stats + "\n";
        }
        const size_t needed = plan.size() + 1;
        if (!text) {
            *pSize = needed;
            return;
        }
        if (*pSize < needed) {
            const size_t given = *pSize;
            *pSize = needed;
            fail(PSK_ERROR_BUFFER_TOO_SMALL, "the plan needs ", needed, " bytes; *pSize was ", given);
        }
        std::memcpy(text, plan.c_str(), needed);
        *pSize = needed;
    });
}

PskResult pskGetAttentionInfo(PskAttention attention, PskAttentionInfo* pInfo) {
    return guarded(attention ? attention->context() : nullptr, "pskGetAttentionInfo", [&] {
        if (!attention) fail(PSK_ERROR_INVALID_ARGUMENT, "attention must not be NULL");
        if (!pInfo) fail(PSK_ERROR_INVALID_ARGUMENT, "pInfo must not be NULL");
        const psk::AttentionConfig& c = attention->config();
        PskAttentionInfo info{};
        info.kind = c.kind;
        info.flags = (c.causal ? uint32_t(PSK_ATTENTION_CAUSAL_BIT) : 0u) | (c.localExact ? uint32_t(PSK_ATTENTION_LOCAL_EXACT_BIT) : 0u) |
                     (c.referenceScaling ? uint32_t(PSK_ATTENTION_REFERENCE_SCALING_BIT) : 0u);
        info.degree = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0 : c.degree;
        info.scale = c.scale;
        info.numQueryHeads = c.numQueryHeads;
        info.numKeyValueHeads = c.numKeyValueHeads;
        info.headDim = c.headDim;
        info.valueDim = c.valueDim;
        info.dataType = c.dataType;
        info.layout = c.layout;
        if (const psk::PolysketchForward* p = attention->polysketch()) {
            info.sketchLength = p->plan().sketchLength;
            info.blockSize = p->plan().blockSize;
            info.features = p->plan().features;
        }
        *pInfo = info;
    });
}

// ---- Incremental decoding (lib/decode/) ----

PskResult pskCreateDecodeState(PskAttention attention, const PskDecodeStateCreateInfo* createInfo, PskDecodeState* pState) {
    return guarded(attention ? attention->context() : nullptr, "pskCreateDecodeState", [&] {
        if (!attention) fail(PSK_ERROR_INVALID_ARGUMENT, "attention must not be NULL");
        if (!createInfo) fail(PSK_ERROR_INVALID_ARGUMENT, "createInfo must not be NULL");
        if (!pState) fail(PSK_ERROR_INVALID_ARGUMENT, "pState must not be NULL");
        *pState = new PskDecodeState_T(attention, *createInfo);
    });
}

void pskDestroyDecodeState(PskDecodeState state) { delete state; }

PskResult pskGetDecodeStateSize(PskDecodeState state, uint64_t* pBytes) {
    return guarded(state ? state->context() : nullptr, "pskGetDecodeStateSize", [&] {
        if (!state) fail(PSK_ERROR_INVALID_ARGUMENT, "state must not be NULL");
        if (!pBytes) fail(PSK_ERROR_INVALID_ARGUMENT, "pBytes must not be NULL");
        *pBytes = state->stateBytes();
    });
}

PskResult pskGetDecodePosition(PskDecodeState state, uint32_t sequence, uint64_t* pPosition) {
    return guarded(state ? state->context() : nullptr, "pskGetDecodePosition", [&] {
        if (!state) fail(PSK_ERROR_INVALID_ARGUMENT, "state must not be NULL");
        if (!pPosition) fail(PSK_ERROR_INVALID_ARGUMENT, "pPosition must not be NULL");
        *pPosition = state->position(sequence);
    });
}

PskResult pskDecodePrefillHost(PskDecodeState state, const PskDecodePrefillInfo* info) {
    return guarded(state ? state->context() : nullptr, "pskDecodePrefillHost", [&] {
        if (!state) fail(PSK_ERROR_INVALID_ARGUMENT, "state must not be NULL");
        if (!info) fail(PSK_ERROR_INVALID_ARGUMENT, "info must not be NULL");
        state->prefill(*info);
    });
}

PskResult pskDecodeStepHost(PskDecodeState state, const PskDecodeStepInfo* info) {
    return guarded(state ? state->context() : nullptr, "pskDecodeStepHost", [&] {
        if (!state) fail(PSK_ERROR_INVALID_ARGUMENT, "state must not be NULL");
        if (!info) fail(PSK_ERROR_INVALID_ARGUMENT, "info must not be NULL");
        state->step(*info);
    });
}

PskResult pskCmdDecodeStep(PskDecodeState state, VkCommandBuffer commandBuffer, const PskCmdDecodeStepInfo* info) {
    return guarded(state ? state->context() : nullptr, "pskCmdDecodeStep", [&] {
        if (!state) fail(PSK_ERROR_INVALID_ARGUMENT, "state must not be NULL");
        if (!info) fail(PSK_ERROR_INVALID_ARGUMENT, "info must not be NULL");
        state->cmdStep(commandBuffer, *info);
    });
}

PskResult pskResetDecodeCommandDescriptors(PskDecodeState state) {
    return guarded(state ? state->context() : nullptr, "pskResetDecodeCommandDescriptors", [&] {
        if (!state) fail(PSK_ERROR_INVALID_ARGUMENT, "state must not be NULL");
        state->resetCommandDescriptors();
    });
}

PskResult pskResetDecodeSequence(PskDecodeState state, uint32_t sequence) {
    return guarded(state ? state->context() : nullptr, "pskResetDecodeSequence", [&] {
        if (!state) fail(PSK_ERROR_INVALID_ARGUMENT, "state must not be NULL");
        state->reset(sequence);
    });
}

PskResult pskSerializeDecodeState(PskDecodeState state, void* data, size_t* pSize) {
    return guarded(state ? state->context() : nullptr, "pskSerializeDecodeState", [&] {
        if (!state) fail(PSK_ERROR_INVALID_ARGUMENT, "state must not be NULL");
        if (!pSize) fail(PSK_ERROR_INVALID_ARGUMENT, "pSize must not be NULL");
        state->serialize(data, pSize);
    });
}

PskResult pskRestoreDecodeState(PskDecodeState state, const void* data, size_t size) {
    return guarded(state ? state->context() : nullptr, "pskRestoreDecodeState", [&] {
        if (!state) fail(PSK_ERROR_INVALID_ARGUMENT, "state must not be NULL");
        if (!data) fail(PSK_ERROR_INVALID_ARGUMENT, "data must not be NULL");
        state->restore(data, size);
    });
}

}  // extern "C"
