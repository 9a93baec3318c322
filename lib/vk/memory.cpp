#include "vk/memory.hpp"

#include <algorithm>
#include <atomic>

#include "util/error.hpp"
#include "util/sizes.hpp"
#include "vk/vk_result.hpp"

namespace psk {

namespace {

std::atomic<uint64_t> liveAllocations{0};
std::atomic<uint64_t> liveBytes{0};
std::atomic<uint64_t> liveRanges{0};

/** vkFreeMemory, counted. */
void freeMemory(const DeviceFunctions& vk, VkDevice device, VkDeviceMemory memory, VkDeviceSize size) {
    vk.vkFreeMemory(device, memory, vk.callbacks);
    liveAllocations.fetch_sub(1, std::memory_order_relaxed);
    liveBytes.fetch_sub(size, std::memory_order_relaxed);
}

}  // namespace

uint64_t liveDeviceMemoryAllocations() { return liveAllocations.load(std::memory_order_relaxed); }
uint64_t liveDeviceMemoryBytes() { return liveBytes.load(std::memory_order_relaxed); }
uint64_t liveSuballocations() { return liveRanges.load(std::memory_order_relaxed); }

bool Allocator::carve(Block& b, VkDeviceSize size, VkDeviceSize align, VkDeviceSize* offset) {
    // First fit: the lowest free range that holds the aligned request; split off what is left.
    for (auto it = b.freeRanges.begin(); it != b.freeRanges.end(); ++it) {
        const VkDeviceSize start = alignUp(it->first, align);
        const VkDeviceSize end = it->first + it->second;
        if (start + size > end) continue;
        const VkDeviceSize rangeStart = it->first;
        b.freeRanges.erase(it);
        if (start > rangeStart) b.freeRanges.emplace(rangeStart, start - rangeStart);
        if (start + size < end) b.freeRanges.emplace(start + size, end - start - size);
        *offset = start;
        return true;
    }
    return false;
}

Allocator::Allocator(const DeviceFunctions& vk, VkDevice device, const VkPhysicalDeviceMemoryProperties& props,
                     VkDeviceSize maxAllocationSize, VkDeviceSize memoryLimit)
    : vk_(vk), device_(device), props_(props), maxAllocationSize_(maxAllocationSize ? maxAllocationSize : ~VkDeviceSize(0)),
      memoryLimit_(memoryLimit) {}

Allocator::~Allocator() {
    for (auto& b : blocks_)
        if (b) freeMemory(vk_, device_, b->memory, b->size);  // unmapped implicitly
}

uint32_t chooseMemoryType(const VkPhysicalDeviceMemoryProperties& props, uint32_t allowedTypes, MemoryUsage usage,
                          bool avoidDeviceLocal) {
    const VkMemoryPropertyFlags hostCoherent = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    VkMemoryPropertyFlags required = 0, preferred = 0;
    switch (usage) {
        case MemoryUsage::DeviceLocal:
            required = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
            break;
        case MemoryUsage::HostUpload:
            required = hostCoherent;
            break;
        case MemoryUsage::HostReadback:
            required = hostCoherent;
            preferred = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
            break;
        case MemoryUsage::HostWriteDeviceRead:
            required = hostCoherent;
            preferred = avoidDeviceLocal ? 0 : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
            break;
    }
    uint32_t best = ~0u;
    for (uint32_t i = 0; i < props.memoryTypeCount; ++i) {
        if (!(allowedTypes & (1u << i))) continue;
        const VkMemoryPropertyFlags f = props.memoryTypes[i].propertyFlags;
        if ((f & required) != required) continue;
        if (avoidDeviceLocal && (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) continue;
        if (best == ~0u) best = i;
        if ((f & preferred) == preferred && preferred) return i;
    }
    if (best == ~0u && usage == MemoryUsage::DeviceLocal) {
        // Some devices (a few CPU drivers) have no device-local type: any allowed type serves.
        for (uint32_t i = 0; i < props.memoryTypeCount; ++i)
            if (allowedTypes & (1u << i)) return i;
    }
    if (best == ~0u && avoidDeviceLocal) return chooseMemoryType(props, allowedTypes, usage, false);  // unified memory: all of it
    return best;
}

uint32_t Allocator::chooseMemoryType(uint32_t allowedTypes, MemoryUsage usage, bool avoidDeviceLocal) const {
    const uint32_t type = psk::chooseMemoryType(props_, allowedTypes, usage, avoidDeviceLocal);
    if (type == ~0u) fail(PSK_ERROR_UNSUPPORTED, "no suitable Vulkan memory type");
    return type;
}

size_t Allocator::createBlock(uint32_t memoryType, VkDeviceSize size, bool dedicated) {
    VkMemoryAllocateInfo info{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    info.allocationSize = size;
    info.memoryTypeIndex = memoryType;
    if (memoryLimit_ && bytesAllocated_ + size > memoryLimit_)
        fail(PSK_ERROR_OUT_OF_DEVICE_MEMORY, "out of device memory allocating ", size, " bytes: the context's deviceMemoryLimit (",
             memoryLimit_, " bytes) has ", memoryLimit_ - bytesAllocated_, " left");
    auto block = std::make_unique<Block>();
    const VkResult r = vk_.vkAllocateMemory(device_, &info, vk_.callbacks, &block->memory);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
        fail(PSK_ERROR_OUT_OF_DEVICE_MEMORY, "out of device memory allocating ", size, " bytes");
    checkVk(r, "vkAllocateMemory");
    liveAllocations.fetch_add(1, std::memory_order_relaxed);
    liveBytes.fetch_add(size, std::memory_order_relaxed);
    block->size = size;
    block->memoryType = memoryType;
    block->dedicated = dedicated;
    const VkMemoryPropertyFlags f = props_.memoryTypes[memoryType].propertyFlags;
    const VkMemoryPropertyFlags hostCoherent = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    if ((f & hostCoherent) == hostCoherent) {
        void* p = nullptr;
        const VkResult m = vk_.vkMapMemory(device_, block->memory, 0, VK_WHOLE_SIZE, 0, &p);
        if (m != VK_SUCCESS) {
            freeMemory(vk_, device_, block->memory, size);
            checkVk(m, "vkMapMemory");
        }
        block->mapped = static_cast<uint8_t*>(p);
    }
    block->freeRanges.emplace(0, size);
    bytesAllocated_ += size;
    for (size_t i = 0; i < blocks_.size(); ++i) {
        if (!blocks_[i]) {
            blocks_[i] = std::move(block);
            return i;
        }
    }
    blocks_.push_back(std::move(block));
    return blocks_.size() - 1;
}

Allocation Allocator::allocate(const VkMemoryRequirements& req, MemoryUsage usage) {
    if (req.size > maxAllocationSize_)
        fail(PSK_ERROR_TOO_LARGE, "a buffer of ", req.size, " bytes exceeds the largest allocation (", maxAllocationSize_,
             " bytes: maxMemoryAllocationSize, or the context's smaller maxAllocationSize)");
    uint32_t type = chooseMemoryType(req.memoryTypeBits, usage);
    const VkDeviceSize align = std::max<VkDeviceSize>(req.alignment, 1);
    std::lock_guard<std::mutex> lock(mutex_);
    // HostWriteDeviceRead in device-local memory (a BAR heap, 256 MiB on many systems): small blocks,
    // and host memory when the heap has no room.
    const bool barPreferred = usage == MemoryUsage::HostWriteDeviceRead &&
                              (props_.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) != 0;

    auto result = [&](size_t index, VkDeviceSize offset) {
        Allocation a;
        a.memory = blocks_[index]->memory;
        a.offset = offset;
        a.size = req.size;
        a.mapped = blocks_[index]->mapped ? blocks_[index]->mapped + offset : nullptr;
        a.block = index;
        bytesInUse_ += req.size;
        liveRanges.fetch_add(1, std::memory_order_relaxed);
        return a;
    };

    VkDeviceSize blockSize = std::min(barPreferred ? kSmallBlockSize : kDefaultBlockSize, maxAllocationSize_);
    // Under a memory limit, blocks of at most an eighth of it leave room for dedicated allocations.
    if (memoryLimit_) blockSize = std::min(blockSize, std::max<VkDeviceSize>(memoryLimit_ / 8, VkDeviceSize(1) << 20));
    const bool dedicated = req.size > blockSize / 2;
    // A range of an existing block of `type` (first fit), or none.
    auto carveExisting = [&](uint32_t t, size_t* index, VkDeviceSize* offset) {
        for (size_t i = 0; !dedicated && i < blocks_.size(); ++i) {
            if (!blocks_[i] || blocks_[i]->dedicated || blocks_[i]->memoryType != t) continue;
            if (carve(*blocks_[i], req.size, align, offset)) {
                *index = i;
                return true;
            }
        }
        return false;
    };
    size_t index = 0;
    VkDeviceSize offset = 0;
    if (carveExisting(type, &index, &offset)) return result(index, offset);
    try {
        index = createBlock(type, dedicated ? req.size : blockSize, dedicated);
    } catch (const Error& e) {
        const uint32_t fallback = barPreferred ? chooseMemoryType(req.memoryTypeBits, usage, true) : type;
        if (e.code() != PSK_ERROR_OUT_OF_DEVICE_MEMORY || fallback == type) throw;
        type = fallback;
        if (carveExisting(type, &index, &offset)) return result(index, offset);
        index = createBlock(type, dedicated ? req.size : blockSize, dedicated);
    }
    Block& b = *blocks_[index];
    b.freeRanges.clear();
    if (req.size < b.size) b.freeRanges.emplace(req.size, b.size - req.size);
    return result(index, 0);
}

void Allocator::free(const Allocation& a) {
    if (a.memory == VK_NULL_HANDLE) return;
    std::lock_guard<std::mutex> lock(mutex_);
    bytesInUse_ -= a.size;
    liveRanges.fetch_sub(1, std::memory_order_relaxed);
    auto& slot = blocks_[a.block];
    if (slot->dedicated) {
        bytesAllocated_ -= slot->size;
        freeMemory(vk_, device_, slot->memory, slot->size);
        slot.reset();
        return;
    }
    // Return the range and coalesce with its neighbours.
    auto& ranges = slot->freeRanges;
    VkDeviceSize start = a.offset, size = a.size;
    auto next = ranges.lower_bound(start);
    if (next != ranges.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == start) {
            start = prev->first;
            size += prev->second;
            ranges.erase(prev);
        }
    }
    next = ranges.lower_bound(start);
    if (next != ranges.end() && start + size == next->first) {
        size += next->second;
        ranges.erase(next);
    }
    ranges.emplace(start, size);
}

VkDeviceSize Allocator::bytesInUse() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytesInUse_;
}

VkDeviceSize Allocator::bytesAllocated() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytesAllocated_;
}

