// psk::Submitter: everything one of the library's own submissions needs, built once per owner (the
// context's one-off execute, an attention's host forward, a decode state): a command pool and its
// command buffer, a fence, a descriptor arena where the device has no push descriptors, and
// timestamp queries. A run records with a callback, submits through the context's queue, waits,
// and reads the GPU time. Externally synchronized, like its owners.
#pragma once

#include <functional>
#include <memory>

#include "vk/recorder.hpp"
#include "vk/vulkan_functions.hpp"

struct PskContext_T;

namespace psk {

class Submitter {
public:
    using Record = std::function<void(Recorder&)>;

    /** Creates the pool, command buffer, fence and (no push descriptors) arena; releases them if one fails. */
    explicit Submitter(PskContext_T& context);
    ~Submitter();
    Submitter(const Submitter&) = delete;
    Submitter& operator=(const Submitter&) = delete;

    /**
     * Resets the command buffer and the arena, records with `record`, makes every write visible to
     * the host, submits and waits for completion: mapped memory can be read when run returns.
     *
     * With `gpuMs`, *gpuMs receives the GPU time of the timed span in milliseconds (0 where the
     * queue has no timestamps). The span is everything `record` records, unless the callback
     * narrows it with startTiming() / stopTiming() (e.g. the attention times its dispatches, not
     * the upload and readback copies around them). Without `gpuMs` nothing is timed and the marks
     * are no-ops, so a callback may mark unconditionally.
     */
    void run(const Record& record, double* gpuMs = nullptr);

    /**
     * The same, and with `stageMs` (kMaxStages entries, zeroed first) the GPU time of each stage the
     * recording enters with Recorder::beginStage: from its mark to the next stage's mark, the
     * last one to the end of the timed span. A stage never entered stays 0.
     */
    static constexpr uint32_t kMaxStages = 4;
    void run(const Record& record, double* gpuMs, double* stageMs);

    /** Inside run's callback, at most once: the timed span starts after the commands recorded so far. */
    void startTiming();
    /** Inside run's callback, at most once, after startTiming if any: the timed span ends here. */
    void stopTiming();

private:
    void release();
    /** Writes timestamp `query` through the recorder of the current run (when it is timed). */
    void mark(uint32_t query);

    PskContext_T& context_;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkCommandBuffer commandBuffer_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    // Created by the first timed run: owners that never ask for the time (execute) never pay for it.
    VkQueryPool queryPool_ = VK_NULL_HANDLE;
    std::unique_ptr<DescriptorArena> descriptors_;

    // The run in progress (recorder_ is null outside run's callback).
    Recorder* recorder_ = nullptr;
    bool timed_ = false, started_ = false, stopped_ = false;
};

}  // namespace psk
