#include "vk/vulkan_functions.hpp"

namespace psk {

void GlobalFunctions::load(PFN_vkGetInstanceProcAddr getInstanceProcAddr) {
    vkGetInstanceProcAddr = getInstanceProcAddr;
#define PSK_LOAD(name) name = reinterpret_cast<PFN_##name>(getInstanceProcAddr(VK_NULL_HANDLE, #name));
    PSK_VK_GLOBAL_FUNCTIONS(PSK_LOAD)
#undef PSK_LOAD
}

void InstanceFunctions::load(PFN_vkGetInstanceProcAddr getInstanceProcAddr, VkInstance instance) {
#define PSK_LOAD(name) name = reinterpret_cast<PFN_##name>(getInstanceProcAddr(instance, #name));
    PSK_VK_INSTANCE_FUNCTIONS(PSK_LOAD)
#undef PSK_LOAD
}

void DeviceFunctions::load(PFN_vkGetDeviceProcAddr getDeviceProcAddr, VkDevice device) {
    // Functions of extensions that were not enabled come back NULL; callers check capabilities.
#define PSK_LOAD(name) name = reinterpret_cast<PFN_##name>(getDeviceProcAddr(device, #name));
    PSK_VK_DEVICE_FUNCTIONS(PSK_LOAD)
#undef PSK_LOAD
}

}  // namespace psk
