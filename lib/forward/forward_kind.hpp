// One object per forward kind (tiled softmax / exact polynomial, polysketch) behind a small
// interface: the attention object (attention.hpp) owns one and asks it for the workspace a call
// needs and to record the call; decoding uses the polysketch object directly.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "forward/attention_config.hpp"
#include "forward/tuning_table.hpp"
#include "forward/workspace.hpp"
#include "kernels/kernel_table.hpp"
#include "vk/recorder.hpp"

struct PskContext_T;
struct PskAttentionCreateInfo;

namespace psk {
struct PackedSketch;
}

namespace psk {

/** Device tensors of one forward call: buffers plus the geometry their contents follow. */
struct BoundTensors {
    BufferRange q, k, v, out;
    ForwardGeometry geometry;
    BoundWorkspace workspace;  // the regions of workspaceLayout(), each a range of its own (forward/workspace.hpp)
};

class ForwardKind {
public:
    virtual ~ForwardKind() = default;
    /** The workspace regions of a call with this geometry (none when it needs none); throws TOO_LARGE. */
    virtual WorkspaceLayout workspaceLayout(const ForwardGeometry& geometry) const = 0;
    /** Bytes of those regions in one buffer (pskGetWorkspaceSize; 0 when none). */
    VkDeviceSize workspaceBytes(const ForwardGeometry& geometry) const { return workspaceLayout(geometry).contiguousBytes(); }
    /** Records the kernels of one call. */
    virtual void record(Recorder& recorder, const BoundTensors& tensors) const = 0;
    /** The kernels a call runs, with their constants and the reason each was chosen. */
    virtual std::vector<KernelChoice> kernels() const = 0;
    /** Lines about the plan as a whole for pskGetAttentionPlan (the tuning table read), without the "# ". */
    virtual std::vector<std::string> planNotes() const { return {}; }
};

/**
 * The object for config.kind, with its pipelines created (a call never stalls on a compile), from
 * the attention as resolveAttention made it; `config` (which the object keeps a reference to)
 * outlives it. `tuning`: the table the plan reads (the attention's, selected once at its creation).
 */
std::unique_ptr<ForwardKind> createForwardKind(PskContext_T* context, const AttentionConfig& config,
                                               const std::shared_ptr<const PackedSketch>& sketch, const TuningSelection& tuning);

}  // namespace psk
