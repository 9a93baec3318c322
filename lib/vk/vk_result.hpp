// VkResult inside the library: its name for messages, its PskResult, and the check that turns a
// failed call into a psk::Error (util/error.hpp) naming the call.
#pragma once

#include <polysketch/polysketch.h>

#include "util/error.hpp"
#include "vk/vulkan_functions.hpp"

namespace psk {

const char* vkResultName(VkResult result);
PskResult toPskResult(VkResult result);

/** Throws on a failed VkResult, naming the call. */
inline void checkVk(VkResult result, const char* what) {
    if (result < 0) fail(toPskResult(result), what, " failed: ", vkResultName(result));
}

#define PSK_VK(call) ::psk::checkVk((call), #call)

}  // namespace psk
