#include "vk/context.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "util/error.hpp"
#include "vk/submitter.hpp"
#include "vk/vk_result.hpp"

using namespace psk;

namespace {

/** The device as tuning tables name it. */
TuningDeviceIdentity tuningIdentity(const DeviceCaps& caps) {
    TuningDeviceIdentity id;
    id.vendorId = caps.properties.vendorID;
    id.deviceId = caps.properties.deviceID;
    id.driverVersion = caps.properties.driverVersion;
    id.name = caps.properties.deviceName;
    return id;
}

}  // namespace

PskContext_T::PskContext_T(const PskContextCreateInfo& info)
    : callback_(info.messageCallback), userData_(info.messageUserData) {
    if (info.externalVulkan)
        adopt(*info.externalVulkan);
    else
        createOwnDevice(info);

    // From here on the device exists: a failure must destroy it (the destructor does not run for a
    // constructor that throws), or every failed creation would leave a VkDevice behind.
    ShaderReplacement replacement;
    try {
        if (!vk_.vkGetDeviceQueue) fail(PSK_ERROR_VULKAN, "vkGetDeviceProcAddr returned no vkGetDeviceQueue");
        if (!external_) vk_.vkGetDeviceQueue(device_, caps_.computeQueueFamily, 0, &queue_);
        if (!vk_.vkCmdPushDescriptorSetKHR) caps_.pushDescriptors = false;
        if (!vk_.vkGetPipelineExecutablePropertiesKHR || !vk_.vkGetPipelineExecutableStatisticsKHR)
            caps_.pipelineExecutableInfo = false;
        VkPhysicalDeviceMemoryProperties memProps{};
        vki().vkGetPhysicalDeviceMemoryProperties(physicalDevice_, &memProps);
        // A smaller cap than the device's makes every allocation (and so the workspace's split) obey it.
        maxAllocationSize_ = caps_.maxMemoryAllocationSize;
        if (info.maxAllocationSize && (!maxAllocationSize_ || info.maxAllocationSize < maxAllocationSize_))
            maxAllocationSize_ = info.maxAllocationSize;
        allocator_ = std::make_unique<Allocator>(vk_, device_, memProps, maxAllocationSize_, info.deviceMemoryLimit);
        replacement = ShaderReplacement::fromEnvironment();
        pipelines_ = std::make_unique<Pipelines>(vk_, device_, caps_, replacement, emulatedProductsFromEnvironment());
        // A table named by the create info is read now, so that a bad path fails here.
        tuningGiven_ = info.tuningTable && info.tuningTable[0];
        tuning_ = selectTuningTable(tuningGiven_ ? info.tuningTable : "", "PskContextCreateInfo::tuningTable", tuningIdentity(caps_),
                                    embeddedTuningTables());
    } catch (...) {
        pipelines_.reset();
        allocator_.reset();
        if (!external_ && vk_.vkDestroyDevice) vk_.vkDestroyDevice(device_, nullptr);
        throw;
    }
    message(PSK_MESSAGE_SEVERITY_INFO, PSK_SUCCESS,
            cat("device: ", caps_.properties.deviceName, " (", caps_.driverName, ")",
                external_ ? ", the application's" : "", instance_ && instance_->validationEnabled() ? ", validation on" : ""));
    if (pipelines_->emulatedProducts() != EmulatedProducts::Ieee)
        message(PSK_MESSAGE_SEVERITY_INFO, PSK_SUCCESS,
                cat("emulated cooperative products: ", emulatedProductsName(pipelines_->emulatedProducts()),
                    " (PSK_COOPMAT_EMULATED_PRODUCTS, a diagnostic: vk/emulated_products.hpp)"));
    if (replacement.active())
        message(PSK_MESSAGE_SEVERITY_INFO, PSK_SUCCESS,
                cat("shader replacement (a diagnostic, vk/shader_replacement.hpp):",
                    replacement.dumpDir.empty() ? "" : " every specialization's SPIR-V written to " + replacement.dumpDir + " (PSK_SHADER_DUMP);",
                    replacement.replaceDir.empty() ? "" : " modules read from " + replacement.replaceDir + " where a file names the specialization (PSK_SHADER_REPLACE)"));
}

