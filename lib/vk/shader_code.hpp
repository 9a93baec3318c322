// One SPIR-V module as the library embeds it: what the pipeline cache (vk/pipelines.hpp) compiles.
// The registry of every built variant is kernels/shader_registry.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace psk {

struct ShaderCode {
    const char* name;  // "<source>.<variant>.<storage type>", e.g. "attention_tiled.softmax.f16"
    const uint32_t* code;
    size_t bytes;
};

}  // namespace psk
