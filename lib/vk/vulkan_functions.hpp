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
    X(vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)

// Extensions newer than the installed Vulkan headers: the few types and values the library uses,
// as the Vulkan registry (vk.xml) defines them, so that a device's support does not depend on the
// headers the library was built with. VK_KHR_cooperative_matrix arrived with headers 1.3.255
// (Debian 12 ships 1.3.239), VK_KHR_shader_bfloat16 with 1.4.311.
#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME "VK_KHR_cooperative_matrix"
typedef enum VkComponentTypeKHR {
    VK_COMPONENT_TYPE_FLOAT16_KHR = 0,
    VK_COMPONENT_TYPE_FLOAT32_KHR = 1,
    VK_COMPONENT_TYPE_FLOAT64_KHR = 2,
    VK_COMPONENT_TYPE_SINT8_KHR = 3,
    VK_COMPONENT_TYPE_SINT16_KHR = 4,
    VK_COMPONENT_TYPE_SINT32_KHR = 5,
    VK_COMPONENT_TYPE_SINT64_KHR = 6,
    VK_COMPONENT_TYPE_UINT8_KHR = 7,
    VK_COMPONENT_TYPE_UINT16_KHR = 8,
    VK_COMPONENT_TYPE_UINT32_KHR = 9,
    VK_COMPONENT_TYPE_UINT64_KHR = 10,
    VK_COMPONENT_TYPE_MAX_ENUM_KHR = 0x7FFFFFFF
} VkComponentTypeKHR;
typedef enum VkScopeKHR {
    VK_SCOPE_DEVICE_KHR = 1,
    VK_SCOPE_WORKGROUP_KHR = 2,
    VK_SCOPE_SUBGROUP_KHR = 3,
    VK_SCOPE_QUEUE_FAMILY_KHR = 5,
    VK_SCOPE_MAX_ENUM_KHR = 0x7FFFFFFF
} VkScopeKHR;
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506001)
typedef struct VkCooperativeMatrixPropertiesKHR {
    VkStructureType sType;
    void* pNext;
    uint32_t MSize;
    uint32_t NSize;
    uint32_t KSize;
    VkComponentTypeKHR AType;
    VkComponentTypeKHR BType;
    VkComponentTypeKHR CType;
    VkComponentTypeKHR ResultType;
    VkBool32 saturatingAccumulation;
    VkScopeKHR scope;
} VkCooperativeMatrixPropertiesKHR;
typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
    VkStructureType sType;
    void* pNext;
    VkBool32 cooperativeMatrix;
    VkBool32 cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
typedef VkResult(VKAPI_PTR* PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(
    VkPhysicalDevice physicalDevice, uint32_t* pPropertyCount, VkCooperativeMatrixPropertiesKHR* pProperties);
#endif

#ifndef VK_KHR_shader_bfloat16
#define VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME "VK_KHR_shader_bfloat16"
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR ((VkStructureType)1000141000)
#define VK_COMPONENT_TYPE_BFLOAT16_KHR ((VkComponentTypeKHR)1000141000)
typedef struct VkPhysicalDeviceShaderBfloat16FeaturesKHR {
    VkStructureType sType;
    void* pNext;
    VkBool32 shaderBFloat16Type;
    VkBool32 shaderBFloat16DotProduct;
    VkBool32 shaderBFloat16CooperativeMatrix;
} VkPhysicalDeviceShaderBfloat16FeaturesKHR;
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
    X(vkQueueSubmit)                    \
    X(vkGetPipelineExecutablePropertiesKHR) \
    X(vkGetPipelineExecutableStatisticsKHR)

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