size_t Allocator::blockCount() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<size_t>(std::count_if(blocks_.begin(), blocks_.end(), [](const auto& b) { return b != nullptr; }));
}

Buffer::Buffer(Allocator& allocator, VkDeviceSize size, VkBufferUsageFlags usage, MemoryUsage memoryUsage)
    : allocator_(&allocator), size_(size) {
    const DeviceFunctions& vk = allocator.vk();
    VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    info.size = std::max<VkDeviceSize>(size, 4);
    info.usage = usage;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    VkResult r = vk.vkCreateBuffer(allocator.device(), &info, vk.callbacks, &buffer_);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY) fail(PSK_ERROR_OUT_OF_DEVICE_MEMORY, "vkCreateBuffer: out of device memory");
    checkVk(r, "vkCreateBuffer");
    try {
        VkMemoryRequirements req{};
        vk.vkGetBufferMemoryRequirements(allocator.device(), buffer_, &req);
        allocation_ = allocator.allocate(req, memoryUsage);
        PSK_VK(vk.vkBindBufferMemory(allocator.device(), buffer_, allocation_.memory, allocation_.offset));
    } catch (...) {
        reset();
        throw;
    }
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        reset();
        allocator_ = other.allocator_;
        buffer_ = other.buffer_;
        size_ = other.size_;
        allocation_ = other.allocation_;
        other.allocator_ = nullptr;
        other.buffer_ = VK_NULL_HANDLE;
        other.allocation_ = Allocation{};
        other.size_ = 0;
    }
    return *this;
}

void Buffer::reset() {
    if (!allocator_) return;
    if (buffer_) allocator_->vk().vkDestroyBuffer(allocator_->device(), buffer_, allocator_->vk().callbacks);
    allocator_->free(allocation_);
    buffer_ = VK_NULL_HANDLE;
    allocation_ = Allocation{};
    allocator_ = nullptr;
    size_ = 0;
}

}  // namespace psk
