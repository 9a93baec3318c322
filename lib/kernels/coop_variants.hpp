// Typed names of the cooperative-matrix kernel variants. The backends and kernels are declared once
// (shaders/interface/coop_backends.h), which CMake builds from and this file reads: a plan asks for
// (kernel, backend, operand, sub-variant, storage type), never for a composed string, and a variant
// the declaration lists for a backend this build has is checked to exist when the library first
// looks one up (checkCoopVariantsComplete), so a missing one is a start-up error, not a null later.
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/kernel_table.hpp"

namespace psk {

struct ShaderCode;

enum class CoopBackend : uint8_t { NV, KHR, Emulated };
enum class CoopOperand : uint8_t { F16, BF16 };

/** One declared backend: "<axis>" is its name in variant names ("khr_f16"). */
struct CoopVariant {
    CoopBackend backend = CoopBackend::Emulated;
    CoopOperand operand = CoopOperand::F16;
    bool operator==(const CoopVariant& o) const { return backend == o.backend && operand == o.operand; }
};

/** The variant's axis ("nv_f16", "khr_bf16", "emu_f16", ...); throws INTERNAL for one not declared. */
std::string_view coopAxis(CoopVariant v);
/** True when `kernel` is a cooperative kernel of the declaration. */
bool isCoopKernel(KernelId kernel);
/** The declared sub-variants of a kernel ("random", "learned"; "softmax", "polynomial"), space-separated, or "". */
std::string_view coopSubVariants(KernelId kernel);
/** The kernel table's axis list of a cooperative kernel: every backend x sub-variant, '|'-separated. */
const std::string& coopAxisList(KernelId kernel);

/** The registry name, e.g. coopVariantName(SketchFeaturesCoopMat, {KHR, F16}, "random", F16) = "sketch_features_coopmat.khr_f16_random.f16". */
std::string coopVariantName(KernelId kernel, CoopVariant v, std::string_view sub, PskDataType type);
/** That variant's SPIR-V, or null when this build has not got the backend (optional backends). */
const ShaderCode* findCoopVariant(KernelId kernel, CoopVariant v, std::string_view sub, PskDataType type);
/** True when this build has any variant of the backend (the compiler could build it). */
bool coopBackendBuilt(CoopVariant v);

/** KernelChoice::make<Id> for a cooperative kernel: the variant named from its typed parts. */
template <KernelId Id>
KernelChoice coopKernelChoice(CoopVariant v, std::string_view sub, PskDataType type, const typename KernelInterface<Id>::Spec& spec,
                              std::string why) {
    KernelChoice c = KernelChoice::make<Id>("", type, spec, std::move(why));
    c.variant = coopVariantName(Id, v, sub, type);
    return c;
}

/**
 * Throws INTERNAL naming the first variant that the declaration lists for a backend this build has
 * (for the storage types it lists) but the registry lacks. Runs once (later calls return at once).
 */
void checkCoopVariantsComplete();

}  // namespace psk
