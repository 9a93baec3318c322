// Every GPU kernel of the library, in one table: its GLSL source, its build axes (the defines that
// make its variants; shaders/CMakeLists.txt builds exactly these, kernel_table_test checks that
// the two agree), which implementation it is (generic shared-memory kernels for GPUs, lane-team
// kernels for CPU drivers, cooperative-matrix kernels), the pipeline stage it serves, and its
// interface (the spec and push structs of kernel_interface.hpp). Which kernel a call runs, and
// why, is decided in one place per kind: forward/polysketch_plan.cpp and forward/tiled_forward.cpp
// for the forward, decode/ for decoding; `psk info --plan` prints the decision.
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/kernel_interface.hpp"

namespace psk {

struct ShaderCode;

enum class KernelId : uint8_t {
    AttentionTiled,        // softmax / exact polynomial, flash-style (the baselines)
    AttentionTiledCoopMat, //   cooperative-matrix variant (16-bit storage, device or emulated)
    AttentionFlashCoopMat, //   FlashAttention-2-style cooperative variant (storage type = operand type)
    AttentionFlashFp32,    //   FlashAttention-2-style register-tiled variant on the FP32 units
    AttentionCombine,      //   the merge of its split keys (a forward continuing a softmax KV cache)
    SketchFeatures,        // polysketch feature map: S(x), local rows, degree-8 nodes
    SketchFeaturesTeam,    //   lane-team variant (random sketch, one level)
    SketchFeaturesCoopMat, //   cooperative-matrix variant (p = 4 random or learned; 16-bit storage, device or emulated)
    BlockStates,           // H_l = psi(S(K_l))^T [V_l | 1]
    BlockStatesTeam,       //   lane-team variant
    BlockStatesCoopMat,    //   cooperative-matrix variant (16-bit storage, device or emulated)
    BlockScan,             // exclusive prefix over blocks (causal)
    BlockReduce,           // sum over blocks (full)
    ZOperands,             // the prefix states packed as the cooperative output's operands (its Z_PACKED)
    PolysketchOutput,      // phi(q)^T Z + local part, normalized
    PolysketchOutputRows,  //   one query row per invocation (GPUs at h, dv <= 64)
    PolysketchOutputTeam,  //   lane-team variant
    PolysketchOutputCoopMat,  //   cooperative-matrix variant
    SelfTensor,            // materialized psi(S) rows (tests and tools only)
    DecodeOutput,          // decoding: one step (the token joins the state, its output)
    DecodeSoftmax,         // decoding baseline: a KV-cache step (key slices, combined by the last)
    CopyRows,              // strided row copies (forward calls with a decode state)
    CopyRowsConvert,       //   ... converting between the storage type and float32 (16-bit decoding)
    CoopMatStrictCheck,    // tests only: the emulated cooperative backend's rule checks
    MicroBarrier,          // psk micro only: the workgroup barrier round
    MicroChase,            // psk micro only: dependent-load latency (pointer chase)
    MicroSharedStore,      // psk micro only: 16-bit operands stored to shared memory, 2 or 16 bytes a store
    MicroCoopMat,          // psk micro only: cooperative-matrix products, operands from registers or shared memory
    MicroInflight,         // psk micro only: loads in flight per invocation (literal, specialized, run-time loops; across barriers)
    Count
};

/**
 * Each kernel's interface at compile time, one row per kernel: its specialization-constant struct,
 * push-constant struct and bindings struct (kernel_interface.hpp, from its shaders/interface/
 * header). KernelChoice::make<Id> takes only the kernel's spec struct and recordKernel
 * (kernel_dispatch.hpp) only its bindings and push structs. The kernel table's spec and push
 * names agree with these rows (kernel_table_test). Kernels not listed yet (the strict-emulation
 * check) are dispatched positionally; adopting the mechanism is a binding
 * list in the interface header and a row here (docs/ARCHITECTURE.md, "Adding a kernel variant").
 */
#define PSK_KERNEL_INTERFACES(X)                                                                      \
    X(AttentionTiled, AttentionTiledSpec, AttentionTiledPush, AttentionTiledBindings)                 \
    X(AttentionTiledCoopMat, AttentionTiledCoopMatSpec, AttentionTiledPush, AttentionTiledBindings)   \
    X(AttentionFlashCoopMat, AttentionFlashCoopMatSpec, AttentionTiledPush, AttentionTiledBindings)   \
    X(AttentionFlashFp32, AttentionFlashFp32Spec, AttentionTiledPush, AttentionTiledBindings)         \
    X(AttentionCombine, AttentionCombineSpec, AttentionCombinePush, AttentionCombineBindings)         \
    X(SketchFeatures, SketchFeaturesSpec, SketchFeaturesPush, SketchFeaturesBindings)                 \
    X(SketchFeaturesTeam, SketchFeaturesTeamSpec, SketchFeaturesPush, SketchFeaturesBindings)         \
    X(SketchFeaturesCoopMat, SketchFeaturesCoopMatSpec, SketchFeaturesPush, SketchFeaturesBindings)   \
    X(BlockStates, BlockStatesSpec, BlockStatesPush, BlockStatesBindings)                             \
    X(BlockStatesTeam, BlockStatesTeamSpec, BlockStatesPush, BlockStatesBindings)                     \
    X(BlockStatesCoopMat, BlockStatesCoopMatSpec, BlockStatesPush, BlockStatesBindings)               \
    X(BlockScan, BlockScanSpec, BlockColumnsPush, BlockScanBindings)                                  \
    X(BlockReduce, BlockReduceSpec, BlockColumnsPush, BlockReduceBindings)                            \
    X(ZOperands, ZOperandsSpec, ZOperandsPush, ZOperandsBindings)                                     \
    X(PolysketchOutput, PolysketchOutputSpec, PolysketchOutputPush, PolysketchOutputBindings)         \
    X(PolysketchOutputRows, PolysketchOutputRowsSpec, PolysketchOutputPush, PolysketchOutputBindings) \
    X(PolysketchOutputTeam, PolysketchOutputTeamSpec, PolysketchOutputPush, PolysketchOutputBindings) \
    X(PolysketchOutputCoopMat, PolysketchOutputCoopMatSpec, PolysketchOutputPush, PolysketchOutputBindings) \
    X(SelfTensor, NoSpec, SelfTensorPush, SelfTensorBindings)                                         \
    X(CopyRows, CopyRowsSpec, CopyRowsPush, CopyRowsBindings)                                         \
    X(CopyRowsConvert, CopyRowsSpec, CopyRowsPush, CopyRowsBindings)                                   \
    X(DecodeOutput, DecodeOutputSpec, DecodeOutputPush, DecodeOutputBindings)                         \
    X(DecodeSoftmax, DecodeSoftmaxSpec, DecodeSoftmaxPush, DecodeSoftmaxBindings)                     \
    X(MicroBarrier, MicroBarrierSpec, MicroPush, MicroBarrierBindings)                                \
    X(MicroChase, NoSpec, MicroPush, MicroChaseBindings)                                              \
    X(MicroSharedStore, MicroSharedStoreSpec, MicroPush, MicroBarrierBindings)                        \
    X(MicroCoopMat, MicroCoopMatSpec, MicroPush, MicroBarrierBindings)                                \
    X(MicroInflight, MicroInflightSpec, MicroPush, MicroInflightBindings)

/** The interface of kernel Id (defined for the rows of PSK_KERNEL_INTERFACES). */
template <KernelId Id>
struct KernelInterface;

#define PSK_KERNEL_INTERFACE(Id, SpecT, PushT, BindingsT)                                                        \
    template <>                                                                                                 \
    struct KernelInterface<KernelId::Id> {                                                                      \
        using Spec = kernel::SpecT;                                                                             \
        using Push = kernel::PushT;                                                                             \
        using Bindings = kernel::BindingsT;                                                                     \
        static_assert(std::is_same<Push, typename Bindings::Push>::value, #Id ": its bindings belong to another push block"); \
    };
PSK_KERNEL_INTERFACES(PSK_KERNEL_INTERFACE)
#undef PSK_KERNEL_INTERFACE

/** The names of a kernel's interface structs at run time; null for a kernel without a row. */
struct KernelInterfaceNames {
    const char* spec = nullptr;
    const char* push = nullptr;
    const char* bindings = nullptr;
};
inline KernelInterfaceNames kernelInterfaceNames(KernelId id) {
    switch (id) {
#define PSK_KERNEL_INTERFACE_NAMES(Id, SpecT, PushT, BindingsT) \
    case KernelId::Id:                                         \
        return {#SpecT, #PushT, #BindingsT};
        PSK_KERNEL_INTERFACES(PSK_KERNEL_INTERFACE_NAMES)
#undef PSK_KERNEL_INTERFACE_NAMES
        default:
            return {};
    }
}

enum class KernelImpl : uint8_t { Generic, Team, Cooperative };

struct KernelInfo {
    KernelId id;
    const char* name;      // registry prefix: variants are "<name>.<axis>.<storage>" or "<name>.<storage>"
    const char* source;    // shaders/<source>
    KernelImpl impl;
    const char* axes;      // the variant axes (first axis, if any, then the storage types)
    const char* spec;      // its specialization-constant struct (kernel_interface.hpp)
    const char* push;      // its push-constant struct
    const char* stage;     // what it computes, for `psk info --plan`
};

/** The table, indexed by KernelId. */
const KernelInfo& kernelInfo(KernelId id);

/** The values of a kernel's first build axis ("random", "learned", ...), or empty when it has none. */
std::string_view kernelAxis(KernelId id, size_t i);
/** Storage types a kernel is built for: all three ("f32", "f16", "bf16"), or only "f32". */
bool kernelPerStorageType(KernelId id);

/**
 * The registry name of a variant: kernelVariant(SketchFeatures, "random", FLOAT16) ->
 * "sketch_features.random.f16"; kernels without an axis take axis = "" and kernels built only in
 * float32 ignore `type`.
 */
std::string kernelVariant(KernelId id, std::string_view axis, PskDataType type);

/** The variant's SPIR-V, or null when this build does not contain it (optional coopmat variants). */
const ShaderCode* findKernelVariant(KernelId id, std::string_view axis, PskDataType type);

const char* implName(KernelImpl impl);  // "generic", "team", "cooperative"

}  // namespace psk

namespace psk {

/** One kernel a call runs: the variant, its specialization constants, and why the plan chose it. */
struct KernelChoice {
    KernelId kernel = KernelId::Count;
    std::string variant;               // registry name, e.g. "sketch_features_team.f16"
    kernel::SpecConstants constants;   // by constant_id, with names
    std::string reason;                // one line: the rule that made it eligible / chosen
    uint32_t requiredSubgroupSize = 0; // the kernel assumes this subgroup size (0: any); pinned where it can vary

    /** The choice of kernel Id: its spec struct is the one its interface row names (checked at compile time). */
    template <KernelId Id>
    static KernelChoice make(std::string_view axis, PskDataType type, const typename KernelInterface<Id>::Spec& spec, std::string why) {
        return make(Id, axis, type, spec, std::move(why));
    }
    /** For kernels without an interface row (decode); their spec struct is not checked against the id. */
    template <typename Spec>
    static KernelChoice make(KernelId id, std::string_view axis, PskDataType type, const Spec& spec, std::string why) {
        KernelChoice c;
        c.kernel = id;
        c.variant = kernelVariant(id, axis, type);
        c.constants = kernel::SpecConstants::of(spec);
        c.reason = std::move(why);
        return c;
    }
    bool empty() const { return variant.empty(); }
    /** "<variant> (<impl>) NAME=v ...: <reason>" */
    std::string describe() const;
};

}  // namespace psk
