// The host side of the kernel interface: the same headers the shaders include
// (shaders/interface/*.h), read as C++. For every kernel this gives
//   - its push-constant struct (e.g. SketchFeaturesPush), field for field the shader's block, and
//   - its specialization-constant struct (e.g. SketchFeaturesSpec), one named field per constant
//     with the shader's default; specFields() maps each field to its constant_id by name, so a
//     constant can only be set by name, never by position.
#pragma once

#include <polysketch/polysketch.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace psk::kernel {

using uint = std::uint32_t;

#include "interface/attention_tiled.h"
#include "interface/attention_tiled_coopmat.h"
#include "interface/block_scan.h"
#include "interface/block_states.h"
#include "interface/block_states_coopmat.h"
#include "interface/copy_rows.h"
#include "interface/coopmat_strict_check.h"
#include "interface/decode_fold.h"
#include "interface/decode_output.h"
#include "interface/decode_softmax.h"
#include "interface/polysketch_output.h"
#include "interface/polysketch_output_coopmat.h"
#include "interface/self_tensor.h"
#include "interface/sketch_features.h"
#include "interface/sketch_features_coopmat.h"

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
PSK_SPEC_STRUCT(SketchFeaturesSpec, PSK_SKETCH_FEATURES_SPEC)
PSK_SPEC_STRUCT(SketchFeaturesTeamSpec, PSK_SKETCH_FEATURES_TEAM_SPEC)
PSK_SPEC_STRUCT(SketchFeaturesCoopMatSpec, PSK_SKETCH_FEATURES_COOPMAT_SPEC)
PSK_SPEC_STRUCT(BlockStatesSpec, PSK_BLOCK_STATES_SPEC)
PSK_SPEC_STRUCT(BlockStatesTeamSpec, PSK_BLOCK_STATES_TEAM_SPEC)
PSK_SPEC_STRUCT(BlockStatesCoopMatSpec, PSK_BLOCK_STATES_COOPMAT_SPEC)
PSK_SPEC_STRUCT(BlockScanSpec, PSK_BLOCK_SCAN_SPEC)
PSK_SPEC_STRUCT(BlockReduceSpec, PSK_BLOCK_REDUCE_SPEC)
PSK_SPEC_STRUCT(PolysketchOutputSpec, PSK_POLYSKETCH_OUTPUT_SPEC)
PSK_SPEC_STRUCT(PolysketchOutputTeamSpec, PSK_POLYSKETCH_OUTPUT_TEAM_SPEC)
PSK_SPEC_STRUCT(PolysketchOutputCoopMatSpec, PSK_POLYSKETCH_OUTPUT_COOPMAT_SPEC)
PSK_SPEC_STRUCT(DecodeFoldSpec, PSK_DECODE_FOLD_SPEC)
PSK_SPEC_STRUCT(DecodeOutputSpec, PSK_DECODE_OUTPUT_SPEC)
PSK_SPEC_STRUCT(DecodeSoftmaxSpec, PSK_DECODE_SOFTMAX_SPEC)
PSK_SPEC_STRUCT(CopyRowsSpec, PSK_COPY_ROWS_SPEC)
PSK_SPEC_STRUCT(CoopMatStrictCheckSpec, PSK_COOPMAT_STRICT_CHECK_SPEC)

#undef PSK_SPEC_STRUCT
#undef PSK_SPEC_ENTRY
#undef PSK_SPEC_FIELD

/** self_tensor.comp has no specialization constants. */
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
        const std::vector<SpecField>& fields = specFields(static_cast<const Spec*>(nullptr));
        SpecConstants c;
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
                  sizeof(BlockColumnsPush) <= 128 &&
                  sizeof(PolysketchOutputPush) <= 128 && sizeof(SelfTensorPush) <= 128 && sizeof(DecodeFoldPush) <= 128 &&
                  sizeof(DecodeOutputPush) <= 128 && sizeof(DecodeSoftmaxPush) <= 128 && sizeof(CopyRowsPush) <= 128,
              "a push-constant block exceeds the 128 bytes of the pipeline layout");

/** Strides as the kernels take them (makeForwardGeometry guarantees every used offset fits 32 bits). */
inline TensorStrides pushStrides(const PskTensorStrides& s) {
    return {static_cast<uint32_t>(s.batch), static_cast<uint32_t>(s.head), static_cast<uint32_t>(s.token)};
}

}  // namespace psk::kernel
