#include "forward/tiled_forward.hpp"

#include <algorithm>

#include "util/error.hpp"
#include "util/sizes.hpp"
#include "vk/context.hpp"

namespace psk {

TiledAttentionPlan planTiledAttention(const AttentionConfig& c, const DeviceCaps& caps) {
    TiledAttentionPlan plan;
    plan.rows = std::min<uint32_t>(64, caps.limits().maxComputeWorkGroupInvocations);
    // Stage as many keys as fit in 32 KiB (or the device's shared memory, if less), up to 64.
    const uint32_t budget = std::min<uint32_t>(caps.limits().maxComputeSharedMemorySize, 32768);
    const uint32_t bytesPerKey = (c.headDim + c.valueDim) * 4;
    if (bytesPerKey > budget) fail(PSK_ERROR_UNSUPPORTED, "head dims too large for this device's shared memory");
    plan.maxGroupsX = caps.limits().maxComputeWorkGroupCount[0];
    kernel::AttentionTiledSpec spec;
    spec.ROWS = plan.rows;
    spec.HEAD_DIM = c.headDim;
    spec.VALUE_DIM = c.valueDim;
    spec.KEY_TILE = std::min<uint32_t>(64, floorPow2(budget / bytesPerKey));
    spec.DEGREE = c.degree;
    spec.CAUSAL = c.causal ? 1u : 0u;
    const bool softmax = c.kind == PSK_ATTENTION_KIND_SOFTMAX;
    plan.kernel = KernelChoice::make(KernelId::AttentionTiled, softmax ? "softmax" : "polynomial", c.dataType, spec,
                                     cat("the only kernel of ", softmax ? "softmax" : "exact polynomial",
                                         " attention; key tile = keys of h + dv floats that fit min(shared memory, 32 KiB), <= 64"));
    return plan;
}

uint32_t tiledKeyChunks(const TiledAttentionPlan& plan, uint32_t tokens) {
    return (tokens + plan.keysPerDispatch - 1) / plan.keysPerDispatch;
}

VkDeviceSize tiledWorkspaceBytes(const TiledAttentionPlan& plan, const AttentionConfig& c, const DeviceCaps& caps,
                                 const ForwardGeometry& g) {
    if (tiledKeyChunks(plan, g.tokens) <= 1) return 0;
    const uint64_t floats = uint64_t(g.batch) * c.numQueryHeads * g.tokens * (c.valueDim + 2);
    if (floats >= (uint64_t(1) << 32) || floats * 4 > caps.limits().maxStorageBufferRange)
        fail(PSK_ERROR_TOO_LARGE, "the ", floats * 4, "-byte key-chunk state exceeds maxStorageBufferRange (",
             caps.limits().maxStorageBufferRange, "); use a smaller batch per call");
    return floats * 4;
}

void recordTiledAttention(Recorder& recorder, VkPipeline pipeline, const TiledAttentionPlan& plan,
                          const AttentionConfig& c, const BoundTensors& t) {
    kernel::AttentionTiledPush push{};
    push.n = t.geometry.tokens;
    push.head_ratio = c.numQueryHeads / c.numKeyValueHeads;
    push.scale = c.scale;
    push.num_q_heads = c.numQueryHeads;
    push.q_strides = pushStrides(t.geometry.q.strides);
    push.k_strides = pushStrides(t.geometry.k.strides);
    push.v_strides = pushStrides(t.geometry.v.strides);
    push.o_strides = pushStrides(t.geometry.out.strides);
    const uint32_t groupsX = (t.geometry.tokens + plan.rows - 1) / plan.rows;
    if (groupsX > plan.maxGroupsX)
        fail(PSK_ERROR_TOO_LARGE, "seqLen ", t.geometry.tokens, " needs ", groupsX, " workgroups; the device allows ", plan.maxGroupsX);
    const uint32_t chunks = tiledKeyChunks(plan, t.geometry.tokens);
    for (uint32_t chunk = 0; chunk < chunks; ++chunk) {
        const bool last = chunk + 1 == chunks;
        push.key_begin = chunk * plan.keysPerDispatch;
        push.key_limit = last ? t.geometry.tokens : push.key_begin + plan.keysPerDispatch;
        push.flags = (chunk > 0 ? kernel::FLAG_LOAD_STATE : 0) | (last ? 0 : kernel::FLAG_STORE_STATE);
        // Without chunks the state binding is never touched; the output stands in for it.
        const Access state = chunks > 1 ? Access{t.workspace, true} : reads(t.out);
        const Access output = last ? writes(t.out) : reads(t.out);
        recorder.dispatch(pipeline, {reads(t.q), reads(t.k), reads(t.v), output, state}, &push, sizeof(push), groupsX,
                          c.numQueryHeads, t.geometry.batch);
    }
}

TiledForward::TiledForward(PskContext_T* context, const AttentionConfig& config)
    : context_(context), config_(config), plan_(planTiledAttention(config, context->caps())) {
    pipeline_ = context->pipelines().get(plan_.kernel);
}

VkDeviceSize TiledForward::workspaceBytes(const ForwardGeometry& geometry) const {
    return tiledWorkspaceBytes(plan_, config_, context_->caps(), geometry);
}

void TiledForward::record(Recorder& recorder, const BoundTensors& tensors) const {
    recorder.beginStage(PSK_FORWARD_STAGE_OUTPUT);  // one stage: the whole attention
    recordTiledAttention(recorder, pipeline_, plan_, config_, tensors);
}

}  // namespace psk
