// A whole file read into memory with a bound on its size, for the small files the library reads
// whole (tuning tables, replacement SPIR-V modules): a path that names a huge file fails with a
// message instead of taking the memory.
#pragma once

#include <cstddef>
#include <string>

namespace psk {

/**
 * The bytes of the file at `path`. Throws PSK_ERROR_BAD_FILE, each message starting with `what`:
 * "<what>: cannot be opened", "<what>: more than <maxBytes> bytes, more than it may have",
 * "<what>: read error".
 */
std::string readBoundedFile(const std::string& path, size_t maxBytes, const std::string& what);

}  // namespace psk
