// How a conformance case lays a dense [B][H][n][dim] tensor out for the device: BHND or BNHD,
// optionally with a gap of `tokenPad` elements after every row (custom strides), and back. Shared
// by the tests (tests/support/device_layout.hpp) and psk conformance.
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <vector>

namespace psk::conformance {

struct DeviceLayout {
    uint32_t B = 1, n = 1;
    PskLayout layout = PSK_LAYOUT_BHND;
    uint32_t tokenPad = 0;  // BHND only: extra elements between rows

    PskTensorStrides strides(uint32_t heads, uint32_t dim) const {
        const uint64_t row = dim + tokenPad;
        if (layout == PSK_LAYOUT_BNHD) return {uint64_t(n) * heads * dim, dim, uint64_t(heads) * dim};
        return {uint64_t(heads) * n * row, uint64_t(n) * row, row};
    }
    static uint64_t offset(const PskTensorStrides& s, uint32_t b, uint32_t h, uint32_t t) {
        return b * s.batch + h * s.head + t * s.token;
    }
    /** Scatters a dense BHND tensor into the device layout; gaps get `gap`. */
    std::vector<float> toDevice(const std::vector<float>& dense, uint32_t heads, uint32_t dim, float gap) const {
        const PskTensorStrides s = strides(heads, dim);
        const uint64_t extent = (B - 1) * s.batch + (heads - 1) * s.head + (n - 1) * s.token + dim;
        std::vector<float> out(extent, gap);
        for (uint32_t b = 0; b < B; ++b)
            for (uint32_t h = 0; h < heads; ++h)
                for (uint32_t t = 0; t < n; ++t)
                    for (uint32_t d = 0; d < dim; ++d)
                        out[offset(s, b, h, t) + d] = dense[((uint64_t(b) * heads + h) * n + t) * dim + d];
        return out;
    }
    /** Gathers the device layout back into a dense BHND tensor. */
    std::vector<float> fromDevice(const std::vector<float>& dev, uint32_t heads, uint32_t dim) const {
        const PskTensorStrides s = strides(heads, dim);
        std::vector<float> dense(size_t(B) * heads * n * dim);
        for (uint32_t b = 0; b < B; ++b)
            for (uint32_t h = 0; h < heads; ++h)
                for (uint32_t t = 0; t < n; ++t)
                    for (uint32_t d = 0; d < dim; ++d)
                        dense[((uint64_t(b) * heads + h) * n + t) * dim + d] = dev[offset(s, b, h, t) + d];
        return dense;
    }
};

}  // namespace psk::conformance