psk::TuningSelection PskContext_T::tuningSelection() const {
    if (tuningGiven_) return tuning_;
    const char* env = std::getenv("PSK_TUNING_TABLE");
    if (env && env[0]) return selectTuningTable(env, "PSK_TUNING_TABLE", tuningIdentity(caps_), embeddedTuningTables());
    return tuning_;
}

void PskContext_T::createOwnDevice(const PskContextCreateInfo& info) {
    int validation = 0;
    const char* env = std::getenv("PSK_VALIDATION");
    if ((info.flags & PSK_CONTEXT_ENABLE_VALIDATION_BIT) || (env && std::strcmp(env, "1") == 0)) validation = 1;
    if (info.flags & PSK_CONTEXT_REQUIRE_VALIDATION_BIT) validation = 2;

    instance_ = std::make_unique<Instance>(validation, [this](PskMessageSeverity s, PskResult r, const std::string& m) {
        if (s == PSK_MESSAGE_SEVERITY_VALIDATION) ++validationMessages_;
        message(s, r, m);
    });
    physicalDevice_ = instance_->select(info.device);
    caps_ = queryDeviceCaps(instance_->vk(), physicalDevice_, instance_->apiVersion());
    if (caps_.computeQueueFamily == ~0u)
        fail(PSK_ERROR_NO_DEVICE, "device \"", caps_.properties.deviceName, "\" has no compute queue");
    // The compiler's statistics per pipeline (the plan's "# stats:" lines) only when asked for:
    // capturing them makes every pipeline creation slower, and most runs never read them.
    const char* statistics = std::getenv("PSK_PIPELINE_STATISTICS");
    if (caps_.pipelineExecutableInfo && statistics && std::strcmp(statistics, "1") == 0)
        caps_.deviceExtensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    else
        caps_.pipelineExecutableInfo = false;

    const float priority = 1.0f;
    VkDeviceQueueCreateInfo queueInfo{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    queueInfo.queueFamilyIndex = caps_.computeQueueFamily;
    queueInfo.queueCount = 1;
    queueInfo.pQueuePriorities = &priority;
    DeviceFeatureChain features(caps_);
    VkDeviceCreateInfo deviceInfo{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    deviceInfo.pNext = features.head();
    deviceInfo.queueCreateInfoCount = 1;
    deviceInfo.pQueueCreateInfos = &queueInfo;
    deviceInfo.enabledExtensionCount = static_cast<uint32_t>(caps_.deviceExtensions.size());
    deviceInfo.ppEnabledExtensionNames = caps_.deviceExtensions.data();
    // The VkResult, by name and number, and the device: VK_ERROR_INITIALIZATION_FAILED or
    // VK_ERROR_OUT_OF_DEVICE_MEMORY here (a GPU out of contexts or memory) is not "no device".
    const VkResult r = instance_->vk().vkCreateDevice(physicalDevice_, &deviceInfo, nullptr, &device_);
    if (r != VK_SUCCESS) {
        device_ = VK_NULL_HANDLE;
        fail(toPskResult(r), "vkCreateDevice on \"", caps_.properties.deviceName, "\" failed: ", vkResultName(r), " (",
             static_cast<int>(r), ")");
    }
    vk_.load(instance_->vk().vkGetDeviceProcAddr, device_);
}

void PskContext_T::adopt(const PskExternalVulkan& e) {
    if (!e.getInstanceProcAddr) fail(PSK_ERROR_INVALID_ARGUMENT, "externalVulkan->getInstanceProcAddr must not be NULL");
    if (!e.instance) fail(PSK_ERROR_INVALID_ARGUMENT, "externalVulkan->instance must not be VK_NULL_HANDLE");
    if (!e.physicalDevice) fail(PSK_ERROR_INVALID_ARGUMENT, "externalVulkan->physicalDevice must not be VK_NULL_HANDLE");
    if (!e.device) fail(PSK_ERROR_INVALID_ARGUMENT, "externalVulkan->device must not be VK_NULL_HANDLE");
    if (!e.queue) fail(PSK_ERROR_INVALID_ARGUMENT, "externalVulkan->queue must not be VK_NULL_HANDLE");
    if (e.enabledCapabilities & ~uint32_t(PSK_DEVICE_CAPABILITY_ALL))
        fail(PSK_ERROR_INVALID_ARGUMENT, "unknown bits in externalVulkan->enabledCapabilities");
    const uint32_t apiVersion = e.instanceApiVersion ? e.instanceApiVersion : VK_API_VERSION_1_1;
    if (apiVersion < VK_API_VERSION_1_1)
        fail(PSK_ERROR_UNSUPPORTED, "polysketch needs a Vulkan 1.1 instance (externalVulkan->instanceApiVersion)");
    external_ = true;
    externalVki_.load(e.getInstanceProcAddr, e.instance);
    if (!externalVki_.vkGetDeviceProcAddr || !externalVki_.vkGetPhysicalDeviceProperties2)
        fail(PSK_ERROR_UNSUPPORTED, "externalVulkan->getInstanceProcAddr returned no vkGetDeviceProcAddr or "
             "vkGetPhysicalDeviceProperties2 (a Vulkan 1.1 instance is needed)");
    physicalDevice_ = e.physicalDevice;
    caps_ = restrictDeviceCaps(queryDeviceCaps(externalVki_, physicalDevice_, apiVersion), e.enabledCapabilities, "externalVulkan");

    uint32_t familyCount = 0;
    externalVki_.vkGetPhysicalDeviceQueueFamilyProperties(physicalDevice_, &familyCount, nullptr);
    std::vector<VkQueueFamilyProperties> families(familyCount);
    externalVki_.vkGetPhysicalDeviceQueueFamilyProperties(physicalDevice_, &familyCount, families.data());
    if (e.queueFamilyIndex >= familyCount || !(families[e.queueFamilyIndex].queueFlags & VK_QUEUE_COMPUTE_BIT))
        fail(PSK_ERROR_INVALID_ARGUMENT, "externalVulkan->queueFamilyIndex ", e.queueFamilyIndex, " is not a compute queue family");
    caps_.computeQueueFamily = e.queueFamilyIndex;
    caps_.timestampValidBits = families[e.queueFamilyIndex].timestampValidBits;

    device_ = e.device;
    queue_ = e.queue;
    vk_.load(externalVki_.vkGetDeviceProcAddr, device_);
    vk_.callbacks = e.allocationCallbacks;
    if (caps_.pushDescriptors && !vk_.vkCmdPushDescriptorSetKHR)
        fail(PSK_ERROR_UNSUPPORTED, "enabledCapabilities names PUSH_DESCRIPTORS but the device has no vkCmdPushDescriptorSetKHR "
             "(was VK_KHR_push_descriptor enabled?)");
}

const InstanceFunctions& PskContext_T::vki() const { return external_ ? externalVki_ : instance_->vk(); }

PskContext_T::~PskContext_T() {
    // The app's device is the app's: no vkDeviceWaitIdle (it would need every queue of the device
    // externally synchronized) and no vkDestroyDevice. The library's own submissions are complete:
    // every one of them waits for its fence.
    if (device_ && !external_) vk_.vkDeviceWaitIdle(device_);
    pipelines_.reset();
    allocator_.reset();
    if (device_ && !external_) vk_.vkDestroyDevice(device_, nullptr);
}

void PskContext_T::submitAndWait(VkCommandBuffer commandBuffer, VkFence fence) {
    VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &commandBuffer;
    {
        std::lock_guard<std::mutex> lock(queueMutex_);
        PSK_VK(vk_.vkQueueSubmit(queue_, 1, &submit, fence));
    }
    PSK_VK(vk_.vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX));
}

void PskContext_T::message(PskMessageSeverity severity, PskResult result, const std::string& text) const {
    if (callback_) callback_(severity, result, text.c_str(), userData_);
}

void PskContext_T::execute(const std::function<void(Recorder&)>& record) {
    // A transient submitter: one-off work is rare enough not to keep a command buffer around.
    Submitter(*this).run(record);
}
