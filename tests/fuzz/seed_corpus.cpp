// psk_fuzz_seeds <dir>: writes the fuzz targets' seed corpora, files the library and the psk tool
// write themselves, into <dir>/safetensors, <dir>/npy and <dir>/decode_restore. The test suite
// runs it before the fuzz smoke tests (tests/fuzz/CMakeLists.txt), so the decode blobs always
// have the current format; `psk_fuzz_seeds tests/fuzz/corpus` refreshes the committed copies.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "decode_fixture.hpp"
#include "io/safetensors.hpp"
#include "npy.hpp"
#include "sketch/philox.hpp"
#include "sketch/sketch_files.hpp"

namespace fs = std::filesystem;

namespace {

bool writeBytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!out) std::fprintf(stderr, "psk_fuzz_seeds: cannot write %s\n", path.c_str());
    return bool(out);
}

std::vector<float> ramp(size_t n, float start, float step) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = start + step * float(i % 97);
    return v;
}

bool safetensorsSeeds(const fs::path& dir) {
    bool ok = true;
    constexpr uint32_t h = 16, r = 8;
    ok &= writeBytes(dir / "random_p4_h16_r8.safetensors",
                     psk::serializeSafeTensors(psk::randomSketchToSafeTensors(psk::generateRandomSketch(1, 4, h, r))));
    ok &= writeBytes(dir / "random_p2_h16.safetensors",
                     psk::serializeSafeTensors(psk::randomSketchToSafeTensors(psk::generateRandomSketch(2, 2, h, r))));
    psk::LearnedSketchWeights learned;
    learned.headDim = h;
    learned.sketchSize = r;
    for (auto& branch : learned.ff)
        for (int level = 0; level < 2; ++level) {
            psk::LearnedFeedForward& ff = branch[level];
            ff.inDim = level == 0 ? h : r;
            ff.lnScale = ramp(ff.inDim, 1.0f, 0.01f);
            ff.lnBias = ramp(ff.inDim, -0.1f, 0.01f);
            ff.dense1 = ramp(size_t(ff.inDim) * 8 * r, -0.5f, 0.01f);
            ff.dense2 = ramp(size_t(8) * r * r, -0.25f, 0.005f);
        }
    ok &= writeBytes(dir / "learned_h16_r8.safetensors", psk::serializeSafeTensors(psk::learnedSketchToSafeTensors(learned)));
    psk::QkNormWeights norm;
    norm.scale = ramp(h, 1.0f, 0.01f);
    norm.bias = ramp(h, 0.0f, 0.01f);
    norm.localScale = ramp(h, 0.9f, 0.01f);
    norm.localBias = ramp(h, 0.1f, -0.01f);
    ok &= writeBytes(dir / "qknorm_local_h16.safetensors", psk::serializeSafeTensors(psk::qkNormToSafeTensors(norm)));
    ok &= writeBytes(dir / "empty.safetensors", psk::serializeSafeTensors(psk::SafeTensors{}));
    // The 16-bit dtypes the reader accepts (the library writes F32 only): a hand-made header.
    std::string header = R"({"__metadata__":{"kind":"test"},"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[4,8]}})";
    while (header.size() % 8) header += ' ';
    std::vector<uint8_t> bytes(8);
    for (int i = 0; i < 8; ++i) bytes[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
    bytes.insert(bytes.end(), header.begin(), header.end());
    const uint8_t data[8] = {0x00, 0x3c, 0x00, 0xc0, 0x80, 0x3f, 0x40, 0xc0};  // f16 1, -2; bf16 1, -3
    bytes.insert(bytes.end(), data, data + 8);
    ok &= writeBytes(dir / "f16_bf16.safetensors", bytes);
    return ok;
}

bool npySeeds(const fs::path& dir) {
    namespace npy = psk::npy;
    bool ok = true;
    auto write = [&](const char* name, const std::vector<uint64_t>& shape, npy::DType dtype) {
        uint64_t count = 1;
        for (uint64_t d : shape) count *= d;
        const std::vector<float> values = ramp(count, -1.0f, 0.125f);
        std::vector<uint8_t> data;
        for (float v : values) {
            if (dtype == npy::DType::Float32) {
                const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
                data.insert(data.end(), p, p + 4);
            } else {
                const uint16_t half = npy::floatToHalf(v);
                data.push_back(uint8_t(half));
                data.push_back(uint8_t(half >> 8));
            }
        }
        ok &= writeBytes(dir / name, npy::serialize(shape, dtype, data.data(), data.size()));
    };
    write("f32_2x3x4.npy", {2, 3, 4}, npy::DType::Float32);
    write("f16_1x2x5x16.npy", {1, 2, 5, 16}, npy::DType::Float16);
    write("f32_scalar.npy", {}, npy::DType::Float32);
    write("f32_0x3.npy", {0, 3}, npy::DType::Float32);
    return ok;
}

bool decodeSeeds(const fs::path& dir) {
    psk::fuzz::DecodeFixture f;
    const std::string error = f.create();
    if (!error.empty()) {
        std::fprintf(stderr, "psk_fuzz_seeds: cannot create the decode states: %s\n", error.c_str());
        return false;
    }
    bool ok = true;
    for (int i = 0; i < psk::fuzz::DecodeFixture::kStates; ++i) {
        const std::string name = psk::fuzz::DecodeFixture::kNames[i];
        auto save = [&](const std::string& suffix) {
            const std::vector<uint8_t> blob = f.serialize(i);
            if (blob.empty()) {
                std::fprintf(stderr, "psk_fuzz_seeds: pskSerializeDecodeState failed (%s)\n", name.c_str());
                ok = false;
                return;
            }
            ok &= writeBytes(dir / (name + "_" + suffix + ".blob"), blob);
        };
        save("fresh");
        ok &= f.prefill(i, 5, 10) == PSK_SUCCESS;
        save("prefill5");
        ok &= f.prefill(i, 20, 20) == PSK_SUCCESS;  // past one polysketch block (b = 16)
        ok &= f.step(i, 30) == PSK_SUCCESS && f.step(i, 40) == PSK_SUCCESS;
        save("prefill20_step2");
    }
    if (!ok) std::fprintf(stderr, "psk_fuzz_seeds: a decode call failed\n");
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: psk_fuzz_seeds <dir>  (writes <dir>/safetensors, <dir>/npy, <dir>/decode_restore)\n");
        return 2;
    }
    const fs::path root = argv[1];
    bool ok = true;
    try {
        for (const char* target : {"safetensors", "npy", "decode_restore"}) fs::create_directories(root / target);
        ok &= safetensorsSeeds(root / "safetensors");
        ok &= npySeeds(root / "npy");
        ok &= decodeSeeds(root / "decode_restore");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "psk_fuzz_seeds: %s\n", e.what());
        return 1;
    }
    return ok ? 0 : 1;
}
