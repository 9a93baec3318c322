// A minimal safetensors reader/writer (docs/MATH.md section 8): the tensor table (name -> shape and
// float data, plus the string metadata), parsed from or serialized to the file format. The header
// is read with the strict JSON parser of io/json.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace psk {

struct Tensor {
    std::vector<uint32_t> shape;  // empty: a scalar
    std::vector<float> data;      // row-major, product(shape) entries
};

struct SafeTensors {
    std::map<std::string, Tensor> tensors;
    std::map<std::string, std::string> metadata;  // "__metadata__"
};

/**
 * Parses a safetensors image: 8-byte little-endian header length N (at most 100 MB, the reference
 * implementation's limit), N bytes of JSON, then the data buffer. dtypes F32, F16 and BF16 are
 * converted to float. Every defect (truncation, bad JSON, unknown dtype, offsets outside the
 * buffer, byte length not matching the shape, two tensors sharing a byte, ...) throws psk::Error
 * with PSK_ERROR_BAD_FILE and a message naming it. Gaps between tensors and unused bytes after the
 * last one are accepted (docs/MATH.md section 8).
 */
SafeTensors parseSafeTensors(const uint8_t* bytes, size_t size);

/**
 * Reads and parses a regular file, with the checks of parseSafeTensors. It reads the length field,
 * then the header, then each tensor's bytes where the header places them: memory is the header and
 * the tensors, never the whole file. With a non-empty `prefix` only the tensors whose names start
 * with it are read, and they are returned without it (the whole header is still validated; the
 * metadata is returned whole). Errors (a missing file, a directory or other non-regular file, a
 * failed read) are PSK_ERROR_BAD_FILE.
 */
SafeTensors readSafeTensors(const std::string& path, const std::string& prefix = {});

/**
 * Serializes as F32, tensors in name order and contiguous, the header padded with spaces to a
 * multiple of 8 bytes. Throws PSK_ERROR_INVALID_ARGUMENT when a tensor's data does not match its
 * shape.
 */
std::vector<uint8_t> serializeSafeTensors(const SafeTensors& file);

/** Writes serializeSafeTensors(file); an I/O failure is PSK_ERROR_BAD_FILE. */
void writeSafeTensors(const std::string& path, const SafeTensors& file);

/** A shape as error messages print it: "[2, 3]". */
std::string shapeString(const std::vector<uint32_t>& shape);

}  // namespace psk
