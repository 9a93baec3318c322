// Device memory: buffers are suballocated from large VkDeviceMemory blocks (first fit with
// coalescing), because drivers cap the number of allocations and each one is slow. Host-visible
// blocks stay mapped for their lifetime.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "vk/vulkan_functions.hpp"

namespace psk {

enum class MemoryUsage {
    DeviceLocal,   // kernels' tensors and workspace (mapped too when the device is unified)
    HostUpload,    // staging: host writes, device reads
    HostReadback,  // staging: device writes, host reads
    // Host writes, kernels read it directly (a decode step's q, k, v rows): device-local and
    // host-visible memory where the device has it (resizable BAR), so that every workgroup's read
    // is a device-memory read rather than one across PCIe; host memory otherwise, or when that
    // heap has no room.
    HostWriteDeviceRead,
};

/**
 * The memory type an allocation of `usage` gets among `allowedTypes` of `props`, or ~0u when none
 * fits. Pure (the Allocator's choice; tests give it a GPU's type list). `avoidDeviceLocal`: the
 * fallback of HostWriteDeviceRead once the device-local host-visible heap is full.
 */
uint32_t chooseMemoryType(const VkPhysicalDeviceMemoryProperties& props, uint32_t allowedTypes, MemoryUsage usage,
                          bool avoidDeviceLocal = false);

/**
 * VkDeviceMemory objects that every Allocator of the process has allocated and not freed yet, and
 * their bytes: zero again once every context is destroyed (tests check that no create / destroy
 * cycle leaves an allocation behind). Counted at each vkAllocateMemory and vkFreeMemory.
 */
uint64_t liveDeviceMemoryAllocations();
uint64_t liveDeviceMemoryBytes();
/**
 * Allocations (buffers' ranges) that Allocator::allocate handed out and Allocator::free has not
 * taken back, in every Allocator of the process: a buffer never released stays counted even after
 * its context's destruction freed the memory under it.
 */
uint64_t liveSuballocations();

struct Allocation {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkDeviceSize offset = 0;
    VkDeviceSize size = 0;
    uint8_t* mapped = nullptr;  // non-null when host-visible and coherent
    size_t block = 0;
};

class Allocator {
public:
    /** memoryLimit: bound on the VkDeviceMemory bytes allocated at once (0: none), as VMA's heap size limit. */
    Allocator(const DeviceFunctions& vk, VkDevice device, const VkPhysicalDeviceMemoryProperties& props,
              VkDeviceSize maxAllocationSize, VkDeviceSize memoryLimit = 0);
    ~Allocator();
    Allocator(const Allocator&) = delete;
    Allocator& operator=(const Allocator&) = delete;

    /** Throws psk::Error (OUT_OF_DEVICE_MEMORY, TOO_LARGE) on failure. Thread-safe. */
    Allocation allocate(const VkMemoryRequirements& req, MemoryUsage usage);
    void free(const Allocation& allocation);

    const DeviceFunctions& vk() const { return vk_; }
    VkDevice device() const { return device_; }
    /** Bytes currently handed out (for tests: nothing leaks). */
    VkDeviceSize bytesInUse() const;
    size_t blockCount() const;
    /** VkDeviceMemory bytes allocated (blocks, dedicated or not). */
    VkDeviceSize bytesAllocated() const;

    static constexpr VkDeviceSize kDefaultBlockSize = VkDeviceSize(64) << 20;
    /** Blocks of HostWriteDeviceRead in device-local memory: a BAR heap may hold 256 MiB in all. */
    static constexpr VkDeviceSize kSmallBlockSize = VkDeviceSize(4) << 20;

private:
    struct Block {
        VkDeviceMemory memory = VK_NULL_HANDLE;
        VkDeviceSize size = 0;
        uint32_t memoryType = 0;
        uint8_t* mapped = nullptr;
        bool dedicated = false;
        std::map<VkDeviceSize, VkDeviceSize> freeRanges;  // offset -> size, coalesced
    };

    static bool carve(Block& block, VkDeviceSize size, VkDeviceSize align, VkDeviceSize* offset);
    uint32_t chooseMemoryType(uint32_t allowedTypes, MemoryUsage usage, bool avoidDeviceLocal = false) const;
    size_t createBlock(uint32_t memoryType, VkDeviceSize size, bool dedicated);

    const DeviceFunctions& vk_;
    VkDevice device_;
    VkPhysicalDeviceMemoryProperties props_;
    VkDeviceSize maxAllocationSize_;
    VkDeviceSize memoryLimit_ = 0;
    VkDeviceSize bytesAllocated_ = 0;
    mutable std::mutex mutex_;
    std::vector<std::unique_ptr<Block>> blocks_;  // null entries are released dedicated blocks
    VkDeviceSize bytesInUse_ = 0;
};

/** A VkBuffer bound to a suballocation; move-only, released on destruction. */
class Buffer {
public:
    Buffer() = default;
    Buffer(Allocator& allocator, VkDeviceSize size, VkBufferUsageFlags usage, MemoryUsage memoryUsage);
    ~Buffer() { reset(); }
    Buffer(Buffer&& other) noexcept { *this = std::move(other); }
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void reset();
    VkBuffer handle() const { return buffer_; }
    VkDeviceSize size() const { return size_; }
    /** Host pointer when the memory is host-visible and coherent, else null. */
    uint8_t* mapped() const { return allocation_.mapped; }
    explicit operator bool() const { return buffer_ != VK_NULL_HANDLE; }

private:
    Allocator* allocator_ = nullptr;
    VkBuffer buffer_ = VK_NULL_HANDLE;
    VkDeviceSize size_ = 0;
    Allocation allocation_;
};

}  // namespace psk
