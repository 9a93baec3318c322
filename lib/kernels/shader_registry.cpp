#include "kernels/shader_registry.hpp"

namespace psk {

const ShaderCode* findShader(std::string_view name) {
    for (size_t i = 0; i < kShaderRegistrySize; ++i)
        if (name == kShaderRegistry[i].name) return &kShaderRegistry[i];
    return nullptr;
}

}  // namespace psk
