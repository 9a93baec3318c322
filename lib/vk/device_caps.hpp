// Everything the library needs to know about a physical device, detected in one place: limits,
// optional features, which extensions to enable, and the cooperative-matrix configurations.
#pragma once

#include <polysketch/polysketch.h>
#include <polysketch/polysketch_vulkan.h>

#include <array>
#include <string>
#include <vector>

#include "vk/vulkan_functions.hpp"

namespace psk {

struct CoopMatShape {
    uint32_t m, n, k;
};

/**
 * One entry of vkGetPhysicalDeviceCooperativeMatrixProperties{NV,KHR}, as enumerated. The NV and
 * KHR component types and scopes share their values (VkComponentTypeNV / VkScopeNV are the same
 * numbers); `result` is the NV struct's DType.
 */
struct CoopMatEntry {
    uint32_t m = 0, n = 0, k = 0;
    VkComponentTypeKHR a = VK_COMPONENT_TYPE_FLOAT16_KHR, b = VK_COMPONENT_TYPE_FLOAT16_KHR;
    VkComponentTypeKHR c = VK_COMPONENT_TYPE_FLOAT32_KHR, result = VK_COMPONENT_TYPE_FLOAT32_KHR;
    VkScopeKHR scope = VK_SCOPE_SUBGROUP_KHR;
    bool saturatingAccumulation = false;  // KHR only
};

struct DeviceCaps {
    VkPhysicalDeviceProperties properties{};
    std::string driverName;
    std::string driverInfo;
    uint32_t subgroupSize = 1;
    uint32_t minSubgroupSize = 1;
    uint32_t maxSubgroupSize = 1;
    // VK_EXT_subgroup_size_control (Vulkan 1.3): stages that take a required subgroup size, and
    // the most subgroups a workgroup may have (0 when the device has no subgroup size control).
    VkShaderStageFlags requiredSubgroupSizeStages = 0;
    uint32_t maxComputeWorkgroupSubgroups = 0;
    VkSubgroupFeatureFlags subgroupOperations = 0;  // supported in the compute stage (0 when it has none)
    uint64_t maxMemoryAllocationSize = 0;
    uint64_t deviceLocalBytes = 0;
    uint32_t computeQueueFamily = ~0u;
    uint32_t timestampValidBits = 0;
    uint32_t multiprocessorCount = 0;  // VK_NV_shader_sm_builtins' shaderSMCount; 0 where not reported

    // Optional features (detected as supported; enabled on the device when supported).
    bool storageBuffer16BitAccess = false;
    bool shaderFloat16 = false;
    bool subgroupSizeControl = false;
    bool computeFullSubgroups = false;
    bool pushDescriptors = false;
    bool cooperativeMatrixNV = false;
    bool cooperativeMatrixKHR = false;
    // 64-bit integers in shaders: the lane-team kernels load 8 floats at a time as a u64vec4.
    bool shaderInt64 = false;
    // The Vulkan memory model (core 1.2, VK_KHR_vulkan_memory_model): glslang compiles cooperative
    // matrices under it, so it is enabled only with a cooperative-matrix extension (true: supported
    // and enabled for that purpose; false on devices without cooperative matrices).
    bool vulkanMemoryModel = false;
    bool vulkanMemoryModelDeviceScope = false;  // enabled along with it where supported
    // VK_KHR_shader_bfloat16 (enabled only with VK_KHR_cooperative_matrix): bfloat16 in shaders,
    // and as cooperative-matrix operands.
    bool shaderBFloat16Type = false;
    bool shaderBFloat16CooperativeMatrix = false;
    // VK_KHR_pipeline_executable_properties' pipelineExecutableInfo: the compiler's statistics of
    // each pipeline (registers, spills, memory; the plan's "# stats:" lines). Opt-in, unlike the
    // features above: queryDeviceCaps reports it as supported without enabling it, and a context
    // keeps it on its own device only when PSK_PIPELINE_STATISTICS=1 (capturing statistics costs
    // pipeline-creation time); an app's device never has it (restrictDeviceCaps).
    bool pipelineExecutableInfo = false;
    // Every enumerated cooperative-matrix configuration of each extension (empty without it).
    std::vector<CoopMatEntry> coopMatPropertiesNV;
    std::vector<CoopMatEntry> coopMatPropertiesKHR;
    // float16 x float16 -> float32 subgroup-scope shapes of both lists (KHR first, no duplicates):
    // the summary PskDeviceInfo::cooperativeMatrixShapes reports.
    std::vector<CoopMatShape> coopMatShapes;

    // Extensions to enable at device creation (subset of the above).
    std::vector<const char*> deviceExtensions;

    const VkPhysicalDeviceLimits& limits() const { return properties.limits; }
    void fillInfo(PskDeviceInfo* info) const;
};

/** Queries `physicalDevice`. `apiVersion` is the instance's API version. */
DeviceCaps queryDeviceCaps(const InstanceFunctions& vki, VkPhysicalDevice physicalDevice,
                           uint32_t apiVersion);

/** The PskDeviceCapabilityFlags (polysketch_vulkan.h) that `caps` reports as supported. */
uint32_t supportedCapabilities(const DeviceCaps& caps);

/**
 * `caps` with only the capabilities in `enabled` (an app's device enables what it chose). Throws
 * UNSUPPORTED, naming `what`, when `enabled` names a capability the device does not support.
 */
DeviceCaps restrictDeviceCaps(DeviceCaps caps, uint32_t enabled, const char* what);

/** Extensions and features an app enables for `requested` (PskVulkanDeviceRequirements). */
void fillDeviceRequirements(const DeviceCaps& caps, uint32_t apiVersion, uint32_t requested,
                            PskVulkanDeviceRequirements* out);

/** Ranks a device type for automatic selection: higher is better. */
int deviceTypeRank(VkPhysicalDeviceType type);

/**
 * The feature structs to chain into VkDeviceCreateInfo::pNext so that everything `caps` reports
 * as supported gets enabled. Keep the object alive until vkCreateDevice returns.
 */
struct DeviceFeatureChain {
    VkPhysicalDeviceFeatures2 features2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features float16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT subgroupControl{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coopMatNV{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR coopMatKHR{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceVulkanMemoryModelFeatures memoryModel{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    VkPhysicalDeviceShaderBfloat16FeaturesKHR bfloat16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR};
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executableInfo{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};

    explicit DeviceFeatureChain(const DeviceCaps& caps);
    DeviceFeatureChain(const DeviceFeatureChain&) = delete;
    DeviceFeatureChain& operator=(const DeviceFeatureChain&) = delete;
    const void* head() const { return &features2; }
};

}  // namespace psk
