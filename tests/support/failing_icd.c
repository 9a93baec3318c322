/*
 * A Vulkan driver (ICD) that fails on purpose, for tests of how context creation reports a driver
 * that is installed but does not start (as a GPU driver does when the process is out of file
 * descriptors, memory or static TLS, or when the device cannot be opened).
 *
 * PSK_FAILING_ICD_RESULT (a negative VkResult; default and otherwise -3, VK_ERROR_INITIALIZATION_FAILED)
 * is what its vkCreateInstance returns; it never creates an instance. The loader loads it through a
 * manifest that names it (VK_DRIVER_FILES, VK_ADD_DRIVER_FILES), skips it when it fails and, with no
 * other driver, returns VK_ERROR_INCOMPATIBLE_DRIVER.
 */
#include <vulkan/vulkan.h>

#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#define PSK_ICD_EXPORT __declspec(dllexport)
#else
#define PSK_ICD_EXPORT __attribute__((visibility("default")))
#endif

static VkResult configuredResult(void) {
    const char* env = getenv("PSK_FAILING_ICD_RESULT");
    const int result = env ? atoi(env) : 0;
    return result < 0 ? (VkResult)result : VK_ERROR_INITIALIZATION_FAILED;
}

static VKAPI_ATTR VkResult VKAPI_CALL failingCreateInstance(const VkInstanceCreateInfo* info, const VkAllocationCallbacks* allocator,
                                                            VkInstance* instance) {
    (void)info;
    (void)allocator;
    (void)instance;
    return configuredResult();
}

/* Never called (there is no instance), but the loader wants them. */
static VKAPI_ATTR void VKAPI_CALL failingDestroyInstance(VkInstance instance, const VkAllocationCallbacks* allocator) {
    (void)instance;
    (void)allocator;
}

static VKAPI_ATTR VkResult VKAPI_CALL failingEnumeratePhysicalDevices(VkInstance instance, uint32_t* count, VkPhysicalDevice* devices) {
    (void)instance;
    (void)devices;
    *count = 0;
    return VK_SUCCESS;
}

static VKAPI_ATTR VkResult VKAPI_CALL failingEnumerateInstanceExtensionProperties(const char* layer, uint32_t* count,
                                                                                 VkExtensionProperties* properties) {
    (void)properties;
    if (layer) return VK_ERROR_LAYER_NOT_PRESENT;
    *count = 0;
    return VK_SUCCESS;
}

static VKAPI_ATTR VkResult VKAPI_CALL failingEnumerateInstanceVersion(uint32_t* version) {
    *version = VK_API_VERSION_1_3;
    return VK_SUCCESS;
}

PSK_ICD_EXPORT VKAPI_ATTR VkResult VKAPI_CALL vk_icdNegotiateLoaderICDInterfaceVersion(uint32_t* version) {
    if (*version > 5) *version = 5;
    return VK_SUCCESS;
}

PSK_ICD_EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vk_icdGetInstanceProcAddr(VkInstance instance, const char* name) {
    (void)instance;
    if (strcmp(name, "vkCreateInstance") == 0) return (PFN_vkVoidFunction)failingCreateInstance;
    if (strcmp(name, "vkDestroyInstance") == 0) return (PFN_vkVoidFunction)failingDestroyInstance;
    if (strcmp(name, "vkEnumeratePhysicalDevices") == 0) return (PFN_vkVoidFunction)failingEnumeratePhysicalDevices;
    if (strcmp(name, "vkEnumerateInstanceExtensionProperties") == 0)
        return (PFN_vkVoidFunction)failingEnumerateInstanceExtensionProperties;
    if (strcmp(name, "vkEnumerateInstanceVersion") == 0) return (PFN_vkVoidFunction)failingEnumerateInstanceVersion;
    if (strcmp(name, "vkGetInstanceProcAddr") == 0) return (PFN_vkVoidFunction)vk_icdGetInstanceProcAddr;
    return NULL;
}
