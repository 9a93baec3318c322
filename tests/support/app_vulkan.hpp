// The app's side of an embedding (docs/EMBEDDING.md): its own VkInstance (validation layer on when
// installed, messages collected), VkDevice with what pskGetVulkanDeviceRequirements asks for, a
// compute queue, host-visible buffers and one-shot command buffers; and a context adopting it.
// Links the Vulkan loader (Vulkan::Vulkan), as an app would.
#pragma once

#include <polysketch/polysketch_vulkan.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <string>
#include <vector>

#include "support/test_context.hpp"
#include "vk/vulkan_functions.hpp"  // feature structs newer than the installed Vulkan headers

namespace psk::test {

struct AppVulkan {
    VkInstance instance = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    VkPhysicalDevice physicalDevice = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    uint32_t family = ~0u;
    VkQueue queue = VK_NULL_HANDLE;
    VkCommandPool pool = VK_NULL_HANDLE;
    PskDeviceCapabilityFlags enabled = 0;
    VkPhysicalDeviceMemoryProperties memory{};
    VkPhysicalDeviceLimits limits{};
    std::mutex mutex;
    std::vector<std::string> validation;

    static VKAPI_ATTR VkBool32 VKAPI_CALL onMessage(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                                                    const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
        auto* self = static_cast<AppVulkan*>(user);
        std::lock_guard<std::mutex> lock(self->mutex);
        self->validation.emplace_back(data->pMessage ? data->pMessage : "");
        return VK_FALSE;
    }

