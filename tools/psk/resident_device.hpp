// psk's own Vulkan device for device-resident timing (psk bench --resident, psk tune): the Vulkan
// loader through dlopen, an instance and a device on the device the library picked, with what
// pskGetVulkanDeviceRequirements asks for, handed to the library as an app's (PskExternalVulkan);
// buffers, one-shot submissions, a full barrier and a timestamp pair around a recorded call.
#pragma once

#include <polysketch/polysketch.h>
#include <polysketch/polysketch_vulkan.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cli_util.hpp"
#include "vk/vulkan_functions.hpp"  // the feature structs of extensions newer than the installed Vulkan headers

namespace psk::bench {

#define PSK_BENCH_VK_INSTANCE_FUNCTIONS(X)                                                                       \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                       \
    X(vkGetPhysicalDeviceMemoryProperties) X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkCreateDevice)    \
    X(vkGetDeviceProcAddr)
#define PSK_BENCH_VK_DEVICE_FUNCTIONS(X)                                                                         \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements) \
    X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory)                   \
    X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers)          \
    X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkCmdCopyBuffer) X(vkCmdPipelineBarrier)                    \
    X(vkCmdWriteTimestamp) X(vkCmdResetQueryPool) X(vkCreateQueryPool) X(vkDestroyQueryPool)                    \
    X(vkGetQueryPoolResults) X(vkQueueSubmit) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences)            \
    X(vkResetFences) X(vkDeviceWaitIdle)

/** A Vulkan structure with its sType and everything else zero. */
template <typename T>
T vkStruct(VkStructureType type) {
    T s{};
    s.sType = type;
    return s;
}

/**
 * psk's own Vulkan instance and device on the device the library picked (same name, vendor and
 * device id), with what pskGetVulkanDeviceRequirements asks for, a compute queue with timestamps,
 * and a context adopting them (PskExternalVulkan): the app's side of pskCmdAttentionForward.
 */
class ResidentDevice {
public:
    ResidentDevice() = default;
    ResidentDevice(const ResidentDevice&) = delete;
    ResidentDevice& operator=(const ResidentDevice&) = delete;
    ~ResidentDevice() {
        if (context_) pskDestroyContext(context_);
        if (device_) {
            vkDeviceWaitIdle(device_);
            if (queries_) vkDestroyQueryPool(device_, queries_, nullptr);
            if (series_) vkDestroyQueryPool(device_, series_, nullptr);
            if (fence_) vkDestroyFence(device_, fence_, nullptr);
            if (pool_) vkDestroyCommandPool(device_, pool_, nullptr);
            vkDestroyDevice(device_, nullptr);
        }
        if (instance_) vkDestroyInstance(instance_, nullptr);
        if (loader_) dlclose(loader_);
    }

