// SPIR-V built into the library (see cmake/Shaders.cmake, which generates the table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vk/shader_code.hpp"

namespace psk {

extern const ShaderCode kShaderRegistry[];
extern const size_t kShaderRegistrySize;

/** The variant named `name`, or null when this build does not contain it. */
const ShaderCode* findShader(std::string_view name);

}  // namespace psk
