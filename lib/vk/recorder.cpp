#include "vk/recorder.hpp"

#include "util/error.hpp"
#include "vk/vk_result.hpp"

namespace psk {

DescriptorArena::~DescriptorArena() {
    for (VkDescriptorPool p : pools_) vk_.vkDestroyDescriptorPool(device_, p, vk_.callbacks);
}

void DescriptorArena::reset() {
    for (VkDescriptorPool p : pools_) vk_.vkResetDescriptorPool(device_, p, 0);
    current_ = 0;
}

VkDescriptorSet DescriptorArena::allocate(VkDescriptorSetLayout layout) {
    constexpr uint32_t kSetsPerPool = 64;
    for (;; ++current_) {
        if (current_ == pools_.size()) {
            VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * Pipelines::kMaxBindings};
            VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
            info.maxSets = kSetsPerPool;
            info.poolSizeCount = 1;
            info.pPoolSizes = &size;
            VkDescriptorPool pool = VK_NULL_HANDLE;
            PSK_VK(vk_.vkCreateDescriptorPool(device_, &info, vk_.callbacks, &pool));
            pools_.push_back(pool);
        }
        VkDescriptorSetAllocateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
        info.descriptorPool = pools_[current_];
        info.descriptorSetCount = 1;
        info.pSetLayouts = &layout;
        VkDescriptorSet set = VK_NULL_HANDLE;
        const VkResult r = vk_.vkAllocateDescriptorSets(device_, &info, &set);
        if (r == VK_SUCCESS) return set;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) checkVk(r, "vkAllocateDescriptorSets");
    }
}

namespace {

bool overlaps(const BufferRange& a, const BufferRange& b) {
    if (a.buffer != b.buffer) return false;
    const VkDeviceSize aEnd = a.size == VK_WHOLE_SIZE ? VK_WHOLE_SIZE : a.offset + a.size;
    const VkDeviceSize bEnd = b.size == VK_WHOLE_SIZE ? VK_WHOLE_SIZE : b.offset + b.size;
    return a.offset < bEnd && b.offset < aEnd;
}

bool overlapsAny(const BufferRange& r, const std::vector<BufferRange>& ranges) {
    for (const BufferRange& other : ranges)
        if (overlaps(r, other)) return true;
    return false;
}

}  // namespace

void Recorder::track(const Access* begin, const Access* end) {
    bool hazard = false;
    for (const Access* a = begin; a != end && !hazard; ++a)
        hazard = overlapsAny(a->range, written_) || (a->write && overlapsAny(a->range, read_));
    if (hazard) {
        VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                                VK_ACCESS_TRANSFER_WRITE_BIT;
        const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
        vk_.vkCmdPipelineBarrier(cmd_, stages, stages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
        written_.clear();
        read_.clear();
        ++barriers_;
    }
    for (const Access* a = begin; a != end; ++a) (a->write ? written_ : read_).push_back(a->range);
}

void Recorder::dispatch(VkPipeline pipeline, const Access* accesses, uint32_t count, const void* push, uint32_t pushBytes,
                        uint32_t gx, uint32_t gy, uint32_t gz) {
    if (count > Pipelines::kMaxBindings || pushBytes > Pipelines::kPushConstantBytes)
        fail(PSK_ERROR_INTERNAL, "dispatch exceeds the shared pipeline layout");
    if (gx == 0 || gy == 0 || gz == 0) return;
    track(accesses, accesses + count);

    VkDescriptorBufferInfo infos[Pipelines::kMaxBindings];
    VkWriteDescriptorSet writes[Pipelines::kMaxBindings];
    for (uint32_t i = 0; i < count; ++i) {
        const Access& a = accesses[i];
        infos[i] = {a.range.buffer, a.range.offset, a.range.size};
        writes[i] = VkWriteDescriptorSet{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
        writes[i].dstBinding = i;
        writes[i].descriptorCount = 1;
        writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        writes[i].pBufferInfo = &infos[i];
    }
    vk_.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    if (pipelines_.usesPushDescriptors()) {
        vk_.vkCmdPushDescriptorSetKHR(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines_.layout(), 0, count, writes);
    } else {
        if (!arena_) fail(PSK_ERROR_INTERNAL, "no descriptor arena on a device without push descriptors");
        VkDescriptorSet set = arena_->allocate(pipelines_.setLayout());
        for (uint32_t i = 0; i < count; ++i) writes[i].dstSet = set;
        vk_.vkUpdateDescriptorSets(arena_->device(), count, writes, 0, nullptr);
        vk_.vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines_.layout(), 0, 1, &set, 0, nullptr);
    }
    if (pushBytes) vk_.vkCmdPushConstants(cmd_, pipelines_.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, pushBytes, push);
    vk_.vkCmdDispatch(cmd_, gx, gy, gz);
    ++dispatches_;
}

void Recorder::copy(BufferRange src, BufferRange dst, VkDeviceSize bytes) {
    if (bytes == 0) return;
    const Access a[2] = {reads(src), writes(dst)};
    track(a, a + 2);
    VkBufferCopy region{src.offset, dst.offset, bytes};
    vk_.vkCmdCopyBuffer(cmd_, src.buffer, dst.buffer, 1, &region);
    ++copies_;
}

void Recorder::copyRows(BufferRange src, VkDeviceSize srcStride, BufferRange dst, VkDeviceSize dstStride, VkDeviceSize rowBytes,
                        uint32_t rows) {
    if (rowBytes == 0 || rows == 0) return;
    const Access a[2] = {reads(src), writes(dst)};
    track(a, a + 2);
    std::vector<VkBufferCopy> regions(rows);
    for (uint32_t i = 0; i < rows; ++i) regions[i] = {src.offset + i * srcStride, dst.offset + i * dstStride, rowBytes};
    vk_.vkCmdCopyBuffer(cmd_, src.buffer, dst.buffer, rows, regions.data());
    ++copies_;
}

void Recorder::fill(BufferRange dst, VkDeviceSize bytes, uint32_t value) {
    if (bytes == 0) return;
    const Access a = writes(dst);
    track(&a, &a + 1);
    vk_.vkCmdFillBuffer(cmd_, dst.buffer, dst.offset, bytes, value);
    ++fills_;
}

void Recorder::timestamp(VkQueryPool pool, uint32_t query) {
    vk_.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, query);
}

void Recorder::finishForHost() {
    VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vk_.vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
    written_.clear();
    read_.clear();
    ++barriers_;
}

}  // namespace psk