    /** Everything, on the device `want` describes. Empty on success, else why not. */
    std::string open(const PskDeviceInfo& want, psk::cli::MessageSink& sink) {
        for (const char* name : {"libvulkan.so.1", "libvulkan.so"})
            if ((loader_ = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
        if (!loader_) return "cannot load the Vulkan loader (libvulkan.so.1)";
        gipa_ = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(loader_, "vkGetInstanceProcAddr"));
        if (!gipa_) return "the Vulkan loader has no vkGetInstanceProcAddr";
        uint32_t version = VK_API_VERSION_1_0;
        if (auto enumerate = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(gipa_(nullptr, "vkEnumerateInstanceVersion")))
            enumerate(&version);
        if (version < VK_API_VERSION_1_1) return "the Vulkan loader is older than 1.1";
        apiVersion_ = std::min<uint32_t>(version, VK_API_VERSION_1_3);
        auto createInstance = reinterpret_cast<PFN_vkCreateInstance>(gipa_(nullptr, "vkCreateInstance"));
        auto app = vkStruct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
        app.pApplicationName = "psk bench --resident";
        app.apiVersion = apiVersion_;
        auto ii = vkStruct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
        ii.pApplicationInfo = &app;
        if (!createInstance || createInstance(&ii, nullptr, &instance_) != VK_SUCCESS) return "vkCreateInstance failed";
#define PSK_LOAD(f)                                                                 \
    f = reinterpret_cast<PFN_##f>(gipa_(instance_, #f));                            \
    if (!f) return "the Vulkan loader has no " #f;
        PSK_BENCH_VK_INSTANCE_FUNCTIONS(PSK_LOAD)
#undef PSK_LOAD
        uint32_t count = 0;
        vkEnumeratePhysicalDevices(instance_, &count, nullptr);
        std::vector<VkPhysicalDevice> devices(count);
        vkEnumeratePhysicalDevices(instance_, &count, devices.data());
        for (VkPhysicalDevice d : devices) {
            VkPhysicalDeviceProperties p{};
            vkGetPhysicalDeviceProperties(d, &p);
            if (std::strcmp(p.deviceName, want.name) == 0 && p.vendorID == want.vendorId && p.deviceID == want.deviceId) {
                physical_ = d;
                limits_ = p.limits;
                break;
            }
        }
        if (!physical_) return std::string("no Vulkan device named \"") + want.name + "\" in psk's own instance";
        vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);
        // Everything the library can use, cooperative matrices (and the Vulkan memory model they
        // are compiled under) included: the device a model runtime would create.
        PskVulkanDeviceRequirements req{};
        PskResult pr = pskGetVulkanDeviceRequirements(gipa_, instance_, apiVersion_, physical_, PSK_DEVICE_CAPABILITY_ALL, &req);
        if (pr != PSK_SUCCESS) return "pskGetVulkanDeviceRequirements: " + sink.describe(pr);
        family_ = req.computeQueueFamily;
        uint32_t familyCount = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(physical_, &familyCount, nullptr);
        std::vector<VkQueueFamilyProperties> families(familyCount);
        vkGetPhysicalDeviceQueueFamilyProperties(physical_, &familyCount, families.data());
        if (family_ >= familyCount) return "no compute queue";
        timestampBits_ = families[family_].timestampValidBits;
        if (timestampBits_ == 0) return "the compute queue has no timestamps";
        // The features the requirements name, in one pNext chain.
        auto features = vkStruct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
        auto storage16 = vkStruct<VkPhysicalDevice16BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
        auto float16 = vkStruct<VkPhysicalDeviceShaderFloat16Int8Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
        auto subgroup = vkStruct<VkPhysicalDeviceSubgroupSizeControlFeaturesEXT>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT);
        features.features.shaderInt64 = req.shaderInt64;
        features.pNext = &storage16;
        storage16.storageBuffer16BitAccess = req.storageBuffer16BitAccess;
        void** tail = &storage16.pNext;
        auto chain = [&tail](auto& s) {  // appends s to the pNext chain
            *tail = &s;
            tail = &s.pNext;
        };
        auto coopKHR = vkStruct<VkPhysicalDeviceCooperativeMatrixFeaturesKHR>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR);
        auto coopNV = vkStruct<VkPhysicalDeviceCooperativeMatrixFeaturesNV>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV);
        auto memoryModel = vkStruct<VkPhysicalDeviceVulkanMemoryModelFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES);
        auto bfloat16 = vkStruct<VkPhysicalDeviceShaderBfloat16FeaturesKHR>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR);
        if (req.shaderFloat16) {
            float16.shaderFloat16 = VK_TRUE;
            chain(float16);
        }
        if (req.subgroupSizeControl) {
            subgroup.subgroupSizeControl = VK_TRUE;
            subgroup.computeFullSubgroups = req.computeFullSubgroups;
            chain(subgroup);
        }
        if (req.cooperativeMatrixKHR) {
            coopKHR.cooperativeMatrix = VK_TRUE;
            chain(coopKHR);
        }
        if (req.cooperativeMatrixNV) {
            coopNV.cooperativeMatrix = VK_TRUE;
            chain(coopNV);
        }
        if (req.vulkanMemoryModel) {
            memoryModel.vulkanMemoryModel = VK_TRUE;
            memoryModel.vulkanMemoryModelDeviceScope = req.vulkanMemoryModelDeviceScope;
            chain(memoryModel);
        }
        if (req.shaderBFloat16Type) {
            bfloat16.shaderBFloat16Type = VK_TRUE;
            bfloat16.shaderBFloat16CooperativeMatrix = req.shaderBFloat16CooperativeMatrix;
            chain(bfloat16);
        }
        const float priority = 1.0f;
        auto qi = vkStruct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
        qi.queueFamilyIndex = family_;
        qi.queueCount = 1;
        qi.pQueuePriorities = &priority;
        auto di = vkStruct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
        di.pNext = &features;
        di.queueCreateInfoCount = 1;
        di.pQueueCreateInfos = &qi;
        di.enabledExtensionCount = req.extensionCount;
        di.ppEnabledExtensionNames = req.extensionNames;
        if (VkResult vr = vkCreateDevice(physical_, &di, nullptr, &device_); vr != VK_SUCCESS) {
            device_ = VK_NULL_HANDLE;
            return "vkCreateDevice failed (VkResult " + std::to_string(vr) + ")";
        }
