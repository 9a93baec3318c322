// How the emulated cooperative-matrix backend (coopmat.glsl) adds the terms of a product (and
// whether it folds the operands' conversions): one
// specialization constant that every emulated kernel has, at an id past every kernel's own list,
// which the host sets on the emulated pipelines only (vk/pipelines.cpp, vk/emulated_products.hpp).
#ifndef PSK_INTERFACE_EMULATED_PRODUCTS_H
#define PSK_INTERFACE_EMULATED_PRODUCTS_H

#define PSK_EMULATED_PRODUCTS_ID 100
// Each term a float32 multiply-add of its own, rounded to nearest (the emulation's default).
#define PSK_EMULATED_PRODUCTS_IEEE 0u
// The block fused multiply-add NVIDIA's tensor cores were measured to compute: the K exact
// products and the accumulator aligned to the largest exponent, every term truncated below
// 2^(e_max - 24), summed exactly, the sum truncated to float32.
#define PSK_EMULATED_PRODUCTS_TENSOR_CORE 1u
// A flag beside either: the operands' float32 -> 16-bit -> float32 round trip folded away in the
// kernel's own arithmetic (float(CM_TO_OPERAND(v)) is v), the rounding done where the fragments
// are loaded, as a driver may compile it (coopmat.glsl, CM_SPLIT_HIGH).
#define PSK_EMULATED_FOLDED_CONVERSIONS 2u

#endif
