// A kernel choice's pipeline: the variant's SPIR-V from the registry, its named specialization
// constants and its required subgroup size, given to the context's pipeline cache (vk/pipelines.hpp,
// which knows SPIR-V and constants, not the kernel table).
#pragma once

#include <string>

#include "kernels/kernel_dispatch.hpp"
#include "kernels/kernel_table.hpp"
#include "kernels/shader_registry.hpp"
#include "util/error.hpp"
#include "vk/pipelines.hpp"

namespace psk {

/** Throws UNSUPPORTED when the variant is not built into this library (or the device cannot run it). */
inline KernelPipeline kernelPipeline(Pipelines& pipelines, const KernelChoice& choice) {
    const ShaderCode* code = findShader(choice.variant);
    if (!code) fail(PSK_ERROR_UNSUPPORTED, "shader variant ", choice.variant, " is not built into this library");
    return {pipelines.get(*code, choice.constants.values, choice.requiredSubgroupSize), choice.kernel};
}

/**
 * The compiler's statistics of the choice's pipeline (Pipelines::statistics): empty when not
 * captured or when the pipeline was not created (a lookup: it compiles nothing).
 */
inline std::string kernelStatistics(const Pipelines& pipelines, const KernelChoice& choice) {
    const ShaderCode* code = findShader(choice.variant);
    return code ? pipelines.statistics(*code, choice.constants.values, choice.requiredSubgroupSize) : std::string();
}

}  // namespace psk
