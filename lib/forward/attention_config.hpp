// The validated, defaulted form of PskAttentionCreateInfo and the per-call tensor geometry.
// Everything here is plain data and pure functions so that it can be unit tested without a GPU.
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "util/storage_type.hpp"
#include "vk/device_caps.hpp"

namespace psk {

/**
 * The integer a C caller stored in an enum-typed field (PskAttentionCreateInfo::kind, dataType,
 * layout, sketchSource) or parameter, read from its bytes. A C enum may hold any int; a C++ enum
 * value outside the enum's range is undefined behaviour, and clang -O2 -fstrict-enums drops range
 * checks made on one. Check the integer, then convert.
 */
template <typename E>
int32_t enumValue(const E& field) {
    static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int32_t), "the C API's enums are 32-bit");
    int32_t value;
    std::memcpy(&value, &field, sizeof value);
    return value;
}

struct AttentionConfig {
    PskAttentionKind kind = PSK_ATTENTION_KIND_NONE;
    bool causal = false;
    bool localExact = false;
    bool referenceScaling = false;
    uint32_t degree = 4;
    float scale = 1.0f;
    uint32_t numQueryHeads = 1;
    uint32_t numKeyValueHeads = 1;
    uint32_t headDim = 0;
    uint32_t valueDim = 0;
    PskDataType dataType = PSK_DATA_TYPE_FLOAT32;
    PskLayout layout = PSK_LAYOUT_BHND;
    uint32_t sketchSize = 32;
    uint32_t blockSize = 256;
    // Not from the C API: the forward stages that may take cooperative kernels (CoopStageBit,
    // forward/coopmat_switches.hpp). The self-test clears the bit of a stage whose cooperative
    // kernel disagreed with the generic one on this device; its own probes set exactly one.
    uint32_t coopStages = 15u;
    bool selfTestProbe = false;  // an attention the self-test runs: no self-test of its own
    // A self-test probe of one of the two block-state kernels (per block, walking): whether its calls
    // walk whatever the plan's rule says (PolysketchPlan::statesWalkKernel).
    enum class ProbeWalk : uint8_t { Plan, Force, Forbid };
    ProbeWalk probeWalk = ProbeWalk::Plan;
};

/** Applies defaults and checks every field; throws psk::Error naming the first bad one. */
AttentionConfig makeAttentionConfig(const PskAttentionCreateInfo& info, const DeviceCaps& caps);

struct PackedSketch;
/**
 * The attention as it will run, resolved once before any forward object exists: the checked and
 * defaulted config completed by what a sketch file says (its sketch size, its scaling), and for
 * POLYSKETCH the packed sketch (generated from the seed or loaded, with the q/k LayerNorm folded
 * in). Forward kinds and planners read it and never change it.
 */
struct ResolvedAttention {
    AttentionConfig config;
    std::shared_ptr<const PackedSketch> sketch;  // POLYSKETCH only
};
/** makeAttentionConfig, then the sketch; throws psk::Error (a bad file: BAD_FILE, a mismatch: INVALID_ARGUMENT). */
ResolvedAttention resolveAttention(const PskAttentionCreateInfo& info, const DeviceCaps& caps);


/** One tensor of a call: [batch, heads, tokens, dim] with element strides. */
struct TensorGeometry {
    uint32_t batch = 0, heads = 0, tokens = 0, dim = 0;
    PskTensorStrides strides{};
    /** Elements spanned from the first to one past the last element. */
    uint64_t extentElements() const;
    /** True when no two (b, h, t, d) share an element: required of outputs. */
    bool nonOverlapping() const;
};

PskTensorStrides defaultStrides(PskLayout layout, uint32_t heads, uint32_t tokens, uint32_t dim);

/** The four tensors of a forward call, validated against the config. */
struct ForwardGeometry {
    uint32_t batch = 1, tokens = 0;
    TensorGeometry q, k, v, out;
};

/**
 * Builds and checks the geometry of a call: sizes, strides, overlap of the output, 32-bit
 * indexing and the device's storage-buffer range. Throws psk::Error.
 */
ForwardGeometry makeForwardGeometry(const AttentionConfig& config, const DeviceCaps& caps, uint32_t batch,
                                    uint32_t tokens, const PskTensorStrides* qStrides, const PskTensorStrides* kStrides,
                                    const PskTensorStrides* vStrides, const PskTensorStrides* outStrides);

}  // namespace psk
