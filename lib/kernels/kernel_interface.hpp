// The host side of the kernel interface: the same headers the shaders include
// (shaders/interface/*.h), read as C++. For every kernel this gives
//   - its push-constant struct (e.g. SketchFeaturesPush), field for field the shader's block,
//   - its specialization-constant struct (e.g. SketchFeaturesSpec), one named field per constant
//     with the shader's default; specFields() maps each field to its constant_id by name, so a
//     constant can only be set by name, never by position, and
//   - its bindings struct (e.g. SketchFeaturesBindings), one named buffer field per binding of
//     its list, with the access the list declares, tied to its push-constant struct (Push):
//     kernels/kernel_dispatch.hpp records a dispatch from the two, so a buffer is bound by name,
//     never by position, and a push block of another kernel does not compile.
#pragma once

#include <polysketch/polysketch.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "vk/buffer_range.hpp"

namespace psk::kernel {

using uint = std::uint32_t;

#include "interface/attention_tiled.h"
#include "interface/attention_tiled_coopmat.h"
#include "interface/attention_flash_coopmat.h"
#include "interface/attention_flash_fp32.h"
#include "interface/attention_combine.h"
#include "interface/block_scan.h"
#include "interface/block_states.h"
#include "interface/block_states_coopmat.h"
#include "interface/copy_rows.h"
#include "interface/coopmat_strict_check.h"
#include "interface/decode_output.h"
#include "interface/decode_softmax.h"
#include "interface/micro.h"
#include "interface/polysketch_output.h"
#include "interface/polysketch_output_coopmat.h"
#include "interface/self_tensor.h"
#include "interface/sketch_features.h"
#include "interface/sketch_features_coopmat.h"
#include "interface/z_operands.h"

/** What a kernel does to one of its buffers, as its binding list declares it. */
enum class BindingAccess : uint8_t { read, write, read_write };

/**
 * One binding's buffer range in a bindings struct. unwritten(range): bound, but this call does not
 * write it (a stand-in for a binding the call leaves alone, or an output a call writes only on its
 * last dispatch): tracked as a read whatever the list declares.
 */
struct Bound {
    BufferRange range;
    bool unwritten = false;
    Bound() = default;
    Bound(BufferRange r) : range(r) {}  // NOLINT: implicit, as a binding is assigned a range
};
inline Bound unwritten(BufferRange r) {
    Bound b(r);
    b.unwritten = true;
    return b;
}

#define PSK_BINDING_FIELD(binding, name, access) Bound name;
#define PSK_BINDING_ONE(binding, name, access) +1
#define PSK_BINDING_SLOT(binding, name, access) binding,
#define PSK_BINDING_NAME(binding, name, access) #name,
#define PSK_BINDING_ACCESS(binding, name, access) BindingAccess::access,
#define PSK_BINDING_RANGE(binding, name, access) &Self::name,
#define PSK_BINDINGS_STRUCT(Struct, PushStruct, LIST)                                              \
    struct Struct {                                                                             \
        using Push = PushStruct;                                                                \
        using Self = Struct;                                                                    \
        LIST(PSK_BINDING_FIELD)                                                                 \
        static constexpr const char* kName = #Struct;                                           \
        static constexpr uint32_t kCount = 0 LIST(PSK_BINDING_ONE);                              \
        static constexpr uint32_t kSlots[kCount] = {LIST(PSK_BINDING_SLOT)};                     \
        static constexpr const char* kNames[kCount] = {LIST(PSK_BINDING_NAME)};                  \
        static constexpr BindingAccess kAccess[kCount] = {LIST(PSK_BINDING_ACCESS)};              \
        static constexpr Bound Self::*kFields[kCount] = {LIST(PSK_BINDING_RANGE)};                \
    };                                                                                          \
    static_assert(bindingSlotsInOrder(Struct::kSlots, Struct::kCount), #Struct ": bindings must be 0, 1, 2, ... in list order");

/** Binding lists name slots 0..N-1 in order, so that field i is binding i. */
constexpr bool bindingSlotsInOrder(const uint32_t* slots, uint32_t count) {
    for (uint32_t i = 0; i < count; ++i)
        if (slots[i] != i) return false;
    return true;
}

PSK_BINDINGS_STRUCT(AttentionTiledBindings, AttentionTiledPush, PSK_ATTENTION_TILED_BINDINGS)
PSK_BINDINGS_STRUCT(AttentionCombineBindings, AttentionCombinePush, PSK_ATTENTION_COMBINE_BINDINGS)
PSK_BINDINGS_STRUCT(SketchFeaturesBindings, SketchFeaturesPush, PSK_SKETCH_FEATURES_BINDINGS)
PSK_BINDINGS_STRUCT(BlockStatesBindings, BlockStatesPush, PSK_BLOCK_STATES_BINDINGS)
PSK_BINDINGS_STRUCT(BlockScanBindings, BlockColumnsPush, PSK_BLOCK_SCAN_BINDINGS)
PSK_BINDINGS_STRUCT(BlockReduceBindings, BlockColumnsPush, PSK_BLOCK_REDUCE_BINDINGS)
PSK_BINDINGS_STRUCT(ZOperandsBindings, ZOperandsPush, PSK_Z_OPERANDS_BINDINGS)
PSK_BINDINGS_STRUCT(PolysketchOutputBindings, PolysketchOutputPush, PSK_POLYSKETCH_OUTPUT_BINDINGS)
PSK_BINDINGS_STRUCT(SelfTensorBindings, SelfTensorPush, PSK_SELF_TENSOR_BINDINGS)
PSK_BINDINGS_STRUCT(CopyRowsBindings, CopyRowsPush, PSK_COPY_ROWS_BINDINGS)
PSK_BINDINGS_STRUCT(DecodeOutputBindings, DecodeOutputPush, PSK_DECODE_OUTPUT_BINDINGS)
PSK_BINDINGS_STRUCT(DecodeSoftmaxBindings, DecodeSoftmaxPush, PSK_DECODE_SOFTMAX_BINDINGS)
PSK_BINDINGS_STRUCT(MicroBarrierBindings, MicroPush, PSK_MICRO_BARRIER_BINDINGS)
PSK_BINDINGS_STRUCT(MicroChaseBindings, MicroPush, PSK_MICRO_CHASE_BINDINGS)
PSK_BINDINGS_STRUCT(MicroInflightBindings, MicroPush, PSK_MICRO_INFLIGHT_BINDINGS)

#undef PSK_BINDINGS_STRUCT
#undef PSK_BINDING_RANGE
#undef PSK_BINDING_ACCESS
#undef PSK_BINDING_NAME
#undef PSK_BINDING_SLOT
#undef PSK_BINDING_ONE
#undef PSK_BINDING_FIELD

/**
 * A kernel whose buffers are not declared as a binding list yet: dispatched through
 * Recorder::dispatch with positional accesses. Declaring its list (PSK_<KERNEL>_BINDINGS in its
 * interface header, PSK_DECLARE_BINDINGS in the shader, a PSK_BINDINGS_STRUCT line here and its
 * row of PSK_KERNEL_INTERFACES) moves it to kernels/kernel_dispatch.hpp.
 */
struct UndeclaredBindings {
    static constexpr const char* kName = "UndeclaredBindings";
};

/** One specialization constant of a spec struct: constant_id, byte offset in the struct, name. */
struct SpecField {
    uint32_t id;
    uint32_t offset;
    const char* name;
};

#define PSK_SPEC_FIELD(id, type, name, value) uint32_t name = value;
#define PSK_SPEC_ENTRY(id, type, name, value) SpecField{id, uint32_t(offsetof(Self, name)), #name},
#define PSK_SPEC_STRUCT(Struct, LIST)                                  \
    struct Struct {                                                    \
        LIST(PSK_SPEC_FIELD)                                           \
    };                                                                 \
    inline const std::vector<SpecField>& specFields(const Struct*) {   \
        using Self = Struct;                                           \
        static const std::vector<SpecField> fields{LIST(PSK_SPEC_ENTRY)}; \
        return fields;                                                 \
    }

PSK_SPEC_STRUCT(AttentionTiledSpec, PSK_ATTENTION_TILED_SPEC)
PSK_SPEC_STRUCT(AttentionTiledCoopMatSpec, PSK_ATTENTION_TILED_COOPMAT_SPEC)
PSK_SPEC_STRUCT(AttentionFlashCoopMatSpec, PSK_ATTENTION_FLASH_COOPMAT_SPEC)
PSK_SPEC_STRUCT(AttentionFlashFp32Spec, PSK_ATTENTION_FLASH_FP32_SPEC)
PSK_SPEC_STRUCT(AttentionCombineSpec, PSK_ATTENTION_COMBINE_SPEC)
PSK_SPEC_STRUCT(SketchFeaturesSpec, PSK_SKETCH_FEATURES_SPEC)
PSK_SPEC_STRUCT(SketchFeaturesTeamSpec, PSK_SKETCH_FEATURES_TEAM_SPEC)
PSK_SPEC_STRUCT(SketchFeaturesCoopMatSpec, PSK_SKETCH_FEATURES_COOPMAT_SPEC)
PSK_SPEC_STRUCT(BlockStatesSpec, PSK_BLOCK_STATES_SPEC)
PSK_SPEC_STRUCT(BlockStatesTeamSpec, PSK_BLOCK_STATES_TEAM_SPEC)
PSK_SPEC_STRUCT(BlockStatesCoopMatSpec, PSK_BLOCK_STATES_COOPMAT_SPEC)
PSK_SPEC_STRUCT(BlockScanSpec, PSK_BLOCK_SCAN_SPEC)
PSK_SPEC_STRUCT(BlockReduceSpec, PSK_BLOCK_REDUCE_SPEC)
PSK_SPEC_STRUCT(ZOperandsSpec, PSK_Z_OPERANDS_SPEC)
PSK_SPEC_STRUCT(PolysketchOutputSpec, PSK_POLYSKETCH_OUTPUT_SPEC)
PSK_SPEC_STRUCT(PolysketchOutputRowsSpec, PSK_POLYSKETCH_OUTPUT_ROWS_SPEC)
PSK_SPEC_STRUCT(PolysketchOutputTeamSpec, PSK_POLYSKETCH_OUTPUT_TEAM_SPEC)
PSK_SPEC_STRUCT(PolysketchOutputCoopMatSpec, PSK_POLYSKETCH_OUTPUT_COOPMAT_SPEC)
PSK_SPEC_STRUCT(DecodeOutputSpec, PSK_DECODE_OUTPUT_SPEC)
PSK_SPEC_STRUCT(DecodeSoftmaxSpec, PSK_DECODE_SOFTMAX_SPEC)
PSK_SPEC_STRUCT(CopyRowsSpec, PSK_COPY_ROWS_SPEC)
PSK_SPEC_STRUCT(CoopMatStrictCheckSpec, PSK_COOPMAT_STRICT_CHECK_SPEC)
PSK_SPEC_STRUCT(MicroBarrierSpec, PSK_MICRO_BARRIER_SPEC)
PSK_SPEC_STRUCT(MicroSharedStoreSpec, PSK_MICRO_SHARED_STORE_SPEC)
PSK_SPEC_STRUCT(MicroCoopMatSpec, PSK_MICRO_COOPMAT_SPEC)
PSK_SPEC_STRUCT(MicroInflightSpec, PSK_MICRO_INFLIGHT_SPEC)

#undef PSK_SPEC_STRUCT
#undef PSK_SPEC_ENTRY
#undef PSK_SPEC_FIELD

/** self_tensor.comp and micro_chase.comp have no specialization constants. */
struct NoSpec {};
inline const std::vector<SpecField>& specFields(const NoSpec*) {
    static const std::vector<SpecField> none;
    return none;
}

/** A kernel's specialization constants as values in constant_id order, with their names. */
struct SpecConstants {
    std::vector<uint32_t> values;     // values[i]: constant_id i
    std::vector<const char*> names;   // names[i]: the GLSL name of constant_id i

    template <typename Spec>
    static SpecConstants of(const Spec& spec) {
        SpecConstants c;
        if constexpr (std::is_empty<Spec>::value) return c;  // NoSpec: nothing to read (and no bytes to read it from)
        const std::vector<SpecField>& fields = specFields(static_cast<const Spec*>(nullptr));
        c.values.resize(fields.size());
        c.names.resize(fields.size());
        for (const SpecField& f : fields) {
            uint32_t v;
            std::memcpy(&v, reinterpret_cast<const char*>(&spec) + f.offset, 4);
            c.values.at(f.id) = v;  // ids are 0..N-1 (kernel_interface_test checks it)
            c.names.at(f.id) = f.name;
        }
        return c;
    }
    /** "NAME=value NAME=value ..." in constant_id order. */
    std::string describe() const;
};

// Every push block fits the one pipeline layout's push-constant range (vk/pipelines.hpp).
static_assert(sizeof(AttentionTiledPush) <= 128 && sizeof(SketchFeaturesPush) <= 128 && sizeof(BlockStatesPush) <= 128 &&
                  sizeof(BlockColumnsPush) <= 128 && sizeof(ZOperandsPush) <= 128 &&
                  sizeof(PolysketchOutputPush) <= 128 && sizeof(SelfTensorPush) <= 128 &&
                  sizeof(DecodeOutputPush) <= 128 && sizeof(DecodeSoftmaxPush) <= 128 && sizeof(CopyRowsPush) <= 128 &&
                  sizeof(MicroPush) <= 128,
              "a push-constant block exceeds the 128 bytes of the pipeline layout");

/** Strides as the kernels take them (makeForwardGeometry guarantees every used offset fits 32 bits). */
inline TensorStrides pushStrides(const PskTensorStrides& s) {
    return {static_cast<uint32_t>(s.batch), static_cast<uint32_t>(s.head), static_cast<uint32_t>(s.token)};
}

}  // namespace psk::kernel
