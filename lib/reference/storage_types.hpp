// Host-side conversion between float and the library's storage types, for the tests and tools
// that prepare inputs and read outputs. float16 uses glm's IEEE half packing; bfloat16 is the high
// half of a float32, rounded to nearest even (as the shaders' STORE_ELEM does).
#pragma once

#include <polysketch/polysketch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <glm/gtc/packing.hpp>

namespace psk::storage {

inline uint16_t floatToBf16(float x) {
    if (std::isnan(x)) return 0x7FC0;
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

inline float bf16ToFloat(uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

inline uint16_t floatToHalf(float x) { return glm::packHalf1x16(x); }
inline float halfToFloat(uint16_t h) { return glm::unpackHalf1x16(h); }

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
