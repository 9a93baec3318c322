// psk::Submitter (submitter.hpp): the command buffer, fence, descriptor arena and timestamp
// queries of the library's own submissions, and the record / submit / wait / time sequence.
#include "vk/submitter.hpp"

#include <algorithm>
#include <vector>

#include "util/error.hpp"
#include "vk/context.hpp"
#include "vk/vk_result.hpp"

namespace psk {

namespace {

// Timestamp queries of a timed run. The start of the run is always written (the callback may not
// mark one, and a query cannot be written twice without a reset); a marked start has its own query.
constexpr uint32_t kQueryRunStart = 0;
constexpr uint32_t kQueryMarkedStart = 1;
constexpr uint32_t kQueryEnd = 2;  // marked stop, or the end of the callback's recording
constexpr uint32_t kQueryStages = 3;  // then one query per stage (Submitter::kMaxStages)
constexpr uint32_t kQueryCount = kQueryStages + Submitter::kMaxStages;

}  // namespace

Submitter::Submitter(PskContext_T& context) : context_(context) {
    const DeviceFunctions& vk = context.vk();
    const VkDevice device = context.device();
    try {
        VkCommandPoolCreateInfo poolInfo{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        poolInfo.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
        poolInfo.queueFamilyIndex = context.queueFamily();
        PSK_VK(vk.vkCreateCommandPool(device, &poolInfo, vk.callbacks, &pool_));
        VkCommandBufferAllocateInfo cbInfo{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        cbInfo.commandPool = pool_;
        cbInfo.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        cbInfo.commandBufferCount = 1;
        PSK_VK(vk.vkAllocateCommandBuffers(device, &cbInfo, &commandBuffer_));
        VkFenceCreateInfo fenceInfo{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        PSK_VK(vk.vkCreateFence(device, &fenceInfo, vk.callbacks, &fence_));
        if (!context.pipelines().usesPushDescriptors()) descriptors_ = std::make_unique<DescriptorArena>(vk, device);
    } catch (...) {
        // The destructor does not run for a constructor that throws.
        release();
        throw;
    }
}

Submitter::~Submitter() { release(); }

void Submitter::release() {
    const DeviceFunctions& vk = context_.vk();
    const VkDevice device = context_.device();
    descriptors_.reset();
    if (queryPool_) vk.vkDestroyQueryPool(device, queryPool_, vk.callbacks);
    if (fence_) vk.vkDestroyFence(device, fence_, vk.callbacks);
    if (pool_) vk.vkDestroyCommandPool(device, pool_, vk.callbacks);  // frees commandBuffer_
    queryPool_ = VK_NULL_HANDLE;
    fence_ = VK_NULL_HANDLE;
    pool_ = VK_NULL_HANDLE;
    commandBuffer_ = VK_NULL_HANDLE;
}

void Submitter::run(const Record& record, double* gpuMs) { run(record, gpuMs, nullptr); }

void Submitter::run(const Record& record, double* gpuMs, double* stageMs) {
    if (stageMs)
        for (uint32_t i = 0; i < kMaxStages; ++i) stageMs[i] = 0.0;
    if (recorder_) fail(PSK_ERROR_INTERNAL, "Submitter::run called from its own callback");
    const DeviceFunctions& vk = context_.vk();
    const VkDevice device = context_.device();
    const DeviceCaps& caps = context_.caps();
    if (gpuMs) *gpuMs = 0.0;
    const bool timed = gpuMs && caps.timestampValidBits > 0;
    if (timed && !queryPool_) {
        VkQueryPoolCreateInfo queryInfo{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
        queryInfo.queryType = VK_QUERY_TYPE_TIMESTAMP;
        queryInfo.queryCount = kQueryCount;
        PSK_VK(vk.vkCreateQueryPool(device, &queryInfo, vk.callbacks, &queryPool_));
    }

    PSK_VK(vk.vkResetCommandPool(device, pool_, 0));
    if (descriptors_) descriptors_->reset();
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    PSK_VK(vk.vkBeginCommandBuffer(commandBuffer_, &begin));
    // Earlier batches on this queue (this submitter's previous runs, other threads' work on a shared
    // context) have finished by the time their fences were waited for, but the device orders this
    // batch's accesses after theirs only through a dependency, and makes their writes visible to it
    // only through a memory dependency: a decode step reads the state the previous step wrote, a
    // forward overwrites the workspace the previous one wrote and read. One barrier from every
    // earlier compute / transfer command states both: the execution order (write-after-read; without
    // it the synchronization validation layer reports a WAR hazard now and then when threads share a
    // queue, threads_test) and their writes made visible to this batch's reads and writes
    // (read-after-write, write-after-write: an execution barrier alone leaves them to a driver whose
    // caches happen to be coherent across batches). It costs one barrier per host-form call.
    VkMemoryBarrier earlier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    earlier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    earlier.dstAccessMask =
        VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    vk.vkCmdPipelineBarrier(commandBuffer_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                            VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &earlier, 0, nullptr, 0,
                            nullptr);
    Recorder rec(vk, commandBuffer_, context_.pipelines(), descriptors_.get());
    if (timed) {
        vk.vkCmdResetQueryPool(commandBuffer_, queryPool_, 0, kQueryCount);
        rec.timestamp(queryPool_, kQueryRunStart);
    }
    // Stage marks in the order the recording enters them (each stage at most once).
    std::vector<uint32_t> stages;
    if (timed && stageMs)
        rec.setStageMarker([&](uint32_t stage) {
            if (stage >= kMaxStages || std::find(stages.begin(), stages.end(), stage) != stages.end()) return;
            rec.timestamp(queryPool_, kQueryStages + stage);
            stages.push_back(stage);
        });
    {
        // The marks are valid only while the callback runs, also when it throws.
        recorder_ = &rec;
        timed_ = timed;
        started_ = stopped_ = false;
        struct EndOfCallback {
            Recorder*& recorder;
            ~EndOfCallback() { recorder = nullptr; }
        } endOfCallback{recorder_};
        record(rec);
    }
    if (timed && !stopped_) rec.timestamp(queryPool_, kQueryEnd);
    rec.finishForHost();
    PSK_VK(vk.vkEndCommandBuffer(commandBuffer_));
    PSK_VK(vk.vkResetFences(device, 1, &fence_));
    context_.submitAndWait(commandBuffer_, fence_);

    if (timed) {
        auto ticks = [&](uint32_t query) {
            uint64_t value = 0;
            PSK_VK(vk.vkGetQueryPoolResults(device, queryPool_, query, 1, sizeof(value), &value, sizeof(value),
                                            VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
            return value;
        };
        const uint64_t first = ticks(started_ ? kQueryMarkedStart : kQueryRunStart), last = ticks(kQueryEnd);
        const uint64_t mask = caps.timestampValidBits >= 64 ? ~uint64_t(0) : (uint64_t(1) << caps.timestampValidBits) - 1;
        const double msPerTick = caps.limits().timestampPeriod * 1e-6;
        *gpuMs = double((last - first) & mask) * msPerTick;
        for (size_t i = 0; i < stages.size(); ++i) {
            const uint64_t from = ticks(kQueryStages + stages[i]);
            const uint64_t to = i + 1 < stages.size() ? ticks(kQueryStages + stages[i + 1]) : last;
            stageMs[stages[i]] = double((to - from) & mask) * msPerTick;
        }
    }
}

void Submitter::startTiming() {
    if (!recorder_) fail(PSK_ERROR_INTERNAL, "Submitter::startTiming outside run's callback");
    if (started_ || stopped_) fail(PSK_ERROR_INTERNAL, "Submitter::startTiming: the span was already started or stopped");
    started_ = true;
    mark(kQueryMarkedStart);
}

void Submitter::stopTiming() {
    if (!recorder_) fail(PSK_ERROR_INTERNAL, "Submitter::stopTiming outside run's callback");
    if (stopped_) fail(PSK_ERROR_INTERNAL, "Submitter::stopTiming: the span was already stopped");
    stopped_ = true;
    mark(kQueryEnd);
}

void Submitter::mark(uint32_t query) {
    if (timed_) recorder_->timestamp(queryPool_, query);
}

}  // namespace psk
