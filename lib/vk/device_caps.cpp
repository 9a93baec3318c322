#include "vk/device_caps.hpp"

#include <algorithm>
#include <cstring>
#include <ios>

#include "util/error.hpp"

namespace psk {
namespace {

bool hasExtension(const std::vector<VkExtensionProperties>& list, const char* name) {
    return std::any_of(list.begin(), list.end(),
                       [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

void copyString(char* dst, size_t capacity, const std::string& src) {
    const size_t len = std::min(capacity - 1, src.size());
    std::memcpy(dst, src.data(), len);
    dst[len] = '\0';
}

/** Every entry of vkGetPhysicalDeviceCooperativeMatrixProperties{NV,KHR} (`Props` is the struct). */
template <typename Props, typename Fn>
std::vector<Props> enumerateCoopMat(Fn fn, VkPhysicalDevice pd, VkStructureType sType) {
    std::vector<Props> list;
    if (!fn) return list;
    for (int attempt = 0; attempt < 4; ++attempt) {
        uint32_t count = 0;
        if (fn(pd, &count, nullptr) != VK_SUCCESS || count == 0) return {};
        Props blank{};
        blank.sType = sType;
        list.assign(count, blank);
        const VkResult r = fn(pd, &count, list.data());
        if (r == VK_INCOMPLETE) continue;  // the list grew between the two calls
        if (r != VK_SUCCESS) return {};
        list.resize(count);
        return list;
    }
    return {};
}

bool isFloat16Shape(const CoopMatEntry& e) {
    return e.a == VK_COMPONENT_TYPE_FLOAT16_KHR && e.b == VK_COMPONENT_TYPE_FLOAT16_KHR &&
           e.c == VK_COMPONENT_TYPE_FLOAT32_KHR && e.result == VK_COMPONENT_TYPE_FLOAT32_KHR &&
           e.scope == VK_SCOPE_SUBGROUP_KHR;
}

}  // namespace

int deviceTypeRank(VkPhysicalDeviceType type) {
    switch (type) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
            return 4;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
            return 3;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
            return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU:
            return 1;
        default:
            return 0;
    }
}

DeviceCaps queryDeviceCaps(const InstanceFunctions& vki, VkPhysicalDevice pd, uint32_t apiVersion) {
    DeviceCaps caps;
    vki.vkGetPhysicalDeviceProperties(pd, &caps.properties);
    const uint32_t version = std::min(apiVersion, caps.properties.apiVersion);

    uint32_t extCount = 0;
    vki.vkEnumerateDeviceExtensionProperties(pd, nullptr, &extCount, nullptr);
    std::vector<VkExtensionProperties> exts(extCount);
    vki.vkEnumerateDeviceExtensionProperties(pd, nullptr, &extCount, exts.data());

    const bool v12 = version >= VK_API_VERSION_1_2;
    const bool v13 = version >= VK_API_VERSION_1_3;
    const bool hasFloat16Ext = v12 || hasExtension(exts, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
    const bool hasSubgroupControlExt = v13 || hasExtension(exts, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    const bool hasDriverPropsExt = v12 || hasExtension(exts, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
    caps.pushDescriptors = hasExtension(exts, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    const bool hasCoopNV = hasExtension(exts, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    const bool hasCoopKHR = hasExtension(exts, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
    const bool hasMemoryModelExt = v12 || hasExtension(exts, VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME);
    const bool hasBFloat16Ext = hasExtension(exts, VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
    const bool hasExecutableExt = hasExtension(exts, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);

    // Properties.
    VkPhysicalDeviceProperties2 props2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT subgroupControl{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
    VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties maintenance3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    props2.pNext = &subgroup;
    subgroup.pNext = &maintenance3;
    void** tail = &maintenance3.pNext;
    if (hasSubgroupControlExt) {
        *tail = &subgroupControl;
        tail = &subgroupControl.pNext;
    }
    if (hasDriverPropsExt) {
        *tail = &driver;
        tail = &driver.pNext;
    }
    // The multiprocessor count, where the driver reports it (NVIDIA): the decode step sizes its
    // workgroup count by it (decode/decode_step_plan.hpp).
    VkPhysicalDeviceShaderSMBuiltinsPropertiesNV smBuiltins{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
    if (hasExtension(exts, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
        *tail = &smBuiltins;
        tail = &smBuiltins.pNext;
    }
    vki.vkGetPhysicalDeviceProperties2(pd, &props2);
    caps.multiprocessorCount = smBuiltins.shaderSMCount;
    caps.subgroupSize = subgroup.subgroupSize;
    caps.subgroupOperations = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ? subgroup.supportedOperations : 0;
    caps.maxMemoryAllocationSize = maintenance3.maxMemoryAllocationSize;
    caps.minSubgroupSize = caps.maxSubgroupSize = subgroup.subgroupSize;
    if (hasSubgroupControlExt) {
        caps.minSubgroupSize = subgroupControl.minSubgroupSize;
        caps.maxSubgroupSize = subgroupControl.maxSubgroupSize;
        caps.requiredSubgroupSizeStages = subgroupControl.requiredSubgroupSizeStages;
        caps.maxComputeWorkgroupSubgroups = subgroupControl.maxComputeWorkgroupSubgroups;
    }
    if (hasDriverPropsExt) {
        caps.driverName = driver.driverName;
        caps.driverInfo = driver.driverInfo;
    }

    // Features.
    VkPhysicalDeviceFeatures2 features2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features float16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT subgroupFeatures{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coopNV{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    features2.pNext = &storage16;
    tail = &storage16.pNext;
    if (hasFloat16Ext) {
        *tail = &float16;
        tail = &float16.pNext;
    }
    if (hasSubgroupControlExt) {
        *tail = &subgroupFeatures;
        tail = &subgroupFeatures.pNext;
    }
    if (hasCoopNV) {
        *tail = &coopNV;
        tail = &coopNV.pNext;
    }
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR coopKHR{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    if (hasCoopKHR) {
        *tail = &coopKHR;
        tail = &coopKHR.pNext;
    }
    VkPhysicalDeviceVulkanMemoryModelFeatures memoryModel{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    if (hasMemoryModelExt) {
        *tail = &memoryModel;
        tail = &memoryModel.pNext;
    }
    VkPhysicalDeviceShaderBfloat16FeaturesKHR bfloat16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR};
    if (hasBFloat16Ext) {
        *tail = &bfloat16;
        tail = &bfloat16.pNext;
    }
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executableInfo{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
    if (hasExecutableExt) {
        *tail = &executableInfo;
        tail = &executableInfo.pNext;
    }
    vki.vkGetPhysicalDeviceFeatures2(pd, &features2);
    caps.storageBuffer16BitAccess = storage16.storageBuffer16BitAccess == VK_TRUE;
    caps.shaderInt64 = features2.features.shaderInt64 == VK_TRUE;
    caps.shaderFloat16 = hasFloat16Ext && float16.shaderFloat16 == VK_TRUE;
    caps.subgroupSizeControl = hasSubgroupControlExt && subgroupFeatures.subgroupSizeControl == VK_TRUE;
    caps.computeFullSubgroups = hasSubgroupControlExt && subgroupFeatures.computeFullSubgroups == VK_TRUE;
    caps.cooperativeMatrixNV = hasCoopNV && coopNV.cooperativeMatrix == VK_TRUE;
    caps.cooperativeMatrixKHR = hasCoopKHR && coopKHR.cooperativeMatrix == VK_TRUE;
    const bool anyCoopMat = caps.cooperativeMatrixNV || caps.cooperativeMatrixKHR;
    // Only cooperative-matrix shaders are compiled under the Vulkan memory model.
    caps.vulkanMemoryModel = anyCoopMat && hasMemoryModelExt && memoryModel.vulkanMemoryModel == VK_TRUE;
    caps.vulkanMemoryModelDeviceScope = caps.vulkanMemoryModel && memoryModel.vulkanMemoryModelDeviceScope == VK_TRUE;
    caps.shaderBFloat16Type = caps.cooperativeMatrixKHR && hasBFloat16Ext && bfloat16.shaderBFloat16Type == VK_TRUE;
    caps.shaderBFloat16CooperativeMatrix = caps.shaderBFloat16Type && bfloat16.shaderBFloat16CooperativeMatrix == VK_TRUE;
    // Supported only: not in deviceExtensions below, the context adds it when asked (device_caps.hpp).
    caps.pipelineExecutableInfo = hasExecutableExt && executableInfo.pipelineExecutableInfo == VK_TRUE;

    // Cooperative-matrix configurations: every enumerated entry of each extension.
    if (caps.cooperativeMatrixNV) {
        for (const auto& p : enumerateCoopMat<VkCooperativeMatrixPropertiesNV>(
                 vki.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV, pd, VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV)) {
            CoopMatEntry e;
            e.m = p.MSize;
            e.n = p.NSize;
            e.k = p.KSize;
            e.a = static_cast<VkComponentTypeKHR>(p.AType);
            e.b = static_cast<VkComponentTypeKHR>(p.BType);
            e.c = static_cast<VkComponentTypeKHR>(p.CType);
            e.result = static_cast<VkComponentTypeKHR>(p.DType);
            e.scope = static_cast<VkScopeKHR>(p.scope);
            caps.coopMatPropertiesNV.push_back(e);
        }
    }
    if (caps.cooperativeMatrixKHR) {
        for (const auto& p : enumerateCoopMat<VkCooperativeMatrixPropertiesKHR>(
                 vki.vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR, pd, VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR)) {
            CoopMatEntry e;
            e.m = p.MSize;
            e.n = p.NSize;
            e.k = p.KSize;
            e.a = p.AType;
            e.b = p.BType;
            e.c = p.CType;
            e.result = p.ResultType;
            e.scope = p.scope;
            e.saturatingAccumulation = p.saturatingAccumulation == VK_TRUE;
            caps.coopMatPropertiesKHR.push_back(e);
        }
    }
    for (const auto* list : {&caps.coopMatPropertiesKHR, &caps.coopMatPropertiesNV})
        for (const CoopMatEntry& e : *list) {
            if (!isFloat16Shape(e)) continue;
            const bool seen = std::any_of(caps.coopMatShapes.begin(), caps.coopMatShapes.end(), [&](const CoopMatShape& s) {
                return s.m == e.m && s.n == e.n && s.k == e.k;
            });
            if (!seen) caps.coopMatShapes.push_back({e.m, e.n, e.k});
        }

    // Memory and queues.
    VkPhysicalDeviceMemoryProperties mem{};
    vki.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
        if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) caps.deviceLocalBytes += mem.memoryHeaps[i].size;

    uint32_t familyCount = 0;
    vki.vkGetPhysicalDeviceQueueFamilyProperties(pd, &familyCount, nullptr);
    std::vector<VkQueueFamilyProperties> families(familyCount);
    vki.vkGetPhysicalDeviceQueueFamilyProperties(pd, &familyCount, families.data());
    // Prefer a compute queue without graphics (an async compute queue), else any compute queue.
    for (int pass = 0; pass < 2 && caps.computeQueueFamily == ~0u; ++pass) {
        for (uint32_t i = 0; i < familyCount; ++i) {
            const VkQueueFlags f = families[i].queueFlags;
            if (!(f & VK_QUEUE_COMPUTE_BIT)) continue;
            if (pass == 0 && (f & VK_QUEUE_GRAPHICS_BIT)) continue;
            caps.computeQueueFamily = i;
            caps.timestampValidBits = families[i].timestampValidBits;
            break;
        }
    }

    // Extensions to enable.
    if (!v12 && caps.shaderFloat16) caps.deviceExtensions.push_back(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
    if (!v13 && caps.subgroupSizeControl) caps.deviceExtensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    if (caps.pushDescriptors) caps.deviceExtensions.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    if (caps.cooperativeMatrixNV) caps.deviceExtensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    if (caps.cooperativeMatrixKHR) caps.deviceExtensions.push_back(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
    if (!v12 && caps.vulkanMemoryModel) caps.deviceExtensions.push_back(VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME);
    if (caps.shaderBFloat16Type) caps.deviceExtensions.push_back(VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
    return caps;
}

DeviceFeatureChain::DeviceFeatureChain(const DeviceCaps& caps) {
    // Enable exactly what was detected; every struct stays in the chain (all-false is harmless).
    features2.pNext = &storage16;
    features2.features.shaderInt64 = caps.shaderInt64;
    storage16.storageBuffer16BitAccess = caps.storageBuffer16BitAccess;
    void** tail = &storage16.pNext;
    if (caps.shaderFloat16) {
        float16.shaderFloat16 = VK_TRUE;
        *tail = &float16;
        tail = &float16.pNext;
    }
    if (caps.subgroupSizeControl) {
        subgroupControl.subgroupSizeControl = VK_TRUE;
        subgroupControl.computeFullSubgroups = caps.computeFullSubgroups;
        *tail = &subgroupControl;
        tail = &subgroupControl.pNext;
    }
    if (caps.cooperativeMatrixNV) {
        coopMatNV.cooperativeMatrix = VK_TRUE;
        *tail = &coopMatNV;
        tail = &coopMatNV.pNext;
    }
    if (caps.cooperativeMatrixKHR) {
        coopMatKHR.cooperativeMatrix = VK_TRUE;
        *tail = &coopMatKHR;
        tail = &coopMatKHR.pNext;
    }
    if (caps.vulkanMemoryModel) {
        memoryModel.vulkanMemoryModel = VK_TRUE;
        memoryModel.vulkanMemoryModelDeviceScope = caps.vulkanMemoryModelDeviceScope;
        *tail = &memoryModel;
        tail = &memoryModel.pNext;
    }
    if (caps.shaderBFloat16Type) {
        bfloat16.shaderBFloat16Type = VK_TRUE;
        bfloat16.shaderBFloat16CooperativeMatrix = caps.shaderBFloat16CooperativeMatrix;
        *tail = &bfloat16;
        tail = &bfloat16.pNext;
    }
    if (caps.pipelineExecutableInfo) {
        executableInfo.pipelineExecutableInfo = VK_TRUE;
        *tail = &executableInfo;
        tail = &executableInfo.pNext;
    }
}

uint32_t supportedCapabilities(const DeviceCaps& caps) {
    uint32_t flags = 0;
    if (caps.shaderFloat16) flags |= PSK_DEVICE_CAPABILITY_FLOAT16_ARITHMETIC_BIT;
    if (caps.storageBuffer16BitAccess) flags |= PSK_DEVICE_CAPABILITY_16BIT_STORAGE_BIT;
    if (caps.subgroupSizeControl) flags |= PSK_DEVICE_CAPABILITY_SUBGROUP_SIZE_CONTROL_BIT;
    if (caps.pushDescriptors) flags |= PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT;
    if (caps.cooperativeMatrixNV || caps.cooperativeMatrixKHR) flags |= PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT;
    if (caps.shaderInt64) flags |= PSK_DEVICE_CAPABILITY_INT64_BIT;
    return flags;
}

DeviceCaps restrictDeviceCaps(DeviceCaps caps, uint32_t enabled, const char* what) {
    const uint32_t missing = enabled & ~supportedCapabilities(caps);
    if (missing)
        fail(PSK_ERROR_UNSUPPORTED, what, "->enabledCapabilities names capabilities 0x", std::hex, missing, std::dec,
             " that device \"", caps.properties.deviceName, "\" does not support");
    if (!(enabled & PSK_DEVICE_CAPABILITY_FLOAT16_ARITHMETIC_BIT)) caps.shaderFloat16 = false;
    if (!(enabled & PSK_DEVICE_CAPABILITY_16BIT_STORAGE_BIT)) caps.storageBuffer16BitAccess = false;
    if (!(enabled & PSK_DEVICE_CAPABILITY_SUBGROUP_SIZE_CONTROL_BIT)) caps.subgroupSizeControl = caps.computeFullSubgroups = false;
    if (!(enabled & PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT)) caps.pushDescriptors = false;
    if (!(enabled & PSK_DEVICE_CAPABILITY_INT64_BIT)) caps.shaderInt64 = false;
    if (!(enabled & PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT)) {
        caps.cooperativeMatrixNV = caps.cooperativeMatrixKHR = false;
        caps.coopMatPropertiesNV.clear();
        caps.coopMatPropertiesKHR.clear();
        caps.coopMatShapes.clear();
    } else if (caps.cooperativeMatrixKHR) {
        caps.cooperativeMatrixNV = false;  // the requirements name the KHR extension when both exist
        caps.coopMatPropertiesNV.clear();
    }
    // The cooperative-matrix capability includes what the requirements name with it (the Vulkan
    // memory model the kernels are compiled under; VK_KHR_shader_bfloat16 where the device has it):
    // an app that enabled the capability enabled those (fillDeviceRequirements).
    if (!(enabled & PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT)) {
        caps.vulkanMemoryModel = caps.vulkanMemoryModelDeviceScope = false;
        caps.shaderBFloat16Type = caps.shaderBFloat16CooperativeMatrix = false;
    }
    // Subgroup sizes outside [min, max] of the control extension are not requestable without it.
    if (!caps.subgroupSizeControl) {
        caps.minSubgroupSize = caps.maxSubgroupSize = caps.subgroupSize;
        caps.requiredSubgroupSizeStages = 0;
    }
    caps.pipelineExecutableInfo = false;  // not a capability an app enables for the library
    caps.deviceExtensions.clear();        // the app created the device
    return caps;
}

void fillDeviceRequirements(const DeviceCaps& caps, uint32_t apiVersion, uint32_t requested, PskVulkanDeviceRequirements* out) {
    *out = PskVulkanDeviceRequirements{};
    const uint32_t version = std::min(apiVersion, caps.properties.apiVersion);
    const uint32_t flags = requested & supportedCapabilities(caps);
    out->supportedCapabilities = flags;
    out->computeQueueFamily = caps.computeQueueFamily;
    auto add = [&](const char* name) { out->extensionNames[out->extensionCount++] = name; };
    if (flags & PSK_DEVICE_CAPABILITY_FLOAT16_ARITHMETIC_BIT) {
        out->shaderFloat16 = VK_TRUE;
        if (version < VK_API_VERSION_1_2) add(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
    }
    if (flags & PSK_DEVICE_CAPABILITY_16BIT_STORAGE_BIT) out->storageBuffer16BitAccess = VK_TRUE;
    if (flags & PSK_DEVICE_CAPABILITY_SUBGROUP_SIZE_CONTROL_BIT) {
        out->subgroupSizeControl = VK_TRUE;
        out->computeFullSubgroups = caps.computeFullSubgroups ? VK_TRUE : VK_FALSE;
        if (version < VK_API_VERSION_1_3) add(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    }
    if (flags & PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT) add(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    if (flags & PSK_DEVICE_CAPABILITY_INT64_BIT) out->shaderInt64 = VK_TRUE;
    if (flags & PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT) {
        if (caps.cooperativeMatrixKHR) {
            out->cooperativeMatrixKHR = VK_TRUE;
            add(VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME);
        } else {
            out->cooperativeMatrixNV = VK_TRUE;
            add(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
        }
        // The cooperative kernels are compiled under the Vulkan memory model (without it they stay
        // off, coopmat_selection.cpp); bfloat16 operands need VK_KHR_shader_bfloat16.
        if (caps.vulkanMemoryModel) {
            out->vulkanMemoryModel = VK_TRUE;
            out->vulkanMemoryModelDeviceScope = caps.vulkanMemoryModelDeviceScope ? VK_TRUE : VK_FALSE;
            if (version < VK_API_VERSION_1_2) add(VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME);
        }
        if (caps.cooperativeMatrixKHR && caps.shaderBFloat16Type) {
            out->shaderBFloat16Type = VK_TRUE;
            out->shaderBFloat16CooperativeMatrix = caps.shaderBFloat16CooperativeMatrix ? VK_TRUE : VK_FALSE;
            add(VK_KHR_SHADER_BFLOAT16_EXTENSION_NAME);
        }
    }
}

void DeviceCaps::fillInfo(PskDeviceInfo* info) const {
    *info = PskDeviceInfo{};
    copyString(info->name, sizeof(info->name), properties.deviceName);
    copyString(info->driverName, sizeof(info->driverName), driverName);
    copyString(info->driverInfo, sizeof(info->driverInfo), driverInfo);
    info->vendorId = properties.vendorID;
    info->deviceId = properties.deviceID;
    info->deviceType = static_cast<uint32_t>(properties.deviceType);
    info->apiVersion = properties.apiVersion;
    info->driverVersion = properties.driverVersion;
    info->subgroupSize = subgroupSize;
    info->minSubgroupSize = minSubgroupSize;
    info->maxSubgroupSize = maxSubgroupSize;
    info->maxComputeSharedMemorySize = limits().maxComputeSharedMemorySize;
    info->maxComputeWorkGroupInvocations = limits().maxComputeWorkGroupInvocations;
    info->maxStorageBufferRange = limits().maxStorageBufferRange;
    info->maxMemoryAllocationSize = maxMemoryAllocationSize;
    info->maxAllocationSize = maxMemoryAllocationSize;  // a context reports its own cap instead
    info->deviceLocalMemoryBytes = deviceLocalBytes;
    info->timestampPeriodNs = limits().timestampPeriod;
    info->storageBuffer16BitAccess = storageBuffer16BitAccess;
    info->shaderFloat16 = shaderFloat16;
    info->subgroupSizeControl = subgroupSizeControl;
    info->pushDescriptors = pushDescriptors;
    info->cooperativeMatrixNV = cooperativeMatrixNV;
    info->cooperativeMatrixKHR = cooperativeMatrixKHR;
    info->cooperativeMatrixShapeCount = static_cast<uint32_t>(std::min<size_t>(coopMatShapes.size(), 8));
    for (uint32_t i = 0; i < info->cooperativeMatrixShapeCount; ++i) {
        info->cooperativeMatrixShapes[i][0] = coopMatShapes[i].m;
        info->cooperativeMatrixShapes[i][1] = coopMatShapes[i].n;
        info->cooperativeMatrixShapes[i][2] = coopMatShapes[i].k;
    }
    info->vulkanMemoryModel = vulkanMemoryModel;
    info->bfloat16CooperativeMatrix = shaderBFloat16Type && shaderBFloat16CooperativeMatrix;
    const uint32_t capacity = sizeof(info->cooperativeMatrixProperties) / sizeof(info->cooperativeMatrixProperties[0]);
    info->cooperativeMatrixPropertyTotal = static_cast<uint32_t>(coopMatPropertiesNV.size() + coopMatPropertiesKHR.size());
    for (uint32_t extension = 0; extension < 2; ++extension)
        for (const CoopMatEntry& e : extension == 0 ? coopMatPropertiesNV : coopMatPropertiesKHR) {
            if (info->cooperativeMatrixPropertyCount == capacity) break;
            PskCooperativeMatrixProperty& p = info->cooperativeMatrixProperties[info->cooperativeMatrixPropertyCount++];
            p.extension = extension;
            p.m = e.m;
            p.n = e.n;
            p.k = e.k;
            p.aType = static_cast<uint32_t>(e.a);
            p.bType = static_cast<uint32_t>(e.b);
            p.cType = static_cast<uint32_t>(e.c);
            p.resultType = static_cast<uint32_t>(e.result);
            p.scope = static_cast<uint32_t>(e.scope);
            p.saturatingAccumulation = e.saturatingAccumulation;
        }
}

}  // namespace psk
