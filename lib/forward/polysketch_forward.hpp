// Polysketch (docs/MATH.md section 6): feature map -> block states -> scan (causal) or reduction
// (full) -> output, four kinds of dispatch in one command buffer. The plan (which kernels, which
// tiles, why) is forward/polysketch_plan.hpp; this file records it.
#pragma once

#include <functional>
#include <memory>

#include "forward/block_scan.hpp"
#include "forward/forward_kind.hpp"
#include "forward/polysketch_plan.hpp"
#include "kernels/kernel_dispatch.hpp"
#include "sketch/sketch_pack.hpp"
#include "vk/memory.hpp"

namespace psk {

class Pipelines;

/** Where each intermediate of one call lives in the workspace buffer (bytes). */
struct PolysketchWorkspace {
    struct Region {
        VkDeviceSize offset = 0, size = 0;
    };
    Region qSketch, kSketch;  // S(q) rows [B * Hq][n][R], S(k) rows [B * Hkv][n][R]
    Region qLocal, kLocal;    // local exact only: q' rows [B * Hq][n][h], k' rows [B * Hkv][n][h]
    Region qNodes, kNodes;    // degree 8 only: level-1 sketch nodes of q and k rows, [rows][2][R]
    Region states;            // [B * Hkv][t][F][stateStride]: H_l, then Z_l (causal) or Z in block 0 (full)
    Region zOperands;         // PolysketchPlan::zOperands only: [B * Hkv][t causal, 1 full][chunks] records of Z as operands
    uint32_t blocks = 0;      // t = ceil(n / b)
    VkDeviceSize total = 0;   // every region in one buffer at the offsets above
    /** Region indices of layout() (the fields above, in order). */
    enum : size_t { QSketch, KSketch, QLocal, KLocal, QNodes, KNodes, States, ZOperands, RegionCount };
    /** The regions as a WorkspaceLayout (aligned as the offsets above), so they may be split into several buffers. */
    WorkspaceLayout layout(VkDeviceSize alignment) const;
};

/** Workspace of a call; throws TOO_LARGE when a region exceeds what one binding can address. */
PolysketchWorkspace polysketchWorkspace(const PolysketchPlan& plan, const AttentionConfig& config,
                                        const ForwardGeometry& geometry);

/** Device objects every call uses: the plan's pipelines, the packed sketch and the pair table. */
struct PolysketchResources {
    KernelPipeline features, states, output;
    KernelPipeline statesWalk;  // PolysketchPlan::statesWalkKernel, when planned
    KernelPipeline zOperands;   // PolysketchPlan::zOperands, when planned
    KernelPipeline zOperandsWalk;  // its walking form (PolysketchPlan::zOperands.walkKernel), when planned
    // Team kernels in float32 only: the variants that read q/k (features) or v (output) rows as
    // vectors (PolysketchPlan::featuresVec, outputVec); null otherwise.
    KernelPipeline featuresVec, outputVec;
    BufferRange weights;  // PackedSketch::data
    BufferRange pairs;    // selfTensorPairs(R)
};

/**
 * Materializes packed features phi = psi(S) of `rows` sketch rows of length R (self_tensor.comp):
 * sketches [rows][R] float32 -> features [rows][R (R + 1) / 2] float32. Not part of the forward
 * (which expands psi on the fly); for tests and tools. `pipeline` is kernelPipeline(pipelines, selfTensorKernel()).
 */
KernelChoice selfTensorKernel();
void recordSelfTensor(Recorder& recorder, VkPipeline pipeline, const DeviceCaps& caps, BufferRange sketches,
                      BufferRange pairs, BufferRange features, uint32_t rows, uint32_t sketchLength);

/** Workspace ranges the feature map writes; bindings a configuration does not use alias the sketch rows. */
struct FeatureMapRanges {
    BufferRange qSketch, kSketch, qLocal, kLocal, qNodes, kNodes;
};
/** `workspace`: the call's regions bound as PolysketchWorkspace::layout() orders them. */
FeatureMapRanges featureMapRanges(const PolysketchPlan& plan, const AttentionConfig& config, const BoundWorkspace& workspace);

/**
 * Records the feature maps of q and of k (the forward's first step): S rows, the local-exact rows
 * and, for degree 8, the node scratch. The decode step runs this alone on its one token.
 */
void recordFeatureMaps(Recorder& recorder, const PolysketchPlan& plan, const PolysketchResources& resources,
                       const PackedSketch& sketch, const AttentionConfig& config, const ForwardGeometry& geometry, BufferRange q,
                       BufferRange k, const FeatureMapRanges& ranges);

/**
 * A causal forward that continues a decode state (docs/DECODING.md, "State passing"): the scan
 * starts from the state's z (and adds its unfinished block's h to block 0), so block 0 reads its
 * prefix too; `afterFeatureMaps`, when set, is recorded between the feature maps and the block
 * states (the state's unfinished rows replace the first rows of the call's k-side features).
 */
struct PolysketchContinuation {
    ScanInitial initial;
    std::function<void(Recorder&, const FeatureMapRanges&)> afterFeatureMaps;
};

/** Fails (TOO_LARGE) when a call of this geometry exceeds the device's dispatch limits; records nothing. */
void checkPolysketchDispatch(const PolysketchPlan& plan, const AttentionConfig& config, const ForwardGeometry& geometry);

/** Records the whole polysketch forward; tensors.workspace binds the regions of PolysketchWorkspace::layout(). */
void recordPolysketch(Recorder& recorder, Pipelines& pipelines, const DeviceCaps& caps, const PolysketchPlan& plan,
                      const PolysketchResources& resources, const PackedSketch& sketch, const AttentionConfig& config,
                      const BoundTensors& tensors, const PolysketchContinuation* continuation = nullptr);

/** The polysketch forward kind: its sketch (loaded or generated at creation), plan and pipelines. */
class PolysketchForward final : public ForwardKind {
public:
    /** `config` and `sketch` as resolveAttention made them (attention_config.hpp); both outlive the object. `tuning`: the table the plan reads. */
    PolysketchForward(PskContext_T* context, const AttentionConfig& config, std::shared_ptr<const PackedSketch> sketch,
                      const TuningSelection& tuning);
    WorkspaceLayout workspaceLayout(const ForwardGeometry& geometry) const override {
        return workspace(geometry).layout(plan_.regionAlignment);
    }
    void record(Recorder& recorder, const BoundTensors& tensors) const override;
    /** The forward continuing a decode state (causal only). */
    void record(Recorder& recorder, const BoundTensors& tensors, const PolysketchContinuation& continuation) const;
    std::vector<KernelChoice> kernels() const override;
    /** "tuning table: ..." (which table the plan read, forward/tuning_table.hpp). */
    std::vector<std::string> planNotes() const override {
        std::vector<std::string> notes{"tuning table: " + plan_.tuning};
        if (plan_.poisonWorkspace) notes.push_back("workspace filled with NaN before the kernels (PSK_POISON_WORKSPACE=1, a diagnostic)");
        return notes;
    }

    PolysketchWorkspace workspace(const ForwardGeometry& geometry) const { return polysketchWorkspace(plan_, config_, geometry); }
    const PolysketchPlan& plan() const { return plan_; }
    const PolysketchResources& resources() const { return resources_; }
    /** The packed sketch (decode states hash it to recognize their attention in a blob). */
    const PackedSketch& sketch() const { return *sketch_; }

private:
    /** A device-local buffer holding `bytes` of `data` (staged when not host-visible). */
    Buffer uploadConstant(const void* data, VkDeviceSize bytes);

    PskContext_T* context_;
    const AttentionConfig& config_;
    std::shared_ptr<const PackedSketch> sketch_;
    PolysketchPlan plan_;
    PolysketchResources resources_;
    Buffer weights_, pairs_;
};

}  // namespace psk
