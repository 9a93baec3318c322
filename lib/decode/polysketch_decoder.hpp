// psk::PolysketchDecoder: the polysketch decode state machine (docs/MATH.md section 7,
// docs/DECODING.md). The state is the running block-state sum z; in local-exact mode z holds the
// completed blocks only, and the unfinished block keeps its running sum h and its k', v rows for
// the exact local part.
#pragma once

#include "decode/decoder.hpp"
#include "forward/polysketch_forward.hpp"

namespace psk {

class PolysketchDecoder final : public Decoder {
public:
    /** Creates the state (all zero), the step scratch and the fold and output pipelines. */
    PolysketchDecoder(PskAttention_T& attention, Submitter& submitter, const DecodeShape& shape);

    uint64_t stateBytes() const override;
    VkDeviceSize stepScratchBytes() const override { return stepWorkspace_.size(); }
    void prefill(const PskDecodePrefillInfo& info, uint32_t count) override;
    void recordStep(Recorder& rec, const StepTensors& t, const std::vector<uint64_t>& positions) override;
    void reset(uint32_t sequence) override;
    void forEachBlobRegion(const std::vector<uint64_t>& positions,
                           const std::function<void(const BufferRange&)>& region) const override;

private:
    /** The forward's feature map over the step's token into the step workspace. */
    void recordStepFeatures(Recorder& rec, const StepTensors& t, const ForwardGeometry& g1, const PolysketchWorkspace& ws);
    /**
     * Recorded right after the attention's forward over `n` tokens of sequences' slots s0..
     * (`forward`: that call's tensors and workspace, which holds Z_{t-1} and the S(k), k' rows):
     * z = Z_{t-1} (accumulate: z += Z_{t-1}) plus the last block, folded into z or, local exact
     * and unfinished, into h with its rows kept. `v` is the prompt's v (count sequences of n
     * tokens, strides vStrides). `staging` and `prefix` receive the scratch buffers the recording
     * uses; the caller keeps them until the submission completes.
     */
    void recordAbsorbPrompt(Recorder& rec, const BoundTensors& forward, const void* v, const PskTensorStrides& vStrides,
                            uint32_t count, uint32_t n, uint32_t s0, bool accumulate, Buffer& staging, Buffer& prefix);
    /** Prefill with out == NULL: the forward over the prompt, in chunks of whole blocks when needed. */
    void prefillStateOnly(const PskDecodePrefillInfo& info, uint32_t count);
    /** Bytes of one sequence's z (and h): Hkv F (dv + 1) floats. */
    VkDeviceSize sequenceSumBytes() const { return VkDeviceSize(Hkv_) * F_ * (dv_ + 1) * 4; }

    const PolysketchForward& forward_;
    uint32_t R_ = 0, F_ = 0, b_ = 1;  // sketch length, features R(R+1)/2, block size
    bool local_ = false;              // local exact
    // z [B Hkv][F][dv + 1]; local exact also h [B Hkv][F][dv + 1], the unfinished block's running
    // sum of phi(k_j)[v_j | 1], and its rows k' [B Hkv][b][h], v [B Hkv][b][dv].
    Buffer z_, blockH_, blockK_, blockV_;
    // The feature rows of the one-token forward's workspace (S(q), S(k), q', k'), fixed at creation.
    Buffer stepWorkspace_;
    VkPipeline fold_ = VK_NULL_HANDLE, output_ = VK_NULL_HANDLE;
};

}  // namespace psk
