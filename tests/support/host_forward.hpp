// One pskAttentionForwardHost call from dense BHND float tensors: lays them out for the device
// (DeviceLayout), encodes them in the storage type, runs, and returns the output dense again.
// The output array starts as NaN and any gaps between rows as `gap`, so that rows the kernel
// forgot and writes into gaps are both caught.
#pragma once

#include <polysketch/polysketch.h>

#include <vector>

#include "support/device_layout.hpp"

namespace psk::test {

struct HostForward {
    DeviceLayout layout;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    uint32_t Hq = 1, Hkv = 1, h = 1, dv = 1;
    bool explicitStrides = false;  // pass the strides (needed for tokenPad) instead of the defaults
    float gap = 7.0f;

    /** Runs; returns the dense output, or an empty vector after reporting a failure. When `rawOut`
     *  is not null it receives the whole device-layout output (decoded), gaps included. */
    std::vector<float> run(PskAttention attention, const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& v, PskForwardStats* stats = nullptr,
                           std::vector<float>* rawOut = nullptr) const;
};

}  // namespace psk::test
