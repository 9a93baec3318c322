// A forward call's workspace as a list of named regions that may live in different buffers.
//
// A real GPU caps one VkDeviceMemory allocation (maxMemoryAllocationSize, often 4 GiB or less)
// well below what long sequences with many heads need in total, while each region on its own
// still fits one storage-buffer binding. So the forward code addresses every region through a
// BufferRange of its own (BoundWorkspace), and a packing step decides which buffer each region
// lives in: the regions in their fixed order, each at an aligned offset, a new buffer begun when
// the next region would pass the cap ("next fit"). Next fit rather than first fit keeps every
// buffer a run of consecutive regions, so the packing is a function of the buffers' sizes alone:
// the app's buffers of pskCmdAttentionForward (placeWorkspace) reproduce the library's packing of
// pskGetWorkspaceLayout without the app having to pass the cap it asked with.
#pragma once

#include <string>
#include <vector>

#include "vk/recorder.hpp"

namespace psk {

/** One region: a name for messages and its size in bytes (0: the call does not use it). */
struct WorkspaceRegion {
    const char* name = "";
    VkDeviceSize size = 0;
};

/** The regions of one call, in their fixed order, and how they are aligned inside a buffer. */
struct WorkspaceLayout {
    std::vector<WorkspaceRegion> regions;
    /** Each region starts at a multiple of this inside its buffer (>= minStorageBufferOffsetAlignment). */
    VkDeviceSize alignment = 256;
    /** A buffer's size rounds its last region's end up to `alignment` (polysketch's historical total). */
    bool padEnd = true;

    /** Bytes of one buffer holding every region (pskGetWorkspaceSize). */
    VkDeviceSize contiguousBytes() const;
    /** Region-wise maximum of two layouts with the same regions (varlen: the largest sequence's). */
    static WorkspaceLayout max(const WorkspaceLayout& a, const WorkspaceLayout& b);
};

/** Where each region of a layout lives. */
struct WorkspacePacking {
    std::vector<VkDeviceSize> bufferBytes;  // per buffer: bytes its regions need
    std::vector<uint32_t> bufferOf;         // per region: its buffer (0 for unused regions)
    std::vector<VkDeviceSize> offsetOf;     // per region: its offset in that buffer
};

/**
 * Packs the layout into as many buffers of at most `cap` bytes as next fit needs (cap 0: one
 * buffer). Throws TOO_LARGE naming the region, its size, `capName` and `cap` when a region alone
 * does not fit.
 */
WorkspacePacking packWorkspace(const WorkspaceLayout& layout, VkDeviceSize cap, const std::string& capName);

/**
 * The same rule into given buffers of these sizes (pskCmdAttentionForward's pWorkspaces): throws
 * BUFFER_TOO_SMALL naming `what`[i] when buffer i, empty, cannot hold the next region, or when the
 * regions need more buffers than given. Unused trailing buffers are allowed.
 */
WorkspacePacking placeWorkspace(const WorkspaceLayout& layout, const std::vector<VkDeviceSize>& sizes, const char* what,
                                const char* sizeFunction);

/** A call's regions bound to buffer ranges; the forward code reads region i as regions[i]. */
struct BoundWorkspace {
    std::vector<BufferRange> regions;

    /** Region i (an empty range for an index the layout does not have). */
    BufferRange operator[](size_t i) const { return i < regions.size() ? regions[i] : BufferRange{VK_NULL_HANDLE, 0, 0}; }
    /** Regions first .. first + count - 1 (a nested forward's own layout, e.g. a state forward's). */
    BoundWorkspace slice(size_t first, size_t count) const;
    size_t size() const { return regions.size(); }
};

/** Binds region i at buffers[packing.bufferOf[i]].offset + packing.offsetOf[i], size layout.regions[i].size. */
BoundWorkspace bindWorkspace(const WorkspaceLayout& layout, const WorkspacePacking& packing, const std::vector<BufferRange>& buffers);

/** Every region in one buffer at its contiguous offset (the historical single-buffer layout). */
BoundWorkspace bindContiguous(const WorkspaceLayout& layout, BufferRange buffer);

/**
 * PSK_POISON_WORKSPACE, a diagnostic the test fixtures turn on: "1" has a forward fill its
 * workspace with kWorkspacePoisonBits before its first kernel, so that a kernel reading workspace
 * memory its call did not write gives a non-finite result on every device, not only where fresh
 * device memory happens not to be zero (lavapipe's is; a GPU's holds what was there before).
 * Unset, "" or "0": off; another value throws PSK_ERROR_INVALID_ARGUMENT. Read when an attention
 * is created (polysketch and tiled plans).
 */
bool poisonWorkspaceFromEnvironment();
inline constexpr uint32_t kWorkspacePoisonBits = 0x7FC00000u;  // a float32 NaN

}  // namespace psk
