#include "util/error.hpp"
#include "forward/kernels.hpp"

namespace psk {
namespace {

// Mirrors the push-constant block of shaders/attention_tiled.comp.
struct TiledPush {
    uint32_t n;
    uint32_t headRatio;
    float scale;
    uint32_t flags;
    uint32_t keyBegin;
    uint32_t keyLimit;
    uint32_t numQueryHeads;
    uint32_t pad0;
    uint32_t q[3], k[3], v[3], o[3];
};
constexpr uint32_t kFlagLoadState = 1, kFlagStoreState = 2;
static_assert(sizeof(TiledPush) <= Pipelines::kPushConstantBytes, "push constants too large");

void putStrides(uint32_t dst[3], const PskTensorStrides& s) {
    // makeForwardGeometry guarantees every used offset fits in 32 bits.
    dst[0] = static_cast<uint32_t>(s.batch);
    dst[1] = static_cast<uint32_t>(s.head);
    dst[2] = static_cast<uint32_t>(s.token);
}

uint32_t floorPow2(uint32_t x) {
    uint32_t p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

}  // namespace

TiledAttentionPlan planTiledAttention(const AttentionConfig& c, const DeviceCaps& caps) {
    TiledAttentionPlan plan;
    plan.shader = cat("attention_tiled.", c.kind == PSK_ATTENTION_KIND_SOFTMAX ? "softmax" : "polynomial", ".",
                      dataTypeSuffix(c.dataType));
    plan.rows = std::min<uint32_t>(64, caps.limits().maxComputeWorkGroupInvocations);
    // Stage as many keys as fit in 32 KiB (or the device's shared memory, if less), up to 64.
    const uint32_t budget = std::min<uint32_t>(caps.limits().maxComputeSharedMemorySize, 32768);
    const uint32_t bytesPerKey = (c.headDim + c.valueDim) * 4;
    if (bytesPerKey > budget) fail(PSK_ERROR_UNSUPPORTED, "head dims too large for this device's shared memory");
    plan.keyTile = std::min<uint32_t>(64, floorPow2(budget / bytesPerKey));
    plan.maxGroupsX = caps.limits().maxComputeWorkGroupCount[0];
    plan.specConstants = {plan.rows, c.headDim, c.valueDim, plan.keyTile, c.degree, c.causal ? 1u : 0u};
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
    TiledPush push{};
    push.n = t.geometry.tokens;
    push.headRatio = c.numQueryHeads / c.numKeyValueHeads;
    push.scale = c.scale;
    push.numQueryHeads = c.numQueryHeads;
    putStrides(push.q, t.geometry.q.strides);
    putStrides(push.k, t.geometry.k.strides);
    putStrides(push.v, t.geometry.v.strides);
    putStrides(push.o, t.geometry.out.strides);
    const uint32_t groupsX = (t.geometry.tokens + plan.rows - 1) / plan.rows;
    if (groupsX > plan.maxGroupsX)
        fail(PSK_ERROR_TOO_LARGE, "seqLen ", t.geometry.tokens, " needs ", groupsX, " workgroups; the device allows ", plan.maxGroupsX);
    const uint32_t chunks = tiledKeyChunks(plan, t.geometry.tokens);
    for (uint32_t chunk = 0; chunk < chunks; ++chunk) {
        const bool last = chunk + 1 == chunks;
        push.keyBegin = chunk * plan.keysPerDispatch;
        push.keyLimit = last ? t.geometry.tokens : push.keyBegin + plan.keysPerDispatch;
        push.flags = (chunk > 0 ? kFlagLoadState : 0) | (last ? 0 : kFlagStoreState);
        // Without chunks the state binding is never touched; the output stands in for it.
        const Access state = chunks > 1 ? Access{t.workspace, true} : reads(t.out);
        const Access output = last ? writes(t.out) : reads(t.out);
        recorder.dispatch(pipeline, {reads(t.q), reads(t.k), reads(t.v), output, state}, &push, sizeof(push), groupsX,
                          c.numQueryHeads, t.geometry.batch);
    }
}

}  // namespace psk
