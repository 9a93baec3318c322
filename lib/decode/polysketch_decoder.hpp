// psk::PolysketchDecoder: the polysketch decode state machine (docs/MATH.md section 7,
// docs/DECODING.md). The state is the running block-state sum z; in local-exact mode z holds the
// completed blocks only, and the unfinished block keeps its running sum h and its k', v rows for
// the exact local part.
#pragma once

#include "decode/decode_step_plan.hpp"
#include "kernels/kernel_dispatch.hpp"
#include "decode/decoder.hpp"
#include "forward/polysketch_forward.hpp"

namespace psk {

/**
 * Where a forward with a polysketch decode state (docs/DECODING.md, "State passing") keeps what it
 * needs in its workspace, for a call over `call` that continues sequences with `p0` rows of an
 * unfinished block (local exact; 0 otherwise). With p0 > 0 the call is staged: dense copies of q,
 * k, v (and out) of m = p0 + n rows, the unfinished block's rows in front, so that the forward's
 * blocks start where the sequence's do. The regions, in order (`layout`): the staged q, k, v, out,
 * the forward's own regions (PolysketchWorkspace::layout), the state's sums after the call (the
 * scan's tail, ScanInitial::tail: count Hkv F padded state rows, twice in local-exact mode); each may live in a
 * buffer of its own (forward/workspace.hpp).
 */
struct StateForwardLayout {
    bool staged = false;
    uint32_t p0 = 0, m = 0;  // rows in front, rows of the forward
    ForwardGeometry geometry;  // the forward's: the call's own, or the staged tensors (dense BHND)
    PolysketchWorkspace ws;    // the forward's
    WorkspaceLayout layout;
    /** Region indices of layout: staged q, k, v, out (size 0 unless staged), the forward's first region, the scan's tail. */
    enum : size_t { Q, K, V, Out, Forward, Tail = Forward + PolysketchWorkspace::RegionCount, RegionCount };
};
StateForwardLayout stateForwardLayout(const PskAttention_T& attention, const ForwardGeometry& call, uint32_t p0);
/** The workspace of a forward with a polysketch state at any position (the largest p0). */
WorkspaceLayout polysketchStateForwardWorkspaceLayout(const PskAttention_T& attention, const ForwardGeometry& call);

class PolysketchDecoder final : public Decoder {
public:
    /** Creates the state (all zero), the step scratch and the step's pipeline. */
    PolysketchDecoder(PskAttention_T& attention, Submitter& submitter, const DecodeShape& shape);

    uint64_t stateBytes() const override;
    VkDeviceSize stepScratchBytes() const override { return scratchBytes_; }
    void prefill(const PskDecodePrefillInfo& info, uint32_t count) override;
    void recordStep(Recorder& rec, const StepTensors& t, const std::vector<uint64_t>& positions) override;
    void reset(uint32_t sequence) override;
    void restorePositions(const std::vector<uint64_t>& positions) override;
    std::vector<uint64_t> devicePositions(const std::vector<uint64_t>& positions, uint64_t* dropped) override;
    void forEachBlobRegion(const std::vector<uint64_t>& positions,
                           const std::function<void(const BufferRange&)>& region) const override;
    void checkForward(uint64_t position, uint32_t n) const override;
    void recordForward(Recorder& rec, const BoundTensors& t, uint32_t first, uint64_t position) override;

private:
    /** Learned sketch: the forward's feature map over the step's token into the step state's feature rows. */
    void recordStepFeatures(Recorder& rec, const StepTensors& t, const ForwardGeometry& g1, const PolysketchWorkspace& ws);
    /**
     * The forward over a prompt (or a chunk of one, whole blocks before the last) of sequences
     * first..: recordForward at a block boundary, the state's z zeroed first when `fresh` (the
     * prompt's first chunk), so that the state after it is the scan's tail.
     */
    void forwardPrompt(const PskForwardHostInfo& info, uint32_t first, bool fresh);
    /** Prefill with out == NULL: the forward over the prompt, in chunks of whole blocks when needed. */
    void prefillStateOnly(const PskDecodePrefillInfo& info, uint32_t count);
    /** Local exact: records the fills that set the device's row counts of sequences first.. to positions % b. */
    void recordRowCounts(Recorder& rec, uint32_t first, const std::vector<uint64_t>& positions) const;
    /** Bytes of one sequence's z (and h): Hkv F (dv + 1) floats. */
    VkDeviceSize sequenceSumBytes() const { return VkDeviceSize(Hkv_) * F_ * (dv_ + 1) * 4; }

    const PolysketchForward& forward_;
    uint32_t R_ = 0, F_ = 0, b_ = 1;  // sketch length, features R(R+1)/2, block size
    bool local_ = false;              // local exact
    bool learned_ = false;            // learned sketch: the forward's feature map runs before the step
    // z [B Hkv][F][dv + 1]: the running sum of phi(k_j)[v_j | 1] (local exact: completed blocks only).
    Buffer z_;
    // The step state, one buffer (one binding of the step kernel, which has no binding to spare),
    // regions aligned to the storage offset alignment:
    //   local exact: blockH_ h [B Hkv][F][dv + 1], the unfinished block's running sum of
    //   phi(k_j)[v_j | 1], and its rows blockK_ k' [B Hkv][b][h], blockV_ v [B Hkv][b][dv];
    //   learned sketch: the feature rows of the one-token forward's workspace (S(q), S(k), q', k'),
    //   at featureRows_;
    //   from word workWord_ the step's own words (decode_output.comp): per sequence the rows of
    //   its unfinished block (local exact; the device advances them), the slot and sequence
    //   counters (zero between steps), the workgroups' partial sums.
    Buffer stepState_;
    BufferRange blockH_, blockK_, blockV_, featureRows_;
    VkDeviceSize workWord_ = 0;
    VkDeviceSize stepsWord_ = 0;  // the count of executed steps (devicePositions)
    VkDeviceSize scratchBytes_ = 0;  // the feature rows and the step's words
    DecodeStepSlices slices_;
    KernelPipeline step_;
};

}  // namespace psk
