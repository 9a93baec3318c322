// SPIR-V built into the library (see cmake/Shaders.cmake, which generates the table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace psk {

struct ShaderCode {
    const char* name;  // "<source>.<variant>.<storage type>", e.g. "attention_tiled.softmax.f16"
    const uint32_t* code;
    size_t bytes;
};

extern const ShaderCode kShaderRegistry[];
extern const size_t kShaderRegistrySize;

/** The variant named `name`, or null when this build does not contain it. */
const ShaderCode* findShader(std::string_view name);

}  // namespace psk
