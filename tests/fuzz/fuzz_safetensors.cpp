// libFuzzer harness: the safetensors reader (lib/io/safetensors.cpp, parseSafeTensors, which
// readSafeTensors calls on a file's bytes) and the sketch-file loaders that validate a parsed file
// (lib/sketch/sketch_files.cpp). Properties checked on every input:
//   - parsing either succeeds or throws psk::Error with PSK_ERROR_BAD_FILE (nothing else escapes);
//   - what was parsed serializes, and parses back to the same table (shapes, bit-identical data,
//     metadata);
//   - each loader accepts a parsed file or rejects it with PSK_ERROR_BAD_FILE.
// Crashes, sanitizer reports, other exceptions and broken properties are findings (docs/RELIABILITY.md).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "io/safetensors.hpp"
#include "sketch/sketch_files.hpp"
#include "util/error.hpp"

namespace {

[[noreturn]] void broken(const char* what, const char* detail = "") {
    std::fprintf(stderr, "fuzz_safetensors: property broken: %s %s\n", what, detail);
    std::abort();
}

/** Runs `f`; a psk::Error other than BAD_FILE breaks the property (any other exception escapes: a crash). */
void badFileOrSuccess(const char* what, const std::function<void()>& f) {
    try {
        f();
    } catch (const psk::Error& e) {
        if (e.code() != PSK_ERROR_BAD_FILE) broken(what, e.what());
    }
}

bool sameTable(const psk::SafeTensors& a, const psk::SafeTensors& b) {
    if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
    for (auto ia = a.tensors.begin(), ib = b.tensors.begin(); ia != a.tensors.end(); ++ia, ++ib) {
        if (ia->first != ib->first || ia->second.shape != ib->second.shape) return false;
        const std::vector<float>& x = ia->second.data;
        const std::vector<float>& y = ib->second.data;
        if (x.size() != y.size() || (!x.empty() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0)) return false;
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    psk::SafeTensors file;
    try {
        file = psk::parseSafeTensors(data, size);
    } catch (const psk::Error& e) {
        if (e.code() != PSK_ERROR_BAD_FILE) broken("parseSafeTensors threw a code other than BAD_FILE:", e.what());
        return 0;
    }
    for (const auto& [name, tensor] : file.tensors) {
        uint64_t count = 1;
        for (uint32_t d : tensor.shape) count *= d;
        if (count != tensor.data.size()) broken("a tensor's data does not match its shape:", name.c_str());
    }

    std::vector<uint8_t> bytes;
    try {
        bytes = psk::serializeSafeTensors(file);
    } catch (const psk::Error& e) {
        broken("a parsed file does not serialize:", e.what());
    }
    psk::SafeTensors again;
    try {
        again = psk::parseSafeTensors(bytes.data(), bytes.size());
    } catch (const psk::Error& e) {
        broken("a serialized file does not parse:", e.what());
    }
    if (!sameTable(file, again)) broken("serialize then parse changed the table");

    // The seeds (psk_fuzz_seeds) are sketch files for h = 16; r comes from the file.
    constexpr uint32_t h = 16;
    badFileOrSuccess("loadRandomSketch", [&] { psk::loadRandomSketch(file, h, 0); });
    badFileOrSuccess("loadLearnedSketch", [&] { psk::loadLearnedSketch(file, h, 0); });
    badFileOrSuccess("loadQkNorm", [&] { psk::loadQkNorm(file, h); });
    return 0;
}
