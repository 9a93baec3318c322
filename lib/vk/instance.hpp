// The Vulkan loader (opened at run time) and a VkInstance, with optional validation layers whose
// messages are forwarded to a sink. Used by contexts and by the context-free device queries.
#pragma once

#include <polysketch/polysketch.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "vk/vulkan_functions.hpp"

namespace psk {

/** A dlopen'ed Vulkan loader; closed on destruction. */
class VulkanLibrary {
public:
    /**
     * Throws PSK_ERROR_NO_DEVICE when no loader is installed, PSK_ERROR_VULKAN when one is but
     * cannot be loaded (the message carries dlerror(): out of file descriptors, of memory, ...).
     */
    VulkanLibrary();
    ~VulkanLibrary();
    VulkanLibrary(const VulkanLibrary&) = delete;
    VulkanLibrary& operator=(const VulkanLibrary&) = delete;
    PFN_vkGetInstanceProcAddr getInstanceProcAddr() const { return getInstanceProcAddr_; }

private:
    void close();
    void* handle_ = nullptr;
    PFN_vkGetInstanceProcAddr getInstanceProcAddr_ = nullptr;
};

using MessageSink = std::function<void(PskMessageSeverity, PskResult, const std::string&)>;

class Instance {
public:
    /**
     * validation: 0 off, 1 on when installed, 2 required. Validation messages (warnings and
     * errors) go to `sink` with PSK_MESSAGE_SEVERITY_VALIDATION, led by their message ID.
     * With the layer, synchronization validation is on too (see syncValidationEnabled).
     */
    Instance(int validation, MessageSink sink);
    ~Instance();
    Instance(const Instance&) = delete;
    Instance& operator=(const Instance&) = delete;

    VkInstance handle() const { return instance_; }
    uint32_t apiVersion() const { return apiVersion_; }
    const InstanceFunctions& vk() const { return vki_; }
    PFN_vkGetInstanceProcAddr getInstanceProcAddr() const { return library_.getInstanceProcAddr(); }
    bool validationEnabled() const { return messenger_ != VK_NULL_HANDLE; }
    /**
     * Synchronization validation is on: with the layer, unless PSK_VALIDATION_SYNC=0 (hazards come
     * as SYNC-HAZARD-* validation messages). Best practices: PSK_VALIDATION_BEST_PRACTICES=1.
     */
    bool syncValidationEnabled() const { return validationEnabled() && syncValidation_; }
    bool bestPracticesEnabled() const { return validationEnabled() && bestPractices_; }
    std::vector<VkPhysicalDevice> physicalDevices() const;

    /**
     * Picks a device by selector (see PskContextCreateInfo::device). Throws NO_DEVICE when the
     * device is not there, or PSK_ERROR_VULKAN when the loader reported a driver that is installed
     * but did not start (the message names the devices present and quotes the loader).
     */
    VkPhysicalDevice select(const char* selector) const;

    /**
     * The Vulkan loader's warnings and errors while the instance was created (a driver that failed
     * to load or to create its instance and was skipped), captured through a
     * VkDebugUtilsMessengerCreateInfoEXT in vkCreateInstance's pNext chain.
     */
    const std::vector<std::string>& loaderMessages() const { return loaderMessages_; }

private:
    static VKAPI_ATTR VkBool32 VKAPI_CALL onDebugMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                       VkDebugUtilsMessageTypeFlagsEXT types,
                                                       const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                       void* user);

    /** The messenger of vkCreateInstance's and vkDestroyInstance's pNext chain. */
    static VKAPI_ATTR VkBool32 VKAPI_CALL onCreationMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                          VkDebugUtilsMessageTypeFlagsEXT types,
                                                          const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                          void* user);

    VulkanLibrary library_;
    GlobalFunctions vkg_;
    InstanceFunctions vki_;
    VkInstance instance_ = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    uint32_t apiVersion_ = VK_API_VERSION_1_1;
    bool syncValidation_ = false, bestPractices_ = false;
    MessageSink sink_;
    std::vector<std::string> loaderMessages_;
};

}  // namespace psk
