// The prefix states packed as the cooperative output's B operands (shaders/z_operands.comp): the
// output's Z_PACKED. Planned with the cooperative output (forward/polysketch_plan.cpp), recorded
// between the prefix and the output (forward/polysketch_forward.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/coop_variants.hpp"
#include "kernels/kernel_dispatch.hpp"
#include "kernels/kernel_table.hpp"
#include "vk/recorder.hpp"

namespace psk {

/**
 * The packing kernel for an output of `featChunk` features per step, `columns` operand columns
 * (its NT x CM_N, a multiple of 8) over dv value columns and states rows of `stateStride` floats,
 * for `operand` (float16 or bfloat16); `invocations`: the device's workgroup limit.
 */
struct ZOperandsPlan {
    KernelChoice kernel;
    uint32_t chunk = 0;   // features per record
    uint32_t record = 0;  // 16-byte elements per record: 1 + 2 chunk columns / 8
    /**
     * The walking form (WALK = 1; planned with `walk`, causal only): the prefix and the packing in
     * one pass over the block states before any prefix (recordZOperandsWalk), for the calls whose
     * packing workgroups (chunks x B x Hkv) are at least walkMinGroups and that continue no decode
     * state (docs/MODEL.md, "The floor of each architecture"); empty when not planned.
     */
    KernelChoice walkKernel;
    uint32_t walkMinGroups = 0;
    uint32_t walkMaxBlocks = 65535;  // blocks a walk may take (less where a CPU driver's loop limit binds)
    uint32_t walkUnits = 0;          // record units (8 columns of one feature row) per invocation in the walk
};
/**
 * Loop iterations an invocation of the walk runs per block and record unit on llvmpipe, which ends
 * an invocation's loops silently after 65535 iterations in all: its H loads (8 columns), the
 * split and packing (4 pairs), the unit loops themselves; rounded up from ~22.
 */
constexpr uint32_t kEmulatedZWalkIterationsPerUnit = 32;
/** The model's threshold for the walking form: 64 workgroups, ~half an H100 / H200's SMs streaming at once. */
constexpr uint32_t kZOperandsWalkMinGroups = 64;
ZOperandsPlan planZOperands(CoopOperand operand, uint32_t valueDim, uint32_t stateStride, uint32_t featChunk, uint32_t columns,
                            uint32_t invocations, bool walk = false, uint32_t walkMinGroups = kZOperandsWalkMinGroups,
                            const std::string& walkNote = std::string());

/** Records of ceil(features / plan.chunk) chunks per block, 16 bytes x plan.record each: the bytes of `blocks` blocks of `sequences`. */
uint64_t zOperandsBytes(const ZOperandsPlan& plan, uint32_t features, uint32_t sequences, uint32_t blocks);

/**
 * Packs blocks [0, blocks) of every sequence of `states` ([sequences][stateBlocks][features][stride]
 * floats: Z_l after the prefix, or Z in block 0 after the reduction, `blocks` = 1) into `operands`
 * ([sequences][blocks][chunks] records).
 */
void recordZOperands(Recorder& recorder, const KernelPipeline& pipeline, const ZOperandsPlan& plan, BufferRange states,
                     BufferRange operands, uint32_t sequences, uint32_t stateBlocks, uint32_t blocks, uint32_t features);

/**
 * The walking form (plan.walkKernel's pipeline): `states` holds the block states H_l before any
 * prefix ([sequences][blocks][features][stride]); writes the records of Z_l = H_0 + ... + H_{l-1}
 * (summed in that order in float32; Z_0 = 0) for every block, as recordZOperands would after the
 * scan. One workgroup per (chunk, sequence).
 */
void recordZOperandsWalk(Recorder& recorder, const KernelPipeline& pipeline, const ZOperandsPlan& plan, BufferRange states,
                         BufferRange operands, uint32_t sequences, uint32_t blocks, uint32_t features);

/** The walking form's workgroups for `features` and `sequences`: chunks x sequences. */
uint64_t zOperandsWalkGroups(const ZOperandsPlan& plan, uint32_t features, uint32_t sequences);

}  // namespace psk
