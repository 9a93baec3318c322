#include "vk/emulated_products.hpp"

#include <cstdlib>
#include <cstring>

#include "util/error.hpp"

namespace psk {

EmulatedProducts emulatedProductsFromEnvironment() {
    const char* value = std::getenv("PSK_COOPMAT_EMULATED_PRODUCTS");
    if (!value || !value[0] || std::strcmp(value, "ieee") == 0) return EmulatedProducts::Ieee;
    if (std::strcmp(value, "tensor-core") == 0) return EmulatedProducts::TensorCore;
    fail(PSK_ERROR_INVALID_ARGUMENT, "PSK_COOPMAT_EMULATED_PRODUCTS=", value, ": expected ieee or tensor-core");
}

const char* emulatedProductsName(EmulatedProducts products) {
    return products == EmulatedProducts::TensorCore ? "tensor-core" : "ieee";
}

bool isEmulatedVariant(const char* shaderName) { return shaderName && std::strstr(shaderName, ".emu_") != nullptr; }

}  // namespace psk
