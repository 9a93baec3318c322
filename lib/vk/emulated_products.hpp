// The arithmetic of the emulated cooperative-matrix backend's products, a diagnostic switch
// (PSK_COOPMAT_EMULATED_PRODUCTS): "ieee" (the default) adds each term as a float32 multiply-add
// rounded to nearest; "tensor-core" adds a product's K terms and the accumulator as the
// published characterizations of NVIDIA's tensor cores describe their block fused multiply-add
// (Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS
// 2021; Khattak and Mikaitis, "Accurate models of NVIDIA tensor cores", arXiv:2512.07004): the
// products exact, aligned to the largest exponent among them and the accumulator, the bits below
// 2^(e_max - 24) truncated, the sum exact and then truncated to float32. The generations measured
// there differ in how many terms one block takes and in how many bits below float32's precision
// survive the alignment; the model keeps none and takes a whole 16-term product as one block, the
// coarsest of those rules, so that a kernel whose error budget survives it should survive the
// hardware's accumulation. What it answers on lavapipe: whether a
// kernel's error on a GPU can come from the matrix units' accumulation rather than from its
// operands (docs/RELIABILITY.md). "+folded" after either (ieee+folded, tensor-core+folded) also
// folds the operands' float32 -> 16-bit -> float32 round trip in the kernels' own arithmetic, as a
// driver may (coopmat.glsl, CM_SPLIT_HIGH): a kernel whose hi + lo split depends on that round trip
// then loses its low parts on lavapipe as it did on NVIDIA. Read once, when a context is created.
#pragma once

#include <cstdint>

#include "interface/emulated_products.h"

namespace psk {

enum class EmulatedProducts : uint32_t {
    Ieee = PSK_EMULATED_PRODUCTS_IEEE,
    TensorCore = PSK_EMULATED_PRODUCTS_TENSOR_CORE,
    IeeeFolded = PSK_EMULATED_PRODUCTS_IEEE | PSK_EMULATED_FOLDED_CONVERSIONS,
    TensorCoreFolded = PSK_EMULATED_PRODUCTS_TENSOR_CORE | PSK_EMULATED_FOLDED_CONVERSIONS,
};

/**
 * PSK_COOPMAT_EMULATED_PRODUCTS: unset, "" or "ieee" Ieee, "tensor-core" TensorCore, "ieee+folded"
 * IeeeFolded, "tensor-core+folded" TensorCoreFolded; any other value throws
 * PSK_ERROR_INVALID_ARGUMENT naming the variable and the values it takes.
 */
EmulatedProducts emulatedProductsFromEnvironment();

/** The environment's spelling: "ieee", "tensor-core", "ieee+folded" or "tensor-core+folded". */
const char* emulatedProductsName(EmulatedProducts products);

/** True for a variant of the emulated backend ("<source>.emu_<operand>..."): the pipelines that take the constant. */
bool isEmulatedVariant(const char* shaderName);

}  // namespace psk
