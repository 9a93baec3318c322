// A range of a buffer and how a command touches it: what the recorder's hazard tracking reads,
// and what the kernels' binding structs (kernels/kernel_interface.hpp) hold, without the recorder.
#pragma once

#include "vk/vulkan_functions.hpp"

namespace psk {

struct BufferRange {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize offset = 0;
    VkDeviceSize size = VK_WHOLE_SIZE;
};

/** The bytes of `r` vkCmdFillBuffer may write: its size rounded down to whole 4-byte words (VK_WHOLE_SIZE stays). */
inline VkDeviceSize fillableBytes(const BufferRange& r) { return r.size == VK_WHOLE_SIZE ? r.size : r.size / 4 * 4; }

struct Access {
    BufferRange range;
    bool write = false;
};
inline Access reads(BufferRange r) { return {r, false}; }
inline Access writes(BufferRange r) { return {r, true}; }

}  // namespace psk
