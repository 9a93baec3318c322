// Host-side conversion between float and the library's storage types, for the tests and tools
// that prepare inputs and read outputs, with the library's one conversion (lib/util/float16.hpp).
#pragma once

#include <polysketch/polysketch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "util/float16.hpp"

namespace psk::storage {

using psk::bf16ToFloat;
using psk::floatToBf16;
using psk::floatToHalf;
using psk::halfToFloat;

inline size_t elementBytes(PskDataType type) { return type == PSK_DATA_TYPE_FLOAT32 ? 4 : 2; }

/** Encodes floats into `type` (raw bytes, ready for pskAttentionForwardHost). */
inline std::vector<uint8_t> encode(const std::vector<float>& values, PskDataType type) {
    std::vector<uint8_t> bytes(values.size() * elementBytes(type));
    for (size_t i = 0; i < values.size(); ++i) {
        if (type == PSK_DATA_TYPE_FLOAT32) {
            std::memcpy(bytes.data() + 4 * i, &values[i], 4);
        } else {
            const uint16_t h = type == PSK_DATA_TYPE_FLOAT16 ? floatToHalf(values[i]) : floatToBf16(values[i]);
            std::memcpy(bytes.data() + 2 * i, &h, 2);
        }
    }
    return bytes;
}

/** Decodes raw bytes of `type` into floats. */
inline std::vector<float> decode(const std::vector<uint8_t>& bytes, PskDataType type) {
    const size_t eb = elementBytes(type);
    std::vector<float> values(bytes.size() / eb);
    for (size_t i = 0; i < values.size(); ++i) {
        if (type == PSK_DATA_TYPE_FLOAT32) {
            std::memcpy(&values[i], bytes.data() + 4 * i, 4);
        } else {
            uint16_t h;
            std::memcpy(&h, bytes.data() + 2 * i, 2);
            values[i] = type == PSK_DATA_TYPE_FLOAT16 ? halfToFloat(h) : bf16ToFloat(h);
        }
    }
    return values;
}

/** Rounds every value through `type` and back: what the device will actually see. */
inline std::vector<float> quantize(const std::vector<float>& values, PskDataType type) {
    return decode(encode(values, type), type);
}

}  // namespace psk::storage
