// The one host-side conversion between float32 and the 16-bit storage types (IEEE binary16 and
// bfloat16), header-only so that the library, the float64 reference's helpers and the psk tool
// share it. Both directions round to nearest, ties to even, as the shaders' stores do; overflow
// gives infinity and NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace psk {

inline float halfToFloat(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (mant << 13);  // infinity or NaN (payload kept)
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {  // subnormal half: normalize
        int e = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            --e;
        }
        bits = sign | (uint32_t(e) << 23) | ((mant & 0x3FFu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t floatToHalf(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    x &= 0x7FFFFFFFu;
    if (x >= 0x7F800000u) return sign | (x > 0x7F800000u ? 0x7E00u : 0x7C00u);
    if (x >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to infinity
    if (x < 0x38800000u) {                         // below 2^-14: subnormal or zero
        if (x <= 0x33000000u) return sign;          // <= 2^-25 rounds to zero (the tie goes to even 0)
        const uint32_t e = x >> 23, m = (x & 0x7FFFFFu) | 0x800000u;
        const uint32_t s = 126 - e;  // 14..24
        uint32_t k = m >> s;
        const uint32_t rem = m & ((1u << s) - 1), half = 1u << (s - 1);
        if (rem > half || (rem == half && (k & 1))) ++k;
        return static_cast<uint16_t>(sign | k);
    }
    uint32_t h = (((x >> 23) - 112) << 10) | ((x & 0x7FFFFFu) >> 13);
    const uint32_t rem = x & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
}

/** bfloat16 is the high half of a float32, rounded to nearest even (as the shaders' STORE_ELEM). */
inline uint16_t floatToBf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays NaN
    u += 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

inline float bf16ToFloat(uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

}  // namespace psk
