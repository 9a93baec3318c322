// A small, strict reader and writer of NumPy .npy files (format versions 1.0, 2.0 and 3.0), for the
// tensors the psk tool reads and writes (docs/MATH.md section 8): little-endian float32 ('<f4') and float16
// ('<f2'), C order only.
//
// Everything else is rejected with a one-line message that names the problem: a bad magic string,
// an unknown version, a malformed header dictionary, big-endian or other dtypes, Fortran order,
// data shorter or longer than the shape says. Messages do not include the file name; callers add it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/float16.hpp"

namespace psk::npy {

/** Thrown by every function here on a malformed file or a failed read or write. */
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class DType { Float32, Float16 };

/** IEEE binary16 <-> binary32: the library's one conversion (lib/util/float16.hpp). */
using psk::floatToHalf;
using psk::halfToFloat;

/** "<f4" or "<f2". */
const char* descr(DType);
inline size_t itemSize(DType t) { return t == DType::Float32 ? 4 : 2; }

struct Array {
    std::vector<uint64_t> shape;  // empty for a 0-d (scalar) array
    DType dtype = DType::Float32;
    std::vector<uint8_t> data;    // little-endian elements in C order

    uint64_t count() const;       // product of the shape (1 for a scalar)
    /** The elements as float (float16 widened exactly). */
    std::vector<float> toFloat() const;
    /** "(2, 3, 4)" */
    std::string shapeString() const;
};

/** Parses a whole .npy file held in memory. Throws Error. */
Array parse(const uint8_t* bytes, size_t size);
/** Reads and parses a file. Throws Error ("cannot open: ...", or a parse message). */
Array read(const std::string& path);

/**
 * The bytes of a .npy file (version 1.0; 2.0 when the header does not fit 65535 bytes) holding
 * `data`, which must have exactly count(shape) * itemSize(dtype) bytes. The header is padded so
 * that the data starts at a multiple of 64 bytes, as NumPy does.
 */
std::vector<uint8_t> serialize(const std::vector<uint64_t>& shape, DType dtype, const void* data, size_t dataBytes);
/** Writes a float32 array (converted to `dtype`, float16 rounded to nearest even). Throws Error. */
void write(const std::string& path, const std::vector<uint64_t>& shape, const std::vector<float>& values,
           DType dtype = DType::Float32);
/** Writes raw bytes to `path` in full, or throws Error. */
void writeFile(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace psk::npy