    /** Creates everything, enabling the capabilities in `wanted` that the device supports. */
    explicit AppVulkan(PskDeviceCapabilityFlags wanted) {
        uint32_t layerCount = 0;
        vkEnumerateInstanceLayerProperties(&layerCount, nullptr);
        std::vector<VkLayerProperties> layers(layerCount);
        vkEnumerateInstanceLayerProperties(&layerCount, layers.data());
        const bool haveValidation = std::any_of(layers.begin(), layers.end(), [](const VkLayerProperties& l) {
            return std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0;
        });
        const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
        if (require && std::string(require) == "1") EXPECT_TRUE(haveValidation) << "PSK_REQUIRE_VALIDATION=1 but no validation layer";
        const char* layer = "VK_LAYER_KHRONOS_validation";
        const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
        app.apiVersion = VK_API_VERSION_1_2;
        VkInstanceCreateInfo ii{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
        ii.pApplicationInfo = &app;
        if (haveValidation) {
            ii.enabledLayerCount = 1;
            ii.ppEnabledLayerNames = &layer;
            ii.enabledExtensionCount = 1;
            ii.ppEnabledExtensionNames = &ext;
        }
        if (vkCreateInstance(&ii, nullptr, &instance) != VK_SUCCESS) {
            ADD_FAILURE() << "vkCreateInstance failed";
            return;
        }
        if (haveValidation) {
            auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
            VkDebugUtilsMessengerCreateInfoEXT m{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
            m.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
            m.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
            m.pfnUserCallback = &onMessage;
            m.pUserData = this;
            create(instance, &m, nullptr, &messenger);
        }
        uint32_t count = 1;
        vkEnumeratePhysicalDevices(instance, &count, &physicalDevice);
        if (!physicalDevice) {
            ADD_FAILURE() << "no device";
            return;
        }
        vkGetPhysicalDeviceMemoryProperties(physicalDevice, &memory);
        VkPhysicalDeviceProperties props{};
        vkGetPhysicalDeviceProperties(physicalDevice, &props);
        limits = props.limits;

        PskVulkanDeviceRequirements req{};
        EXPECT_EQ(pskGetVulkanDeviceRequirements(vkGetInstanceProcAddr, instance, app.apiVersion, physicalDevice, wanted, &req),
                  PSK_SUCCESS);
        enabled = req.supportedCapabilities;
        family = req.computeQueueFamily;
        VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
        VkPhysicalDeviceShaderFloat16Int8Features float16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
        VkPhysicalDeviceSubgroupSizeControlFeaturesEXT subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
        storage16.storageBuffer16BitAccess = req.storageBuffer16BitAccess;
        float16.shaderFloat16 = req.shaderFloat16;
        subgroup.subgroupSizeControl = req.subgroupSizeControl;
        subgroup.computeFullSubgroups = req.computeFullSubgroups;
        storage16.pNext = &float16;
        void** tail = &float16.pNext;
        if (req.subgroupSizeControl) {
            *tail = &subgroup;
            tail = &subgroup.pNext;
        }
        // Cooperative matrices with the Vulkan memory model (a GPU's; lavapipe has neither).
        VkPhysicalDeviceCooperativeMatrixFeaturesKHR coopKHR{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
        VkPhysicalDeviceCooperativeMatrixFeaturesNV coopNV{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
        VkPhysicalDeviceVulkanMemoryModelFeatures memoryModel{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
        VkPhysicalDeviceShaderBfloat16FeaturesKHR bfloat16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR};
        coopKHR.cooperativeMatrix = coopNV.cooperativeMatrix = VK_TRUE;
        memoryModel.vulkanMemoryModel = VK_TRUE;
        memoryModel.vulkanMemoryModelDeviceScope = req.vulkanMemoryModelDeviceScope;
        bfloat16.shaderBFloat16Type = VK_TRUE;
        bfloat16.shaderBFloat16CooperativeMatrix = req.shaderBFloat16CooperativeMatrix;
        for (auto [wantedHere, node] : {std::pair<bool, VkBaseOutStructure*>{req.cooperativeMatrixKHR == VK_TRUE, reinterpret_cast<VkBaseOutStructure*>(&coopKHR)},
                                        {req.cooperativeMatrixNV == VK_TRUE, reinterpret_cast<VkBaseOutStructure*>(&coopNV)},
                                        {req.vulkanMemoryModel == VK_TRUE, reinterpret_cast<VkBaseOutStructure*>(&memoryModel)},
                                        {req.shaderBFloat16Type == VK_TRUE, reinterpret_cast<VkBaseOutStructure*>(&bfloat16)}}) {
            if (!wantedHere) continue;
            *tail = node;
            tail = reinterpret_cast<void**>(&node->pNext);
        }
        const float priority = 1.0f;
        VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
        qi.queueFamilyIndex = family;
        qi.queueCount = 1;
        qi.pQueuePriorities = &priority;
        VkPhysicalDeviceFeatures core{};
        core.shaderInt64 = req.shaderInt64;
        VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
        di.pNext = &storage16;
        di.pEnabledFeatures = &core;
        di.queueCreateInfoCount = 1;
        di.pQueueCreateInfos = &qi;
        di.enabledExtensionCount = req.extensionCount;
        di.ppEnabledExtensionNames = req.extensionNames;
        if (vkCreateDevice(physicalDevice, &di, nullptr, &device) != VK_SUCCESS) {
            ADD_FAILURE() << "vkCreateDevice failed";
            return;
        }
        vkGetDeviceQueue(device, family, 0, &queue);
        VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        pi.queueFamilyIndex = family;
        vkCreateCommandPool(device, &pi, nullptr, &pool);
    }

    ~AppVulkan() {
        if (pool) vkDestroyCommandPool(device, pool, nullptr);
        if (device) vkDestroyDevice(device, nullptr);  // validation reports any object the library leaked
        if (messenger) {
            auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
                vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
            destroy(instance, messenger, nullptr);
        }
        if (instance) vkDestroyInstance(instance, nullptr);
        for (const std::string& m : validation) ADD_FAILURE() << "validation message (app instance): " << m;
    }
    AppVulkan(const AppVulkan&) = delete;
    AppVulkan& operator=(const AppVulkan&) = delete;

    PskExternalVulkan external() const {
        PskExternalVulkan e{};
        e.getInstanceProcAddr = vkGetInstanceProcAddr;
        e.instance = instance;
        e.instanceApiVersion = VK_API_VERSION_1_2;
        e.physicalDevice = physicalDevice;
        e.device = device;
        e.queueFamilyIndex = family;
        e.queue = queue;
        e.enabledCapabilities = enabled;
        return e;
    }

    /** A context adopting this device, its messages into `log`. */
    PskContext context(MessageLog& log) const {
        const PskExternalVulkan ext = external();
        PskContextCreateInfo info{};
        info.externalVulkan = &ext;
        info.messageCallback = &MessageLog::callback;
        info.messageUserData = &log;
        PskContext ctx = nullptr;
        EXPECT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS) << (log.errors.empty() ? "" : log.errors.back());
        return ctx;
    }

    /** A host-visible, coherent buffer (as a game's upload/readback heap would be), mapped. */
    struct HostBuffer {
        VkDevice device = VK_NULL_HANDLE;
        VkBuffer buffer = VK_NULL_HANDLE;
        VkDeviceMemory memory = VK_NULL_HANDLE;
        uint8_t* data = nullptr;
        VkDeviceSize size = 0;
        ~HostBuffer() {
            if (buffer) vkDestroyBuffer(device, buffer, nullptr);
            if (memory) vkFreeMemory(device, memory, nullptr);
        }
    };
    std::unique_ptr<HostBuffer> buffer(VkDeviceSize size) {
        auto b = std::make_unique<HostBuffer>();
        b->device = device;
        b->size = size;
        VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
        bi.size = size;
        bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        EXPECT_EQ(vkCreateBuffer(device, &bi, nullptr, &b->buffer), VK_SUCCESS);
        VkMemoryRequirements req{};
        vkGetBufferMemoryRequirements(device, b->buffer, &req);
        const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        uint32_t type = 0;
        while (type < memory.memoryTypeCount &&
               (!(req.memoryTypeBits & (1u << type)) || (memory.memoryTypes[type].propertyFlags & want) != want))
            ++type;
        VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
        ai.allocationSize = req.size;
        ai.memoryTypeIndex = type;
        EXPECT_EQ(vkAllocateMemory(device, &ai, nullptr, &b->memory), VK_SUCCESS);
        vkBindBufferMemory(device, b->buffer, b->memory, 0);
        void* p = nullptr;
        vkMapMemory(device, b->memory, 0, VK_WHOLE_SIZE, 0, &p);
        b->data = static_cast<uint8_t*>(p);
        return b;
    }

    /** Records with `record` into a fresh command buffer, submits to the app's queue, waits. */
    template <typename Fn>
    void run(Fn&& record) {
        VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        ai.commandPool = pool;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        VkCommandBuffer cmd = VK_NULL_HANDLE;
        vkAllocateCommandBuffers(device, &ai, &cmd);
        VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        vkBeginCommandBuffer(cmd, &bi);
        record(cmd);
        vkEndCommandBuffer(cmd);
        VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
        si.commandBufferCount = 1;
        si.pCommandBuffers = &cmd;
        EXPECT_EQ(vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE), VK_SUCCESS);
        vkQueueWaitIdle(queue);
        vkFreeCommandBuffers(device, pool, 1, &cmd);
    }
};

/** A global memory barrier from src (stage, access) to dst. */
inline void appBarrier(VkCommandBuffer cmd, VkPipelineStageFlags src, VkAccessFlags srcAccess, VkPipelineStageFlags dst,
                       VkAccessFlags dstAccess) {
    VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    b.srcAccessMask = srcAccess;
    b.dstAccessMask = dstAccess;
    vkCmdPipelineBarrier(cmd, src, dst, 0, 1, &b, 0, nullptr, 0, nullptr);
}

}  // namespace psk::test
