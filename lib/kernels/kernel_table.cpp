#include "kernels/kernel_table.hpp"

#include "kernels/coop_variants.hpp"
#include "kernels/shader_registry.hpp"
#include "util/error.hpp"
#include "util/storage_type.hpp"

namespace psk {

namespace {

// The cooperative kernels' first axis is every backend x sub-variant of their one declaration
// (shaders/interface/coop_backends.h, kernels/coop_variants.hpp), not a list written here.
constexpr const char* kCoopAxes = "(interface/coop_backends.h) storage";

// One row per kernel, in KernelId order. Axes: "a|b" is the first build axis, "storage" the
// storage types f32/f16/bf16, "f32" float32 only. The coopmat variant's first axis is
// "<backend>_<operand>": nv_f16, khr_f16, khr_bf16 (built where the compiler supports the
// extension) and emu_f16, emu_bf16 (the emulated backend, always built: tests on any device);
// attention_tiled_coopmat's is "<backend>_<operand>_<kind>" (kind softmax or polynomial),
// sketch_features_coopmat's "<backend>_<operand>_<sketch>" (sketch random or learned).
constexpr KernelInfo kKernels[] = {
    {KernelId::AttentionTiled, "attention_tiled", "attention_tiled.comp", KernelImpl::Generic, "softmax|polynomial storage",
     "AttentionTiledSpec", "AttentionTiledPush", "softmax / exact polynomial attention (flash-style tiles)"},
    {KernelId::AttentionTiledCoopMat, "attention_tiled_coopmat", "attention_tiled_coopmat.comp", KernelImpl::Cooperative,
     kCoopAxes,
     "AttentionTiledCoopMatSpec", "AttentionTiledPush", "softmax / exact polynomial attention on cooperative matrices (flash-style)"},
    {KernelId::AttentionFlashCoopMat, "attention_flash_coopmat", "attention_flash_coopmat.comp", KernelImpl::Cooperative,
     kCoopAxes, "AttentionFlashCoopMatSpec", "AttentionTiledPush",
     "softmax / exact polynomial attention on cooperative matrices (FlashAttention-2 style: operands as stored)"},
    {KernelId::AttentionFlashFp32, "attention_flash_fp32", "attention_flash_fp32.comp", KernelImpl::Generic,
     "softmax|polynomial|softmax_cache storage", "AttentionFlashFp32Spec", "AttentionTiledPush",
     "softmax / exact polynomial attention on the FP32 units (FlashAttention-2 style, register tiles; softmax_cache: over a "
     "float32 KV cache, split keys)"},
    {KernelId::AttentionCombine, "attention_combine", "attention_combine.comp", KernelImpl::Generic, "storage",
     "AttentionCombineSpec", "AttentionCombinePush", "softmax over split keys: the splits' (m, l, O) merged into the output"},
    {KernelId::SketchFeatures, "sketch_features", "sketch_features.comp", KernelImpl::Generic, "random|learned storage",
     "SketchFeaturesSpec", "SketchFeaturesPush", "feature map: S(q), S(k) (+ local rows, degree-8 nodes)"},
    {KernelId::SketchFeaturesTeam, "sketch_features_team", "sketch_features_team.comp", KernelImpl::Team, "storage",
     "SketchFeaturesTeamSpec", "SketchFeaturesPush", "feature map: S(q), S(k) (+ local rows)"},
    {KernelId::SketchFeaturesCoopMat, "sketch_features_coopmat", "sketch_features_coopmat.comp", KernelImpl::Cooperative,
     kCoopAxes,
     "SketchFeaturesCoopMatSpec", "SketchFeaturesPush", "feature map on cooperative matrices: S(q), S(k) (+ local rows)"},
    {KernelId::BlockStates, "block_states", "block_states.comp", KernelImpl::Generic, "storage", "BlockStatesSpec",
     "BlockStatesPush", "block states H_l = psi(S(K_l))^T [V_l | 1]"},
    {KernelId::BlockStatesTeam, "block_states_team", "block_states_team.comp", KernelImpl::Team, "storage",
     "BlockStatesTeamSpec", "BlockStatesPush", "block states H_l = psi(S(K_l))^T [V_l | 1]"},
    {KernelId::BlockStatesCoopMat, "block_states_coopmat", "block_states_coopmat.comp", KernelImpl::Cooperative,
     kCoopAxes, "BlockStatesCoopMatSpec", "BlockStatesPush",
     "block states on cooperative matrices"},
    {KernelId::BlockScan, "block_scan", "block_scan.comp", KernelImpl::Generic, "f32", "BlockScanSpec", "BlockColumnsPush",
     "exclusive prefix Z_l = sum_{j<l} H_j (Blelloch)"},
    {KernelId::BlockReduce, "block_reduce", "block_reduce.comp", KernelImpl::Generic, "f32", "BlockReduceSpec",
     "BlockColumnsPush", "sum of every block (full attention)"},
    {KernelId::ZOperands, "z_operands", "z_operands.comp", KernelImpl::Generic, "f16|bf16 f32", "ZOperandsSpec", "ZOperandsPush",
     "the prefix states as the cooperative output's B operands: scale, hi and lo per chunk of features, once per block"},
    {KernelId::PolysketchOutput, "polysketch_output", "polysketch_output.comp", KernelImpl::Generic, "storage",
     "PolysketchOutputSpec", "PolysketchOutputPush", "output: phi(q)^T Z + local part, normalized"},
    {KernelId::PolysketchOutputRows, "polysketch_output_rows", "polysketch_output_rows.comp", KernelImpl::Generic, "storage",
     "PolysketchOutputRowsSpec", "PolysketchOutputPush", "output, one query row per invocation: phi(q)^T Z + local part, normalized"},
    {KernelId::PolysketchOutputTeam, "polysketch_output_team", "polysketch_output_team.comp", KernelImpl::Team, "storage",
     "PolysketchOutputTeamSpec", "PolysketchOutputPush", "output: phi(q)^T Z + local part, normalized"},
    {KernelId::PolysketchOutputCoopMat, "polysketch_output_coopmat", "polysketch_output_coopmat.comp", KernelImpl::Cooperative,
     kCoopAxes, "PolysketchOutputCoopMatSpec", "PolysketchOutputPush",
     "output on cooperative matrices: phi(q)^T Z + local part, normalized"},
    {KernelId::SelfTensor, "self_tensor", "self_tensor.comp", KernelImpl::Generic, "f32", "NoSpec", "SelfTensorPush",
     "materialized features psi(S) (tests, tools)"},
    {KernelId::DecodeOutput, "decode_output", "decode_output.comp", KernelImpl::Generic, "random|learned storage",
     "DecodeOutputSpec", "DecodeOutputPush",
     "decoding: a step, the token's sketch (random), the token into z and phi(q)^T z (+ exact local part)"},
    {KernelId::DecodeSoftmax, "decode_softmax", "decode_softmax.comp", KernelImpl::Generic, "tree|subgroup storage", "DecodeSoftmaxSpec",
     "DecodeSoftmaxPush", "decoding baseline: a KV-cache step over key slices, combined by the last workgroup"},
    {KernelId::CopyRows, "copy_rows", "copy_rows.comp", KernelImpl::Generic, "storage", "CopyRowsSpec", "CopyRowsPush",
     "state passing: rows between strided tensors"},
    {KernelId::CopyRowsConvert, "copy_rows_convert", "copy_rows.comp", KernelImpl::Generic, "to_f32|from_f32 storage",
     "CopyRowsSpec", "CopyRowsPush", "16-bit decoding: rows between the storage type and the float32 state"},
    {KernelId::CoopMatStrictCheck, "coopmat_strict_check", "coopmat_strict_check.comp", KernelImpl::Cooperative, "emu_f16 f32",
     "CoopMatStrictCheckSpec", "CoopMatStrictCheckPush", "tests: one emulated cooperative product with a rule violated on request"},
    {KernelId::MicroBarrier, "micro_barrier", "micro_barrier.comp", KernelImpl::Generic, "f32", "MicroBarrierSpec",
     "MicroPush", "psk micro: workgroup barrier rounds (shared load, barrier, shared store, barrier)"},
    {KernelId::MicroChase, "micro_chase", "micro_chase.comp", KernelImpl::Generic, "f32", "NoSpec", "MicroPush",
     "psk micro: dependent-load latency (one invocation chasing a random cycle of 128-byte lines)"},
    {KernelId::MicroSharedStore, "micro_shared_store", "micro_shared_store.comp", KernelImpl::Generic, "f32",
     "MicroSharedStoreSpec", "MicroPush",
     "psk micro: a tile of 16-bit operands stored to shared memory (eight 16-bit or one 16-byte store per chunk), barrier, read back, barrier"},
    {KernelId::MicroCoopMat, "micro_coopmat", "micro_coopmat.comp", KernelImpl::Cooperative, "nv_f16|khr_f16|emu_f16 f32",
     "MicroCoopMatSpec", "MicroPush",
     "psk micro: cooperative-matrix products with their operands in registers or loaded from shared memory as the kernels load them"},
    {KernelId::MicroInflight, "micro_inflight", "micro_inflight.comp", KernelImpl::Generic, "f32", "MicroInflightSpec", "MicroPush",
     "psk micro: loads in flight per invocation (loops over a literal, specialized or run-time count; across barriers)"},
};
static_assert(sizeof(kKernels) / sizeof(kKernels[0]) == size_t(KernelId::Count), "one row per KernelId");

}  // namespace

const KernelInfo& kernelInfo(KernelId id) {
    const size_t i = static_cast<size_t>(id);
    if (i >= size_t(KernelId::Count) || kKernels[i].id != id) fail(PSK_ERROR_INTERNAL, "kernel table out of order");
    return kKernels[i];
}

std::string_view kernelAxis(KernelId id, size_t i) {
    std::string_view axes = kernelInfo(id).axes;
    if (axes == kCoopAxes && isCoopKernel(id)) {
        std::string_view list = coopAxisList(id);
        for (size_t k = 0; k < i; ++k) {
            const size_t bar = list.find('|');
            if (bar == std::string_view::npos) return {};
            list = list.substr(bar + 1);
        }
        return list.substr(0, list.find('|'));
    }
    const size_t space = axes.find(' ');
    if (space == std::string_view::npos) return {};
    std::string_view first = axes.substr(0, space);
    for (size_t k = 0; k < i; ++k) {
        const size_t bar = first.find('|');
        if (bar == std::string_view::npos) return {};
        first = first.substr(bar + 1);
    }
    return first.substr(0, first.find('|'));
}

bool kernelPerStorageType(KernelId id) {
    std::string_view axes = kernelInfo(id).axes;
    return axes.size() >= 7 && axes.substr(axes.size() - 7) == "storage";
}

std::string kernelVariant(KernelId id, std::string_view axis, PskDataType type) {
    std::string name = kernelInfo(id).name;
    if (!axis.empty()) {
        name += '.';
        name += axis;
    }
    name += '.';
    name += kernelPerStorageType(id) ? dataTypeSuffix(type) : "f32";
    return name;
}

const ShaderCode* findKernelVariant(KernelId id, std::string_view axis, PskDataType type) {
    return findShader(kernelVariant(id, axis, type));
}

const char* implName(KernelImpl impl) {
    switch (impl) {
        case KernelImpl::Team: return "team";
        case KernelImpl::Cooperative: return "cooperative";
        default: return "generic";
    }
}

std::string KernelChoice::describe() const {
    if (empty()) return "(none)";
    std::string s = variant + " (" + implName(kernelInfo(kernel).impl) + ")";
    const std::string c = constants.describe();
    if (!c.empty()) s += " " + c;
    if (!reason.empty()) s += ": " + reason;
    return s;
}

}  // namespace psk

namespace psk::kernel {

std::string SpecConstants::describe() const {
    std::string s;
    for (size_t i = 0; i < values.size(); ++i) {
        if (i) s += ' ';
        s += names[i];
        s += '=';
        s += std::to_string(values[i]);
    }
    return s;
}

}  // namespace psk::kernel
