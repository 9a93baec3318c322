// XXH64 with seed 0: the checksum of decode-state blobs (docs/DECODING.md). Its own unit so that
// components outside the library (the MPI sequence-parallel library) seal blobs the same way.
#pragma once

#include <cstddef>
#include <cstdint>

namespace psk {

/** XXH64 (seed 0) of `size` bytes, as the xxHash project publishes it. */
uint64_t xxh64(const uint8_t* data, size_t size);

}  // namespace psk
