// The Vulkan entry points the library calls, loaded at run time into per-instance and per-device
// tables: no global function pointers, no link-time dependency on the loader, and two contexts on
// two devices (or an app's own device) coexist.
#pragma once

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

#define PSK_VK_GLOBAL_FUNCTIONS(X)            \
    X(vkCreateInstance)                       \
    X(vkEnumerateInstanceExtensionProperties) \
    X(vkEnumerateInstanceLayerProperties)     \
    X(vkEnumerateInstanceVersion)

#define PSK_VK_INSTANCE_FUNCTIONS(X)                      \
    X(vkDestroyInstance)                                  \
    X(vkEnumeratePhysicalDevices)                         \
    X(vkGetPhysicalDeviceProperties)                      \
    X(vkGetPhysicalDeviceProperties2)                     \
    X(vkGetPhysicalDeviceFeatures2)                       \
    X(vkGetPhysicalDeviceMemoryProperties)                \
    X(vkGetPhysicalDeviceQueueFamilyProperties)           \
    X(vkEnumerateDeviceExtensionProperties)               \
    X(vkCreateDevice)                                     \
    X(vkGetDeviceProcAddr)                                \
    X(vkCreateDebugUtilsMessengerEXT)                     \
    X(vkDestroyDebugUtilsMessengerEXT)                    \
    X(vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)   \
    PSK_VK_KHR_COOPMAT_FUNCTIONS(X)

// VK_KHR_cooperative_matrix needs Vulkan headers 1.3.255 or later (Debian 12 ships 1.3.239).
#if defined(VK_KHR_cooperative_matrix)
#define PSK_HAVE_KHR_COOPMAT_HEADERS 1
#define PSK_VK_KHR_COOPMAT_FUNCTIONS(X) X(vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)
#else
#define PSK_HAVE_KHR_COOPMAT_HEADERS 0
#define PSK_VK_KHR_COOPMAT_FUNCTIONS(X)
#endif

#define PSK_VK_DEVICE_FUNCTIONS(X)      \
    X(vkDestroyDevice)                  \
    X(vkGetDeviceQueue)                 \
    X(vkDeviceWaitIdle)                 \
    X(vkCreateBuffer)                   \
    X(vkDestroyBuffer)                  \
    X(vkGetBufferMemoryRequirements)    \
    X(vkAllocateMemory)                 \
    X(vkFreeMemory)                     \
    X(vkBindBufferMemory)               \
    X(vkMapMemory)                      \
    X(vkUnmapMemory)                    \
    X(vkFlushMappedMemoryRanges)        \
    X(vkInvalidateMappedMemoryRanges)   \
    X(vkCreateShaderModule)             \
    X(vkDestroyShaderModule)            \
    X(vkCreateDescriptorSetLayout)      \
    X(vkDestroyDescriptorSetLayout)     \
    X(vkCreatePipelineLayout)           \
    X(vkDestroyPipelineLayout)          \
    X(vkCreateComputePipelines)         \
    X(vkDestroyPipeline)                \
    X(vkCreateDescriptorPool)           \
    X(vkDestroyDescriptorPool)          \
    X(vkResetDescriptorPool)            \
    X(vkAllocateDescriptorSets)         \
    X(vkUpdateDescriptorSets)           \
    X(vkCreateCommandPool)              \
    X(vkDestroyCommandPool)             \
    X(vkResetCommandPool)               \
    X(vkAllocateCommandBuffers)         \
    X(vkFreeCommandBuffers)             \
    X(vkBeginCommandBuffer)             \
    X(vkEndCommandBuffer)               \
    X(vkCmdBindPipeline)                \
    X(vkCmdBindDescriptorSets)          \
    X(vkCmdPushConstants)               \
    X(vkCmdPushDescriptorSetKHR)        \
    X(vkCmdDispatch)                    \
    X(vkCmdPipelineBarrier)             \
    X(vkCmdCopyBuffer)                  \
    X(vkCmdFillBuffer)                  \
    X(vkCmdResetQueryPool)              \
    X(vkCmdWriteTimestamp)              \
    X(vkCreateQueryPool)                \
    X(vkDestroyQueryPool)               \
    X(vkGetQueryPoolResults)            \
    X(vkCreateFence)                    \
    X(vkDestroyFence)                   \
    X(vkWaitForFences)                  \
    X(vkResetFences)                    \
    X(vkQueueSubmit)

namespace psk {

#define PSK_VK_DECLARE_MEMBER(name) PFN_##name name = nullptr;

struct GlobalFunctions {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
    PSK_VK_GLOBAL_FUNCTIONS(PSK_VK_DECLARE_MEMBER)
    void load(PFN_vkGetInstanceProcAddr getInstanceProcAddr);
};

struct InstanceFunctions {
    PSK_VK_INSTANCE_FUNCTIONS(PSK_VK_DECLARE_MEMBER)
    void load(PFN_vkGetInstanceProcAddr getInstanceProcAddr, VkInstance instance);
};

struct DeviceFunctions {
    PSK_VK_DEVICE_FUNCTIONS(PSK_VK_DECLARE_MEMBER)
    /** The app's allocation callbacks (adopted devices) or NULL: passed to every create, destroy,
     *  allocate and free call on the device. */
    const VkAllocationCallbacks* callbacks = nullptr;
    void load(PFN_vkGetDeviceProcAddr getDeviceProcAddr, VkDevice device);
};

#undef PSK_VK_DECLARE_MEMBER

}  // namespace psk
