// PskContext_T: one Vulkan device with its compute queue, capabilities, allocator and pipeline
// cache. Thread-safe: the queue and the caches are guarded by mutexes.
#pragma once

#include <polysketch/polysketch.h>
#include <polysketch/polysketch_vulkan.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "forward/tuning_table.hpp"
#include "vk/device_caps.hpp"
#include "vk/instance.hpp"
#include "vk/memory.hpp"
#include "vk/pipelines.hpp"
#include "vk/recorder.hpp"
#include "vk/vulkan_functions.hpp"

struct PskContext_T {
public:
    explicit PskContext_T(const PskContextCreateInfo& info);
    ~PskContext_T();
    PskContext_T(const PskContext_T&) = delete;
    PskContext_T& operator=(const PskContext_T&) = delete;

    const psk::DeviceFunctions& vk() const { return vk_; }
    VkDevice device() const { return device_; }
    VkPhysicalDevice physicalDevice() const { return physicalDevice_; }
    const psk::InstanceFunctions& vki() const;
    const psk::DeviceCaps& caps() const { return caps_; }
    psk::Allocator& allocator() { return *allocator_; }
    /**
     * The largest single allocation the context makes (PskContextCreateInfo::maxAllocationSize,
     * clamped to the device's maxMemoryAllocationSize; 0 when neither bounds it).
     */
    uint64_t maxAllocationSize() const { return maxAllocationSize_; }
    psk::Pipelines& pipelines() { return *pipelines_; }
    uint32_t queueFamily() const { return caps_.computeQueueFamily; }
    /** True when the instance, device and queue are the app's (PskExternalVulkan). */
    bool external() const { return external_; }

    /** Submits one command buffer and waits for `fence` (thread-safe). */
    void submitAndWait(VkCommandBuffer commandBuffer, VkFence fence);

    /**
     * Records with `record` into a transient command buffer, submits it and waits. For one-off
     * work (tests of single kernels, utilities); attentions and decode states keep their own
     * psk::Submitter (vk/submitter.hpp).
     */
    void execute(const std::function<void(psk::Recorder&)>& record);

    /**
     * The tuning table the planner reads for an attention created now: the create info's
     * (PskContextCreateInfo::tuningTable, chosen once at creation), else PSK_TUNING_TABLE's (read
     * on every call: a path or "none"), else the library's built-in table for this device (chosen
     * once). Throws PSK_ERROR_BAD_FILE when PSK_TUNING_TABLE names a file that is not a valid table.
     */
    psk::TuningSelection tuningSelection() const;

    /** Sends a message to the callback, if any. */
    void message(PskMessageSeverity severity, PskResult result, const std::string& text) const;
    /** Validation messages received so far (tests assert zero). */
    uint64_t validationMessageCount() const { return validationMessages_.load(); }

private:
    /** Adopts the app's objects: loads the tables through its vkGetInstanceProcAddr, no loader. */
    void adopt(const PskExternalVulkan& external);
    /** Creates the device on the library's own instance. */
    void createOwnDevice(const PskContextCreateInfo& info);

    PskMessageCallback callback_ = nullptr;
    void* userData_ = nullptr;
    std::atomic<uint64_t> validationMessages_{0};
    std::unique_ptr<psk::Instance> instance_;  // null when external_
    bool external_ = false;
    psk::InstanceFunctions externalVki_;
    VkPhysicalDevice physicalDevice_ = VK_NULL_HANDLE;
    psk::DeviceCaps caps_;
    VkDevice device_ = VK_NULL_HANDLE;
    psk::DeviceFunctions vk_;
    VkQueue queue_ = VK_NULL_HANDLE;
    std::mutex queueMutex_;
    uint64_t maxAllocationSize_ = 0;
    std::unique_ptr<psk::Allocator> allocator_;
    std::unique_ptr<psk::Pipelines> pipelines_;
    bool tuningGiven_ = false;              // PskContextCreateInfo::tuningTable was set
    psk::TuningSelection tuning_;           // ... its table, or else the built-in one
};
