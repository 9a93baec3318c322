// Small integer helpers every part of the library uses: rounding, powers of two, row alignment.
// (The kernels' push-constant form of strides is kernel::pushStrides, kernels/kernel_interface.hpp.)
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>

namespace psk {

/** ceil(a / b) as uint32_t (callers check that the result fits). */
inline uint32_t ceilDiv(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

/** x rounded up to a multiple of a. */
inline uint64_t alignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/** The largest power of two <= x (1 for x = 0). */
inline uint32_t floorPow2(uint32_t x) {
    uint32_t p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

/** Rows of a tensor with these strides start on a multiple of `floats` elements (vec4 or 8-float reads). */
inline bool alignedRows(const PskTensorStrides& s, uint32_t floats) { return (s.batch | s.head | s.token) % floats == 0; }

}  // namespace psk
