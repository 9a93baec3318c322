// libFuzzer harness: the psk tool's .npy reader (tools/psk/npy.cpp, npy::parse, which npy::read
// calls on a file's bytes). Properties checked on every input:
//   - parsing either succeeds or throws npy::Error (nothing else escapes);
//   - a parsed array holds count(shape) * itemSize(dtype) bytes, and toFloat() count(shape) values;
//   - serialize(shape, dtype, data) parses back to the same array.
// Crashes, sanitizer reports, other exceptions and broken properties are findings (docs/RELIABILITY.md).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "npy.hpp"

namespace {
[[noreturn]] void broken(const char* what, const char* detail = "") {
    std::fprintf(stderr, "fuzz_npy: property broken: %s %s\n", what, detail);
    std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    namespace npy = psk::npy;
    npy::Array a;
    try {
        a = npy::parse(data, size);
    } catch (const npy::Error&) {
        return 0;
    }
    if (a.count() * npy::itemSize(a.dtype) != a.data.size()) broken("data bytes do not match the shape");
    if (a.toFloat().size() != a.count()) broken("toFloat() does not give count() values");
    (void)a.shapeString();

    std::vector<uint8_t> bytes;
    try {
        bytes = npy::serialize(a.shape, a.dtype, a.data.data(), a.data.size());
    } catch (const npy::Error& e) {
        broken("a parsed array does not serialize:", e.what());
    }
    npy::Array b;
    try {
        b = npy::parse(bytes.data(), bytes.size());
    } catch (const npy::Error& e) {
        broken("a serialized array does not parse:", e.what());
    }
    if (b.shape != a.shape || b.dtype != a.dtype || b.data != a.data) broken("serialize then parse changed the array");
    return 0;
}
