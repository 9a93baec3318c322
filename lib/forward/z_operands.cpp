#include "forward/z_operands.hpp"

#include <algorithm>

#include "util/error.hpp"
#include "util/sizes.hpp"

namespace psk {

ZOperandsPlan planZOperands(CoopOperand operand, uint32_t valueDim, uint32_t stateStride, uint32_t featChunk, uint32_t columns,
                            uint32_t invocations, bool walk, uint32_t walkMinGroups, const std::string& walkNote) {
    if (columns % 8 != 0 || columns <= valueDim || featChunk == 0 || featChunk % 8 != 0)
        fail(PSK_ERROR_INTERNAL, "z operands: ", columns, " columns for dv = ", valueDim, ", chunks of ", featChunk,
             " features (columns a multiple of 8 above dv, and chunks of whole 8-feature units, needed)");
    kernel::ZOperandsSpec z;
    // One record per workgroup: 128 invocations cover a record of 64 features x 80 columns in
    // 5 rounds of two 16-byte stores each, and fit every device's limit (at least 128).
    z.THREADS = std::min<uint32_t>(128, invocations);
    z.VALUE_DIM = valueDim;
    z.Z_STRIDE = stateStride;
    z.FEAT_CHUNK = featChunk;
    z.NC = columns;
    ZOperandsPlan plan;
    plan.chunk = featChunk;
    plan.record = 1 + 2 * featChunk * columns / 8;
    plan.kernel = KernelChoice::make<KernelId::ZOperands>(
        operand == CoopOperand::BF16 ? "bf16" : "f16", PSK_DATA_TYPE_FLOAT32, z,
        cat("the prefix states as the cooperative output's operands (Z_PACKED): a record of ", featChunk, " features x ", columns,
            " columns, hi + lo, per block and chunk, ", plan.record * 16, " bytes"));
    if (walk) {
        z.WALK = 1;
        plan.walkUnits = ceilDiv(featChunk * columns / 8, z.THREADS);
        plan.walkMinGroups = std::max<uint32_t>(1, walkMinGroups);
        plan.walkKernel = KernelChoice::make<KernelId::ZOperands>(
            operand == CoopOperand::BF16 ? "bf16" : "f16", PSK_DATA_TYPE_FLOAT32, z,
            cat("the prefix and the packing in one pass (WALK=1: a workgroup walks one chunk's blocks, no scan pass, no "
                "float32 prefix written) for calls that continue no decode state, with at least ",
                plan.walkMinGroups, " workgroups (chunks x B x Hkv)", walkNote));
    }
    return plan;
}

uint64_t zOperandsWalkGroups(const ZOperandsPlan& plan, uint32_t features, uint32_t sequences) {
    return uint64_t(ceilDiv(features, plan.chunk)) * sequences;
}

uint64_t zOperandsBytes(const ZOperandsPlan& plan, uint32_t features, uint32_t sequences, uint32_t blocks) {
    return uint64_t(sequences) * blocks * ceilDiv(features, plan.chunk) * plan.record * 16;
}

namespace {

/** One dispatch of z_operands.comp: a workgroup per chunk x `gridBlocks` x sequence. */
void recordPacking(Recorder& recorder, const KernelPipeline& pipeline, const ZOperandsPlan& plan, BufferRange states,
                   BufferRange operands, uint32_t sequences, uint32_t stateBlocks, uint32_t blocks, uint32_t features,
                   uint32_t gridBlocks) {
    kernel::ZOperandsPush push{};
    push.features = features;
    push.state_blocks = stateBlocks;
    push.blocks = blocks;
    kernel::ZOperandsBindings b;
    b.STATES = states;
    b.OPERANDS = operands;
    recordKernel(recorder, pipeline, b, push, ceilDiv(features, plan.chunk), gridBlocks, sequences);
}

}  // namespace

void recordZOperands(Recorder& recorder, const KernelPipeline& pipeline, const ZOperandsPlan& plan, BufferRange states,
                     BufferRange operands, uint32_t sequences, uint32_t stateBlocks, uint32_t blocks, uint32_t features) {
    recordPacking(recorder, pipeline, plan, states, operands, sequences, stateBlocks, blocks, features, blocks);
}

void recordZOperandsWalk(Recorder& recorder, const KernelPipeline& pipeline, const ZOperandsPlan& plan, BufferRange states,
                         BufferRange operands, uint32_t sequences, uint32_t blocks, uint32_t features) {
    recordPacking(recorder, pipeline, plan, states, operands, sequences, blocks, blocks, features, 1);  // one workgroup walks the blocks
}

}  // namespace psk