#define PSK_LOAD(f)                                                                 \
    f = reinterpret_cast<PFN_##f>(vkGetDeviceProcAddr(device_, #f));                \
    if (!f) return "the device has no " #f;
        PSK_BENCH_VK_DEVICE_FUNCTIONS(PSK_LOAD)
#undef PSK_LOAD
        vkGetDeviceQueue(device_, family_, 0, &queue_);
        auto pi = vkStruct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
        pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        pi.queueFamilyIndex = family_;
        if (vkCreateCommandPool(device_, &pi, nullptr, &pool_) != VK_SUCCESS) return "vkCreateCommandPool failed";
        auto fi = vkStruct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
        if (vkCreateFence(device_, &fi, nullptr, &fence_) != VK_SUCCESS) return "vkCreateFence failed";
        auto qpi = vkStruct<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
        qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qpi.queryCount = 2;
        if (vkCreateQueryPool(device_, &qpi, nullptr, &queries_) != VK_SUCCESS) return "vkCreateQueryPool failed";
        external_.getInstanceProcAddr = gipa_;
        external_.instance = instance_;
        external_.instanceApiVersion = apiVersion_;
        external_.physicalDevice = physical_;
        external_.device = device_;
        external_.queueFamilyIndex = family_;
        external_.queue = queue_;
        external_.enabledCapabilities = req.supportedCapabilities;
        PskContextCreateInfo ci{};
        ci.externalVulkan = &external_;
        ci.messageCallback = psk::cli::MessageSink::callback;
        ci.messageUserData = &sink;
        pr = pskCreateContext(&ci, &context_);
        if (pr != PSK_SUCCESS) {
            context_ = nullptr;
            return "pskCreateContext on psk's own device: " + sink.describe(pr);
        }
        return {};
    }

    PskContext context() const { return context_; }

    /** A buffer and its memory (device-local when `hostVisible` is false). */
    struct Buffer {
        VkBuffer buffer = VK_NULL_HANDLE;
        VkDeviceMemory memory = VK_NULL_HANDLE;
        VkDeviceSize size = 0;
        void* mapped = nullptr;
    };

    std::string create(Buffer& b, VkDeviceSize size, bool hostVisible) {
        auto bi = vkStruct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
        bi.size = std::max<VkDeviceSize>(size, 4);
        bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        if (vkCreateBuffer(device_, &bi, nullptr, &b.buffer) != VK_SUCCESS) return "vkCreateBuffer of " + std::to_string(size) + " bytes failed";
        VkMemoryRequirements mr{};
        vkGetBufferMemoryRequirements(device_, b.buffer, &mr);
        const VkMemoryPropertyFlags want = hostVisible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                                       : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
        uint32_t type = ~0u;
        for (uint32_t i = 0; i < memory_.memoryTypeCount && type == ~0u; ++i)
            if ((mr.memoryTypeBits >> i & 1) && (memory_.memoryTypes[i].propertyFlags & want) == want) type = i;
        if (type == ~0u && !hostVisible)
            for (uint32_t i = 0; i < memory_.memoryTypeCount && type == ~0u; ++i)
                if (mr.memoryTypeBits >> i & 1) type = i;
        if (type == ~0u) return "no memory type for a buffer";
        auto ai = vkStruct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
        ai.allocationSize = mr.size;
        ai.memoryTypeIndex = type;
        if (VkResult vr = vkAllocateMemory(device_, &ai, nullptr, &b.memory); vr != VK_SUCCESS) {
            b.memory = VK_NULL_HANDLE;
            return "vkAllocateMemory of " + std::to_string(mr.size) + " bytes failed (VkResult " + std::to_string(vr) + ")";
        }
        if (vkBindBufferMemory(device_, b.buffer, b.memory, 0) != VK_SUCCESS) return "vkBindBufferMemory failed";
        if (hostVisible && vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped) != VK_SUCCESS) return "vkMapMemory failed";
        b.size = size;
        return {};
    }

    /**
     * Uploads each host array into its device buffer, once, through one host-visible staging
     * buffer of the largest size. Empty on success, else why not.
     */
    std::string upload(std::initializer_list<std::pair<const std::vector<uint8_t>*, Buffer*>> items) {
        size_t largest = 0;
        for (const auto& [host, device] : items) largest = std::max(largest, host->size());
        Buffer staging;
        std::string error = create(staging, largest, true);
        for (auto it = items.begin(); it != items.end() && error.empty(); ++it) {
            const std::vector<uint8_t>& host = *it->first;
            const VkBuffer dst = it->second->buffer;
            std::memcpy(staging.mapped, host.data(), host.size());
            error = submitOnce([&](VkCommandBuffer cb) { copy(cb, staging.buffer, dst, host.size()); });
        }
        destroy(staging);
        return error;
    }

    /** The workspace buffers into `fi` (one range, or a list kept alive in `ranges`). */
    static void bindWorkspaces(PskCmdForwardInfo& fi, const std::vector<Buffer>& ws, std::vector<PskWorkspaceRange>& ranges) {
        ranges.clear();
        for (const Buffer& b : ws) ranges.push_back({b.buffer, 0, b.size});
        if (ws.size() == 1) {
            fi.workspace = ws[0].buffer;
            fi.workspaceSize = ws[0].size;
        } else if (ws.size() > 1) {
            fi.workspaceCount = uint32_t(ws.size());
            fi.pWorkspaces = ranges.data();
        }
    }

    void destroy(Buffer& b) {
        if (b.mapped) vkUnmapMemory(device_, b.memory);
        if (b.buffer) vkDestroyBuffer(device_, b.buffer, nullptr);
        if (b.memory) vkFreeMemory(device_, b.memory, nullptr);
        b = Buffer{};
    }

    /** Records `record` into a fresh command buffer, submits it and waits. */
    template <typename F>
    std::string submitOnce(F record) {
        VkCommandBuffer cb = VK_NULL_HANDLE;
        std::string error = begin(cb);
        if (!error.empty()) return error;
        record(cb);
        error = endSubmitWait(cb);
        vkFreeCommandBuffers(device_, pool_, 1, &cb);
        return error;
    }

    std::string begin(VkCommandBuffer& cb) {
        auto ai = vkStruct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
        ai.commandPool = pool_;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        if (vkAllocateCommandBuffers(device_, &ai, &cb) != VK_SUCCESS) return "vkAllocateCommandBuffers failed";
        auto bi = vkStruct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
        if (vkBeginCommandBuffer(cb, &bi) != VK_SUCCESS) return "vkBeginCommandBuffer failed";
        return {};
    }

    std::string endSubmitWait(VkCommandBuffer cb) {
        if (vkEndCommandBuffer(cb) != VK_SUCCESS) return "vkEndCommandBuffer failed";
        return submitWait(cb);
    }

    std::string submitWait(VkCommandBuffer cb) {
        auto si = vkStruct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
        si.commandBufferCount = 1;
        si.pCommandBuffers = &cb;
        if (VkResult vr = vkQueueSubmit(queue_, 1, &si, fence_); vr != VK_SUCCESS) return "vkQueueSubmit failed (VkResult " + std::to_string(vr) + ")";
        const VkResult vr = vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX);
        vkResetFences(device_, 1, &fence_);
        return vr == VK_SUCCESS ? std::string() : "vkWaitForFences failed (VkResult " + std::to_string(vr) + ")";
    }

    /** A barrier between everything before (dispatches, copies) and everything after. */
    void fullBarrier(VkCommandBuffer cb) {
        auto mb = vkStruct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
        mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
        vkCmdPipelineBarrier(cb, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
    }

    void timestamps(VkCommandBuffer cb, bool start) {
        if (start) {
            vkCmdResetQueryPool(cb, queries_, 0, 2);
            vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, 0);
        } else {
            vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, 1);
        }
    }

    /** The milliseconds between the two timestamps of the last completed submission; < 0 on failure. */
    double elapsedMs() {
        uint64_t t[2] = {};
        if (vkGetQueryPoolResults(device_, queries_, 0, 2, sizeof t, t, sizeof t[0], VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) !=
            VK_SUCCESS)
            return -1;
        const uint64_t mask = timestampBits_ >= 64 ? ~0ull : (1ull << timestampBits_) - 1;
        return double((t[1] - t[0]) & mask) * limits_.timestampPeriod * 1e-6;
    }

    /**
     * A series of timestamps (psk bench --decode --resident: one after every step of a burst):
     * a second query pool of at least `count` queries. Empty on success, else why not.
     */
    std::string reserveSeries(uint32_t count) {
        if (series_ && seriesCount_ >= count) return {};
        if (series_) vkDestroyQueryPool(device_, series_, nullptr);
        series_ = VK_NULL_HANDLE;
        seriesCount_ = 0;
        auto qpi = vkStruct<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
        qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qpi.queryCount = count;
        if (vkCreateQueryPool(device_, &qpi, nullptr, &series_) != VK_SUCCESS) return "vkCreateQueryPool failed";
        seriesCount_ = count;
        return {};
    }
    /** Resets the series' first `count` queries (recorded before the first seriesMark). */
    void resetSeries(VkCommandBuffer cb, uint32_t count) { vkCmdResetQueryPool(cb, series_, 0, count); }
    /** Timestamp `index` of the series, once everything recorded before it has completed. */
    void seriesMark(VkCommandBuffer cb, uint32_t index) { vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, series_, index); }
    /** The milliseconds between consecutive marks 0 .. count - 1 of the last completed submission. */
    std::string seriesMs(uint32_t count, std::vector<double>& ms) {
        std::vector<uint64_t> t(count);
        if (vkGetQueryPoolResults(device_, series_, 0, count, t.size() * sizeof t[0], t.data(), sizeof t[0],
                                  VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
            return "vkGetQueryPoolResults failed";
        const uint64_t mask = timestampBits_ >= 64 ? ~0ull : (1ull << timestampBits_) - 1;
        ms.clear();
        for (uint32_t i = 1; i < count; ++i) ms.push_back(double((t[i] - t[i - 1]) & mask) * limits_.timestampPeriod * 1e-6);
        return {};
    }

    void copy(VkCommandBuffer cb, VkBuffer src, VkBuffer dst, VkDeviceSize size) {
        const VkBufferCopy region{0, 0, size};
        vkCmdCopyBuffer(cb, src, dst, 1, &region);
    }
    bool end(VkCommandBuffer cb) { return vkEndCommandBuffer(cb) == VK_SUCCESS; }
    void freeCommandBuffer(VkCommandBuffer cb) { vkFreeCommandBuffers(device_, pool_, 1, &cb); }
    void waitIdle() { vkDeviceWaitIdle(device_); }

private:
    void* loader_ = nullptr;
    PFN_vkGetInstanceProcAddr gipa_ = nullptr;
    uint32_t apiVersion_ = 0;
    VkInstance instance_ = VK_NULL_HANDLE;
    VkPhysicalDevice physical_ = VK_NULL_HANDLE;
    VkPhysicalDeviceLimits limits_{};
    VkPhysicalDeviceMemoryProperties memory_{};
    uint32_t family_ = ~0u, timestampBits_ = 0;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    VkQueryPool queries_ = VK_NULL_HANDLE;
    VkQueryPool series_ = VK_NULL_HANDLE;
    uint32_t seriesCount_ = 0;
    PskExternalVulkan external_{};
    PskContext context_ = nullptr;
#define PSK_DECLARE(f) PFN_##f f = nullptr;
    PSK_BENCH_VK_INSTANCE_FUNCTIONS(PSK_DECLARE)
    PSK_BENCH_VK_DEVICE_FUNCTIONS(PSK_DECLARE)
#undef PSK_DECLARE
};


}  // namespace psk::bench
