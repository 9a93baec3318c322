// XXH64, seed 0, written from the xxHash specification (doc/xxhash_spec.md of
// github.com/Cyan4973/xxHash); test vectors in decode_test.
#include "util/xxh64.hpp"

namespace psk {
namespace {

uint32_t get32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }
uint64_t get64(const uint8_t* p) { return uint64_t(get32(p)) | uint64_t(get32(p + 4)) << 32; }

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull, kPrime2 = 0xC2B2AE3D27D4EB4Full, kPrime3 = 0x165667B19E3779F9ull,
                   kPrime4 = 0x85EBCA77C2B2AE63ull, kPrime5 = 0x27D4EB2F165667C5ull;
uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t xxRound(uint64_t acc, uint64_t lane) { return rotl(acc + lane * kPrime2, 31) * kPrime1; }
uint64_t xxMerge(uint64_t acc, uint64_t v) { return (acc ^ xxRound(0, v)) * kPrime1 + kPrime4; }

}  // namespace

uint64_t xxh64(const uint8_t* p, size_t size) {
    const uint8_t* const end = p + size;
    uint64_t h;
    if (size >= 32) {
        uint64_t v1 = kPrime1 + kPrime2, v2 = kPrime2, v3 = 0, v4 = 0 - kPrime1;
        for (; end - p >= 32; p += 32) {
            v1 = xxRound(v1, get64(p));
            v2 = xxRound(v2, get64(p + 8));
            v3 = xxRound(v3, get64(p + 16));
            v4 = xxRound(v4, get64(p + 24));
        }
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
        h = xxMerge(xxMerge(xxMerge(xxMerge(h, v1), v2), v3), v4);
    } else {
        h = kPrime5;
    }
    h += uint64_t(size);
    for (; end - p >= 8; p += 8) h = rotl(h ^ xxRound(0, get64(p)), 27) * kPrime1 + kPrime4;
    if (end - p >= 4) {
        h = rotl(h ^ uint64_t(get32(p)) * kPrime1, 23) * kPrime2 + kPrime3;
        p += 4;
    }
    for (; p < end; ++p) h = rotl(h ^ *p * kPrime5, 11) * kPrime1;
    h ^= h >> 33;
    h *= kPrime2;
    h ^= h >> 29;
    h *= kPrime3;
    h ^= h >> 32;
    return h;
}

}  // namespace psk
