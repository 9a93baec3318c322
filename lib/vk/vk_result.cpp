#include "vk/vk_result.hpp"

namespace psk {

const char* vkResultName(VkResult result) {
    switch (result) {
#define PSK_CASE(x) \
    case x:         \
        return #x;
        PSK_CASE(VK_SUCCESS)
        PSK_CASE(VK_NOT_READY)
        PSK_CASE(VK_TIMEOUT)
        PSK_CASE(VK_INCOMPLETE)
        PSK_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
        PSK_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        PSK_CASE(VK_ERROR_INITIALIZATION_FAILED)
        PSK_CASE(VK_ERROR_DEVICE_LOST)
        PSK_CASE(VK_ERROR_MEMORY_MAP_FAILED)
        PSK_CASE(VK_ERROR_LAYER_NOT_PRESENT)
        PSK_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
        PSK_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
        PSK_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
        PSK_CASE(VK_ERROR_TOO_MANY_OBJECTS)
        PSK_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
        PSK_CASE(VK_ERROR_FRAGMENTED_POOL)
        PSK_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
        PSK_CASE(VK_ERROR_FRAGMENTATION)
#undef PSK_CASE
        default:
            return "VkResult(unknown)";
    }
}

PskResult toPskResult(VkResult result) {
    switch (result) {
        case VK_SUCCESS:
            return PSK_SUCCESS;
        case VK_ERROR_OUT_OF_HOST_MEMORY:
            return PSK_ERROR_OUT_OF_HOST_MEMORY;
        case VK_ERROR_OUT_OF_DEVICE_MEMORY:
            return PSK_ERROR_OUT_OF_DEVICE_MEMORY;
        case VK_ERROR_DEVICE_LOST:
            return PSK_ERROR_DEVICE_LOST;
        case VK_ERROR_INCOMPATIBLE_DRIVER:
            return PSK_ERROR_NO_DEVICE;
        default:
            return PSK_ERROR_VULKAN;
    }
}

}  // namespace psk
