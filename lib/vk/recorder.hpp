// Records compute work into one command buffer: binds pipelines and buffers, pushes constants,
// and inserts a barrier only where a command touches a buffer range that overlaps one an earlier,
// unbarriered command wrote (read-after-write, write-after-write) or writes a range overlapping
// one it read (write-after-read). Ranges, not whole buffers: the kernels of one call share a
// workspace buffer whose disjoint regions must not serialize each other.
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include "vk/buffer_range.hpp"
#include "vk/pipelines.hpp"
#include "vk/vulkan_functions.hpp"

namespace psk {

/** Descriptor sets for devices without push descriptors: pools owned by the caller, reset per recording. */
class DescriptorArena {
public:
    DescriptorArena(const DeviceFunctions& vk, VkDevice device) : vk_(vk), device_(device) {}
    ~DescriptorArena();
    DescriptorArena(const DescriptorArena&) = delete;
    DescriptorArena& operator=(const DescriptorArena&) = delete;
    void reset();
    VkDevice device() const { return device_; }
    VkDescriptorSet allocate(VkDescriptorSetLayout layout);

private:
    const DeviceFunctions& vk_;
    VkDevice device_;
    std::vector<VkDescriptorPool> pools_;
    size_t current_ = 0;
};

class Recorder {
public:
    Recorder(const DeviceFunctions& vk, VkCommandBuffer cmd, Pipelines& pipelines, DescriptorArena* arena)
        : vk_(vk), cmd_(cmd), pipelines_(pipelines), arena_(arena) {}

    /** One dispatch of `pipeline`; binding i of set 0 is accesses[i]. */
    void dispatch(VkPipeline pipeline, std::initializer_list<Access> accesses, const void* push, uint32_t pushBytes,
                  uint32_t groupsX, uint32_t groupsY = 1, uint32_t groupsZ = 1) {
        dispatch(pipeline, accesses.begin(), static_cast<uint32_t>(accesses.size()), push, pushBytes, groupsX, groupsY, groupsZ);
    }
    /** The same with `count` accesses (kernels/kernel_dispatch.hpp's recordKernel: named bindings). */
    void dispatch(VkPipeline pipeline, const Access* accesses, uint32_t count, const void* push, uint32_t pushBytes,
                  uint32_t groupsX, uint32_t groupsY = 1, uint32_t groupsZ = 1);
    void copy(BufferRange src, BufferRange dst, VkDeviceSize bytes);
    /** `rows` copies of rowBytes: row i from src.offset + i srcStride to dst.offset + i dstStride (one command). */
    void copyRows(BufferRange src, VkDeviceSize srcStride, BufferRange dst, VkDeviceSize dstStride, VkDeviceSize rowBytes,
                  uint32_t rows);
    void fill(BufferRange dst, VkDeviceSize bytes, uint32_t value);
    void timestamp(VkQueryPool pool, uint32_t query);
    /**
     * The recording enters forward stage `stage` (PskForwardStage): where the submission times
     * stages (Submitter::run with stage times) this writes a timestamp, else it does nothing.
     */
    void beginStage(uint32_t stage) {
        if (stageMarker_) stageMarker_(stage);
    }
    void setStageMarker(std::function<void(uint32_t)> marker) { stageMarker_ = std::move(marker); }
    /** Makes every write so far visible to the host (before the host reads mapped memory). */
    void finishForHost();
    uint32_t barrierCount() const { return barriers_; }
    uint32_t dispatchCount() const { return dispatches_; }
    /** Transfer commands recorded: buffer copies (copy, copyRows) and fills. */
    uint32_t copyCount() const { return copies_; }
    uint32_t fillCount() const { return fills_; }

private:
    std::function<void(uint32_t)> stageMarker_;
    void track(const Access* begin, const Access* end);

    const DeviceFunctions& vk_;
    VkCommandBuffer cmd_;
    Pipelines& pipelines_;
    DescriptorArena* arena_;
    std::vector<BufferRange> written_;  // written since the last barrier
    std::vector<BufferRange> read_;     // read since the last barrier
    uint32_t barriers_ = 0;
    uint32_t dispatches_ = 0;
    uint32_t copies_ = 0;
    uint32_t fills_ = 0;
};

}  // namespace psk
