#include "vk/emulated_products.hpp"

#include <cstdlib>
#include <cstring>

#include "util/error.hpp"

namespace psk {

EmulatedProducts emulatedProductsFromEnvironment() {
    const char* value = std::getenv("PSK_COOPMAT_EMULATED_PRODUCTS");
    if (!value || !value[0] || std::strcmp(value, "ieee") == 0) return EmulatedProducts::Ieee;
    if (std::strcmp(value, "tensor-core") == 0) return EmulatedProducts::TensorCore;
    if (std::strcmp(value, "ieee+folded") == 0) return EmulatedProducts::IeeeFolded;
    if (std::strcmp(value, "tensor-core+folded") == 0) return EmulatedProducts::TensorCoreFolded;
    fail(PSK_ERROR_INVALID_ARGUMENT, "PSK_COOPMAT_EMULATED_PRODUCTS=", value,
         ": expected ieee, tensor-core, ieee+folded or tensor-core+folded");
}

const char* emulatedProductsName(EmulatedProducts products) {
    switch (products) {
        case EmulatedProducts::TensorCore: return "tensor-core";
        case EmulatedProducts::IeeeFolded: return "ieee+folded";
        case EmulatedProducts::TensorCoreFolded: return "tensor-core+folded";
        default: return "ieee";
    }
}

bool isEmulatedVariant(const char* shaderName) { return shaderName && std::strstr(shaderName, ".emu_") != nullptr; }

}  // namespace psk
