// libFuzzer harness: decode-state restore (pskRestoreDecodeState: lib/decode/decode_state.cpp and
// the blob header checks of lib/decode/decode_blob.cpp) through the public C API, on states made
// on the default device (decode_fixture.hpp: a polysketch and a softmax state). The blob's header
// checks need the attention they compare against, and the size checks the decoders' regions, so
// the harness restores into real states rather than calling the header parser alone; it does not
// depend on the blob's byte layout. Every input is restored into both states. Properties:
//   - restore returns PSK_SUCCESS or PSK_ERROR_BAD_FILE, nothing else;
//   - a failed restore leaves the state as it was (its positions);
//   - after a successful restore, the state's own blob restores to the same positions and serializes
//     to the same bytes again (the input itself may be an older format version the reader accepts).
// Crashes, sanitizer reports and broken properties are findings (docs/RELIABILITY.md).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "decode_fixture.hpp"

namespace {

psk::fuzz::DecodeFixture* fixture = nullptr;

[[noreturn]] void broken(const char* what, int state, PskResult r = PSK_SUCCESS) {
    std::fprintf(stderr, "fuzz_decode_restore: property broken (%s state): %s %s\n", psk::fuzz::DecodeFixture::kNames[state], what,
                 pskResultToString(r));
    std::abort();
}

std::vector<uint64_t> positions(PskDecodeState state) {
    std::vector<uint64_t> p(psk::fuzz::DecodeFixture::kBatch);
    for (uint32_t s = 0; s < p.size(); ++s) pskGetDecodePosition(state, s, &p[s]);
    return p;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fixture = new psk::fuzz::DecodeFixture;  // every input restores into its states
    const std::string error = fixture->create();
    if (!error.empty()) {
        std::fprintf(stderr, "fuzz_decode_restore: cannot create the decode states: %s\n", error.c_str());
        std::exit(1);
    }
    // Destroyed at exit, before LeakSanitizer's check (handlers run in reverse order of registration),
    // so the states, attentions and context are released through the API as an app would.
    std::atexit([] {
        delete fixture;
        fixture = nullptr;
    });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    for (int i = 0; i < psk::fuzz::DecodeFixture::kStates; ++i) {
        PskDecodeState state = fixture->states[i];
        const std::vector<uint64_t> before = positions(state);
        const PskResult r = pskRestoreDecodeState(state, data, size);
        if (r == PSK_ERROR_BAD_FILE) {
            if (positions(state) != before) broken("a failed restore changed the positions", i);
            continue;
        }
        if (r != PSK_SUCCESS) broken("restore returned", i, r);
        // The input may be an older format version the reader still accepts, so its bytes need not
        // be what this library writes; what it writes must round-trip exactly.
        const std::vector<uint64_t> restored = positions(state);
        const std::vector<uint8_t> blob = fixture->serialize(i);
        if (blob.empty()) broken("a restored state does not serialize", i);
        const PskResult again = pskRestoreDecodeState(state, blob.data(), blob.size());
        if (again != PSK_SUCCESS) broken("a restored state's own blob does not restore:", i, again);
        if (positions(state) != restored) broken("restoring a state's own blob changed the positions", i);
        if (fixture->serialize(i) != blob) broken("serialize, restore, serialize changed the blob", i);
    }
    return 0;
}
