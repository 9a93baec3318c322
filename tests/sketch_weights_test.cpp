// Host-side sketch weights: the Philox generator, the portable Gaussian sketch matrices (pinned
// hashes: the "seeded sketch matrices hash to stored values" portability test), the safetensors
// reader/writer and the random/learned sketch loaders. No GPU needed.
#include "sketch/sketch_weights.hpp"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace psk {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

uint64_t fnv1a64(const void* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < size; ++i) {
        hash ^= p[i];
        hash *= 0x100000001b3ull;
    }
    return hash;
}

/** FNV-1a over the little-endian bytes of the float bit patterns. */
uint64_t hashFloats(const std::vector<float>& values, uint64_t hash = 0xcbf29ce484222325ull) {
    for (const float v : values) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        const uint8_t bytes[4] = {uint8_t(bits), uint8_t(bits >> 8), uint8_t(bits >> 16), uint8_t(bits >> 24)};
        hash = fnv1a64(bytes, 4, hash);
    }
    return hash;
}

/** Hash of a whole sketch: its tensors' data in randomSketchTensorSpecs order. */
uint64_t hashSketch(const RandomSketchWeights& w) {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (const SketchTensorSpec& spec : randomSketchTensorSpecs(w.degree, w.headDim, w.sketchSize))
        hash = hashFloats(w.g.at(spec.name), hash);
    return hash;
}

uint32_t floatBits(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return bits;
}

/** Runs f; the psk::Error code it throws (PSK_SUCCESS if none) and the message. */
PskResult codeOf(const std::function<void()>& f, std::string* message = nullptr) {
    try {
        f();
    } catch (const Error& e) {
        if (message) *message = e.what();
        return e.code();
    }
    return PSK_SUCCESS;
}

/** Expects f to throw PSK_ERROR_BAD_FILE with a message containing `needle`. */
void expectBadFile(const std::function<void()>& f, const std::string& needle) {
    std::string message;
    EXPECT_EQ(codeOf(f, &message), PSK_ERROR_BAD_FILE) << "expected a rejection mentioning \"" << needle << "\"";
    EXPECT_NE(message.find(needle), std::string::npos) << "message: " << message;
}

/** A raw safetensors image: 8-byte length, the header text as given, the data bytes. */
std::vector<uint8_t> rawFile(const std::string& header, const std::vector<uint8_t>& data = {}) {
    std::vector<uint8_t> bytes;
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) bytes.push_back(uint8_t(n >> (8 * i)));
    bytes.insert(bytes.end(), header.begin(), header.end());
    bytes.insert(bytes.end(), data.begin(), data.end());
    return bytes;
}

SafeTensors parse(const std::vector<uint8_t>& bytes) { return parseSafeTensors(bytes.data(), bytes.size()); }

void expectBadHeader(const std::string& header, const std::string& needle, const std::vector<uint8_t>& data = {}) {
    SCOPED_TRACE(header);
    expectBadFile([&] { parse(rawFile(header, data)); }, needle);
}

std::string tempPath(const std::string& name) { return ::testing::TempDir() + "psk_sketch_weights_" + name; }

// ---------------------------------------------------------------------------------------------
// Philox4x32-10
// ---------------------------------------------------------------------------------------------

// Known-answer vectors of Random123 (D. E. Shaw Research), file tests/kat_vectors, the three
// "philox4x32 10" lines: counter[4] key[2] -> result[4].
TEST(Philox, KnownAnswerVectors) {
    EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
              (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
    EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
              (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
    EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
              (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

// ---------------------------------------------------------------------------------------------
// Portable elementary functions
// ---------------------------------------------------------------------------------------------

TEST(PortableMath, ExactPoints) {
    const uint64_t two53 = uint64_t(1) << 53;
    EXPECT_EQ(portable_math::logUnit53(two53 - 1), 0.0);                          // u = 1
    EXPECT_NEAR(portable_math::logUnit53((two53 >> 1) - 1), -std::log(2.0), 1e-16);  // u = 1/2
    EXPECT_NEAR(portable_math::logUnit53(0), -53.0 * std::log(2.0), 4e-15);       // u = 2^-53
    EXPECT_EQ(portable_math::cosTurn53(0), 1.0);
    EXPECT_EQ(portable_math::cosTurn53(uint64_t(1) << 52), -1.0);  // half a turn
    EXPECT_EQ(portable_math::cosTurn53(uint64_t(1) << 51), 0.0);   // a quarter turn
    EXPECT_EQ(portable_math::cosTurn53(3 * (uint64_t(1) << 51)), 0.0);
    EXPECT_NEAR(portable_math::cosTurn53(uint64_t(1) << 50), std::sqrt(0.5), 2e-16);  // an eighth
}

TEST(PortableMath, AgreesWithLibm) {
    // libm's cos(2 pi u) has an absolute error of ~1e-15 from rounding 2 pi u; the portable one
    // reduces the argument exactly (checked to ~2 ulp against 120-bit mpmath during development).
    double worstLog = 0, worstCos = 0;
    for (uint64_t i = 0; i < 200000; ++i) {
        const std::array<uint32_t, 4> x = philox4x32_10({uint32_t(i), 0, 77, 0}, {1, 2});
        uint64_t a = (uint64_t(x[0]) << 21) | (x[1] >> 11);
        a >>= (x[2] % 53);  // cover every binade of u
        const uint64_t b = (uint64_t(x[2]) << 21) | (x[3] >> 11);
        const double u = double(a + 1) * 0x1p-53;
        const double lnRef = std::log(u);
        if (lnRef != 0) worstLog = std::max(worstLog, std::fabs(portable_math::logUnit53(a) - lnRef) / std::fabs(lnRef));
        const double cosRef = std::cos(2.0 * 3.14159265358979323846 * (double(b) * 0x1p-53));
        worstCos = std::max(worstCos, std::fabs(portable_math::cosTurn53(b) - cosRef));
    }
    EXPECT_LT(worstLog, 8e-16);  // relative: a few ulp
    EXPECT_LT(worstCos, 4e-15);  // absolute
}

// ---------------------------------------------------------------------------------------------
// Gaussian matrices
// ---------------------------------------------------------------------------------------------

TEST(Gaussian, Moments) {
    std::vector<float> z;
    gaussianMatrix(2024, 3, 1000, 1000, z);
    ASSERT_EQ(z.size(), 1000000u);
    double s1 = 0, s2 = 0, s4 = 0;
    size_t beyond2 = 0;
    for (const float v : z) {
        ASSERT_TRUE(std::isfinite(v));
        const double d = v;
        s1 += d;
        s2 += d * d;
        s4 += d * d * d * d;
        if (std::fabs(d) > 2.0) ++beyond2;
    }
    const double n = double(z.size());
    const double mean = s1 / n, var = s2 / n - mean * mean;
    EXPECT_LT(std::fabs(mean), 0.005);        // 5 sigma
    EXPECT_LT(std::fabs(var - 1.0), 0.01);    // 7 sigma
    EXPECT_LT(std::fabs(s4 / n - 3.0), 0.05); // kurtosis of a normal: 3
    EXPECT_NEAR(double(beyond2) / n, 0.0455, 0.002);

    // A different stream of the same seed is uncorrelated with the first.
    std::vector<float> w;
    gaussianMatrix(2024, 4, 1000, 1000, w);
    double cross = 0;
    for (size_t i = 0; i < z.size(); ++i) cross += double(z[i]) * w[i];
    EXPECT_LT(std::fabs(cross / n), 0.005);
}

TEST(Gaussian, EntriesArePinned) {
    // Seed 0, stream of g1_0a, entries 0..3 (cross-checked with an independent Python model).
    std::vector<float> z;
    gaussianMatrix(0, randomSketchStreamId(1, 0, false), 1, 4, z);
    ASSERT_EQ(z.size(), 4u);
    EXPECT_EQ(floatBits(z[0]), 0x3d41eedfu);  //  0.0473469...
    EXPECT_EQ(floatBits(z[1]), 0x3fa50336u);  //  1.2891605
    EXPECT_EQ(floatBits(z[2]), 0xc01d8c4eu);  // -2.4616885
    EXPECT_EQ(floatBits(z[3]), 0xbfec6d65u);  // -1.8470885
    for (int e = 0; e < 4; ++e)
        EXPECT_EQ(z[size_t(e)], float(gaussianEntry(0, randomSketchStreamId(1, 0, false), uint64_t(e))));
}

TEST(RandomSketch, StreamIdsAndLayout) {
    EXPECT_EQ(randomSketchStreamId(1, 0, false), 0x01000000u);
    EXPECT_EQ(randomSketchStreamId(1, 0, true), 0x01000001u);
    EXPECT_EQ(randomSketchStreamId(1, 1, false), 0x01000002u);
    EXPECT_EQ(randomSketchStreamId(1, 1, true), 0x01000003u);
    EXPECT_EQ(randomSketchStreamId(2, 0, false), 0x02000000u);
    EXPECT_EQ(randomSketchStreamId(2, 0, true), 0x02000001u);

    EXPECT_TRUE(randomSketchTensorSpecs(2, 64, 32).empty());
    const auto p4 = randomSketchTensorSpecs(4, 64, 32);
    ASSERT_EQ(p4.size(), 2u);
    EXPECT_EQ(p4[0].name, "g1_0a");
    EXPECT_EQ(p4[1].name, "g1_0b");
    EXPECT_EQ(p4[1].rows, 64u);
    EXPECT_EQ(p4[1].cols, 32u);
    const auto p8 = randomSketchTensorSpecs(8, 64, 16);
    ASSERT_EQ(p8.size(), 6u);
    const char* names[6] = {"g1_0a", "g1_0b", "g1_1a", "g1_1b", "g2_0a", "g2_0b"};
    for (size_t i = 0; i < 6; ++i) {
        EXPECT_EQ(p8[i].name, names[i]);
        EXPECT_EQ(p8[i].rows, i < 4 ? 64u : 16u);
        EXPECT_EQ(p8[i].cols, 16u);
    }
}

// The portability test: seeded sketch matrices hash to stored values. The values were computed on
// x86-64 Linux (GCC and Clang, -O0 to -O3 -march=native) and agree with an independent Python
// model of the definition in sketch_weights.hpp.
TEST(RandomSketch, SeededMatricesHashToStoredValues) {
    struct Case {
        uint64_t seed;
        uint32_t degree, h, r;
        uint64_t hash;
    };
    const Case cases[] = {
        {0, 4, 64, 32, 0xf8257f43a61aa01cull},
        {42, 8, 64, 16, 0xa7b39a22ac4d82fdull},
        {0xDEADBEEFCAFEF00Dull, 4, 128, 64, 0x42a86e622795e69dull},
        {1, 8, 16, 8, 0x5213ad30ecaaf8f3ull},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << "seed " << c.seed << " p " << c.degree << " h " << c.h << " r " << c.r);
        const RandomSketchWeights w = generateRandomSketch(c.seed, c.degree, c.h, c.r);
        EXPECT_EQ(w.degree, c.degree);
        EXPECT_EQ(w.headDim, c.h);
        EXPECT_EQ(w.sketchSize, c.r);
        EXPECT_FALSE(w.referenceScaling);
        EXPECT_EQ(hashSketch(w), c.hash) << std::hex << "got 0x" << hashSketch(w);
    }
    EXPECT_TRUE(generateRandomSketch(7, 2, 64, 32).g.empty());
}

TEST(RandomSketch, Deterministic) {
    const RandomSketchWeights a = generateRandomSketch(99, 8, 32, 16);
    const RandomSketchWeights b = generateRandomSketch(99, 8, 32, 16);
    EXPECT_EQ(a.g, b.g);
    const RandomSketchWeights c = generateRandomSketch(100, 8, 32, 16);
    EXPECT_NE(a.g.at("g1_0a"), c.g.at("g1_0a"));
    // Distinct tensors of one sketch differ.
    EXPECT_NE(a.g.at("g1_0a"), a.g.at("g1_0b"));
    EXPECT_NE(a.g.at("g2_0a"), a.g.at("g2_0b"));
    // Documented consequences of the stream mapping: level-1 matrices do not depend on the degree,
    // and a larger h extends the rows.
    const RandomSketchWeights p4 = generateRandomSketch(99, 4, 32, 16);
    EXPECT_EQ(p4.g.at("g1_0a"), a.g.at("g1_0a"));
    const RandomSketchWeights tall = generateRandomSketch(99, 4, 48, 16);
    EXPECT_TRUE(std::equal(p4.g.at("g1_0b").begin(), p4.g.at("g1_0b").end(), tall.g.at("g1_0b").begin()));
}

TEST(RandomSketch, RejectsBadArguments) {
    EXPECT_EQ(codeOf([] { generateRandomSketch(1, 6, 64, 32); }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(codeOf([] { generateRandomSketch(1, 0, 64, 32); }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(codeOf([] { generateRandomSketch(1, 16, 64, 32); }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(codeOf([] { generateRandomSketch(1, 4, 0, 32); }), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(codeOf([] { generateRandomSketch(1, 4, 64, 0); }), PSK_ERROR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------------------------
// safetensors
// ---------------------------------------------------------------------------------------------

TEST(SafeTensors, RoundTrip) {
    SafeTensors file;
    file.metadata["kind"] = "random";
    file.metadata["note"] = "quote \" backslash \\ newline \n tab \t caf\xC3\xA9 \xF0\x9F\x98\x80";
    file.tensors["matrix"] = Tensor{{2, 3}, {1, -2, 3.5f, 0, -0.0f, 1e-30f}};
    file.tensors["scalar"] = Tensor{{}, {42}};
    file.tensors["empty"] = Tensor{{0, 5}, {}};
    file.tensors["cube"] = Tensor{{2, 1, 2}, {std::numeric_limits<float>::infinity(), 1, 2, 3}};
    file.tensors["name with \"quotes\""] = Tensor{{1}, {7}};

    const std::vector<uint8_t> bytes = serializeSafeTensors(file);
    uint64_t headerBytes = 0;
    for (int i = 7; i >= 0; --i) headerBytes = (headerBytes << 8) | bytes[size_t(i)];
    EXPECT_EQ(headerBytes % 8, 0u);
    EXPECT_EQ(bytes.size(), 8 + headerBytes + 4 * (6 + 1 + 0 + 4 + 1));

    const SafeTensors back = parse(bytes);
    EXPECT_EQ(back.metadata, file.metadata);
    ASSERT_EQ(back.tensors.size(), file.tensors.size());
    for (const auto& [name, tensor] : file.tensors) {
        SCOPED_TRACE(name);
        ASSERT_EQ(back.tensors.count(name), 1u);
        EXPECT_EQ(back.tensors.at(name).shape, tensor.shape);
        ASSERT_EQ(back.tensors.at(name).data.size(), tensor.data.size());
        for (size_t i = 0; i < tensor.data.size(); ++i)
            EXPECT_EQ(floatBits(back.tensors.at(name).data[i]), floatBits(tensor.data[i]));
    }

    // Through a file.
    const std::string path = tempPath("roundtrip.safetensors");
    writeSafeTensors(path, file);
    const SafeTensors fromDisk = readSafeTensors(path);
    EXPECT_EQ(fromDisk.metadata, file.metadata);
    EXPECT_EQ(fromDisk.tensors.at("matrix").data, file.tensors.at("matrix").data);
    std::remove(path.c_str());
}

TEST(SafeTensors, ReadsHalfTypesAndLooseLayouts) {
    // F16 1.0, -2.0, 65504, smallest subnormal; BF16 1.0, -3.0 (0x4040 -> 3.0 negated);
    // F32 0.5, then (after 4 unused bytes) a scalar F32 0.5, an empty tensor inside the gap, and
    // 4 unused bytes at the end; whitespace, escapes and unsorted keys in the JSON.
    std::vector<uint8_t> data = {0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x01, 0x00,  // f16 x4
                                 0x80, 0x3F, 0x40, 0xC0,                          // bf16 x2
                                 0x00, 0x00, 0x00, 0x3F,                          // f32 0.5
                                 0xEE, 0xEE, 0xEE, 0xEE,                          // a gap
                                 0x00, 0x00, 0x00, 0x3F,                          // f32 0.5
                                 0xEE, 0xEE, 0xEE, 0xEE};                         // unused tail
    const std::string header =
        "{ \"h\\u0061lf\" : {\"shape\":[2,2],\"dtype\":\"F16\",\"data_offsets\":[0,8]},\n"
        "  \"bf\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [8, 12]},\r\n"
        "  \"f\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [12, 16]},\t"
        "  \"f_again\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [20, 24]},"
        "  \"empty\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [18, 18]},"
        "  \"__metadata__\": {\"k\\u00e9y\": \"\\ud83d\\ude00 \\/ \\b\\f\"} }      ";
    const SafeTensors file = parse(rawFile(header, data));
    ASSERT_EQ(file.tensors.size(), 5u);
    EXPECT_TRUE(file.tensors.at("empty").data.empty());
    const Tensor& half = file.tensors.at("half");
    EXPECT_EQ(half.shape, (std::vector<uint32_t>{2, 2}));
    EXPECT_EQ(half.data[0], 1.0f);
    EXPECT_EQ(half.data[1], -2.0f);
    EXPECT_EQ(half.data[2], 65504.0f);
    EXPECT_EQ(half.data[3], std::ldexp(1.0f, -24));
    EXPECT_EQ(file.tensors.at("bf").data, (std::vector<float>{1.0f, -3.0f}));
    EXPECT_EQ(file.tensors.at("f").data, (std::vector<float>{0.5f}));
    EXPECT_EQ(file.tensors.at("f_again").data, (std::vector<float>{0.5f}));
    EXPECT_EQ(file.metadata.at("k\xC3\xA9y"), "\xF0\x9F\x98\x80 / \b\f");
}

TEST(SafeTensors, RejectsTruncatedFiles) {
    expectBadFile([] { parseSafeTensors(nullptr, 0); }, "truncated");
    const std::vector<uint8_t> seven(7, 0);
    expectBadFile([&] { parse(seven); }, "truncated");
    // The header claims more bytes than follow.
    std::vector<uint8_t> shortHeader = rawFile("{}");
    shortHeader[0] = 50;
    expectBadFile([&] { parse(shortHeader); }, "truncated");
    // The data buffer is cut short.
    SafeTensors file;
    file.tensors["x"] = Tensor{{4}, {1, 2, 3, 4}};
    std::vector<uint8_t> bytes = serializeSafeTensors(file);
    bytes.resize(bytes.size() - 3);
    expectBadFile([&] { parse(bytes); }, "beyond the data buffer");
    // Absurd header length.
    std::vector<uint8_t> huge = rawFile("{}");
    huge[3] = 0x10;  // 256 MiB
    expectBadFile([&] { parse(huge); }, "exceeds the limit");
    // A missing file.
    expectBadFile([] { readSafeTensors(tempPath("does_not_exist.safetensors")); }, "cannot open");
}

TEST(SafeTensors, RejectsBadJson) {
    expectBadHeader("", "expected a value");
    expectBadHeader("{", "expected a string key");
    expectBadHeader("{\"a\":", "expected a value");
    expectBadHeader("{\"__metadata__\":{\"a\":\"b\",}}", "expected a string key");
    expectBadHeader("{'a':1}", "expected a string key");
    expectBadHeader("{\"__metadata__\":{\"a\":\"b}}", "unterminated string");
    expectBadHeader("{\"__metadata__\":{\"a\":\"\\q\"}}", "unknown escape");
    expectBadHeader("{\"__metadata__\":{\"a\":\"\\u12\"}}", "hex digit");
    expectBadHeader("{\"__metadata__\":{\"a\":\"\\ud800\"}}", "surrogate");
    expectBadHeader("{\"__metadata__\":{\"a\":\"\\udc00\"}}", "surrogate");
    expectBadHeader("{\"__metadata__\":{\"a\":\"x\ny\"}}", "control character");
    expectBadHeader("{\"__metadata__\":{\"a\":\"\xC3\"}}", "UTF-8");
    expectBadHeader("{\"__metadata__\":{\"a\":\"\xC0\xAF\"}}", "UTF-8");
    expectBadHeader("{\"__metadata__\":{\"a\":\"\xED\xA0\x80\"}}", "UTF-8");
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "only integers");
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1e2],\"data_offsets\":[0,4]}}", "only integers");
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", "leading zeros");
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}",
                    "too large");
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],}}", "expected a string key");
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", "expected a value");
    expectBadHeader("{\"x\":{\"dtype\":\"F32\" \"shape\":[1],\"data_offsets\":[0,4]}}", "expected ',' or '}'");
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1 2],\"data_offsets\":[0,4]}}", "expected ',' or ']'");
    expectBadHeader("{\"__metadata__\":{\"a\":true}}", "true, false and null");
    expectBadHeader("{\"__metadata__\":null}", "true, false and null");
    expectBadHeader("{\"a\":1,\"a\":2}", "duplicate key");
    expectBadHeader("{} x", "after the top-level value");
    expectBadHeader("{}{}", "after the top-level value");
    expectBadHeader("[]", "must be a JSON object");
    expectBadHeader(std::string(100, '[') + std::string(100, ']'), "nested too deeply");
    expectBadHeader("{\"__metadata__\":[]}", "__metadata__ must be an object");
    expectBadHeader("{\"__metadata__\":{\"a\":1}}", "must be a string");
    expectBadHeader("{\"x\":5}", "must be an object");
}

TEST(SafeTensors, RejectsBadTensorEntries) {
    const std::vector<uint8_t> data(16, 0);
    // dtype
    expectBadHeader("{\"x\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", "F64", data);
    expectBadHeader("{\"x\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]}}", "only F32, F16 and BF16",
                    data);
    expectBadHeader("{\"x\":{\"dtype\":4,\"shape\":[4],\"data_offsets\":[0,16]}}", "dtype must be a string", data);
    // offsets
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[4,20]}}", "beyond the data buffer",
                    data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", "begin > end", data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", "negative", data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", "[begin, end]", data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"0\"}}", "[begin, end]", data);
    // shape vs size
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", "but data_offsets span",
                    data);
    expectBadHeader("{\"x\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", "but data_offsets span",
                    data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967295,4294967295,4294967295],\"data_offsets\":[0,16]}}",
                    "too many", data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296],\"data_offsets\":[0,16]}}",
                    "dimension too large", data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", "negative", data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", "shape must be an array",
                    data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}}", "must be an integer",
                    data);
    // fields
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", "lacks \"shape\"", data);
    expectBadHeader("{\"x\":{\"shape\":[4],\"data_offsets\":[0,16]}}", "lacks \"dtype\"", data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[4]}}", "lacks \"data_offsets\"", data);
    expectBadHeader("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],\"extra\":1}}",
                    "unknown field \"extra\"", data);
}

TEST(SafeTensors, RejectsOverlappingTensors) {
    // No byte may belong to two tensors (the format's guarantee; the reference reader rejects any
    // layout other than back-to-back tensors): identical ranges, a partial overlap, containment,
    // in any order of the header. Empty tensors hold no byte and overlap nothing.
    const std::vector<uint8_t> data(16, 0);
    auto twoTensors = [](const char* a, const char* b) {
        return std::string("{\"x\":{\"dtype\":\"F32\",\"shape\":[") + a + "},\"y\":{\"dtype\":\"F32\",\"shape\":[" + b + "}}";
    };
    expectBadHeader(twoTensors("1],\"data_offsets\":[12,16]", "1],\"data_offsets\":[12,16]"), "overlap", data);
    expectBadHeader(twoTensors("2],\"data_offsets\":[0,8]", "2],\"data_offsets\":[4,12]"), "overlap", data);
    expectBadHeader(twoTensors("2],\"data_offsets\":[4,12]", "2],\"data_offsets\":[0,8]"), "overlap", data);
    expectBadHeader(twoTensors("4],\"data_offsets\":[0,16]", "1],\"data_offsets\":[8,12]"), "overlap", data);
    expectBadHeader(twoTensors("1],\"data_offsets\":[8,12]", "4],\"data_offsets\":[0,16]"), "overlap", data);
    // The message names both tensors and their ranges.
    expectBadHeader(twoTensors("2],\"data_offsets\":[0,8]", "2],\"data_offsets\":[4,12]"),
                    "tensors \"x\" [0, 8) and \"y\" [4, 12) overlap", data);
    // Adjacent ranges and empty tensors inside others are fine.
    EXPECT_EQ(parse(rawFile(twoTensors("2],\"data_offsets\":[0,8]", "2],\"data_offsets\":[8,16]"), data)).tensors.size(), 2u);
    EXPECT_EQ(parse(rawFile(twoTensors("4],\"data_offsets\":[0,16]", "0],\"data_offsets\":[8,8]"), data)).tensors.size(), 2u);
}

/** Writes `bytes` to `path`, then extends the file (sparse, zeros) to `size` bytes if larger. */
void writeFileOfSize(const std::string& path, const std::vector<uint8_t>& bytes, uint64_t size = 0) {
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
    if (size > bytes.size()) std::filesystem::resize_file(path, size);
}

TEST(SafeTensors, RejectsDirectoriesAndOtherNonRegularFiles) {
    // A directory opens as a stream on Linux and reports a huge size; it must be BAD_FILE, not an
    // attempt to allocate that size.
    const std::string dir = tempPath("a_directory.safetensors");
    std::filesystem::create_directories(dir);
    expectBadFile([&] { readSafeTensors(dir); }, "not a regular file");
    expectBadFile([] { readSafeTensors("/dev/null"); }, "not a regular file");
    std::filesystem::remove(dir);
}

/**
 * In a child process (EXPECT_EXIT): limits the address space to ~256 MiB above what the process maps,
 * reads the three files and exits with a bit per failed expectation (0: all as expected).
 */
[[noreturn]] void readUnderAddressLimit(const std::string& padded, const std::string& longHeader, const std::string& truncated) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t limit = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(256) << 20);
    const rlimit rl{limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) std::_Exit(100);
    int status = 0;
    try {
        const SafeTensors back = readSafeTensors(padded);
        if (back.tensors.at("x").data != std::vector<float>{1, 2, 3, 4}) status |= 1;
    } catch (...) {
        status |= 2;
    }
    auto badFile = [](const std::string& path, const char* needle) {
        try {
            readSafeTensors(path);
        } catch (const Error& e) {
            return e.code() == PSK_ERROR_BAD_FILE && std::string(e.what()).find(needle) != std::string::npos;
        } catch (...) {
        }
        return false;
    };
    if (!badFile(longHeader, "exceeds the limit")) status |= 4;
    if (!badFile(truncated, "beyond the data buffer")) status |= 8;
    std::_Exit(status);
}

TEST(SafeTensors, ReadsTheHeaderAndTheTensorsOnly) {
    // A 2 GiB file (sparse) read under an address-space limit of ~256 MiB above what the process
    // already maps: the reader may allocate the header and the tensors, never the file.
    const uint64_t twoGiB = uint64_t(2) << 30;
    SafeTensors file;
    file.tensors["x"] = Tensor{{4}, {1, 2, 3, 4}};
    const std::string padded = tempPath("padded.safetensors"), longHeader = tempPath("long_header.safetensors"),
                      truncated = tempPath("truncated.safetensors");
    writeFileOfSize(padded, serializeSafeTensors(file), twoGiB);  // the tensor, then 2 GiB of unused bytes
    std::vector<uint8_t> header = rawFile("{}");
    header[3] = 0x7F;  // a header of 2 GiB - ...: beyond the 100 MB limit
    writeFileOfSize(longHeader, header, twoGiB);
    std::vector<uint8_t> cut = serializeSafeTensors(file);
    cut.resize(cut.size() - 3);
    writeFileOfSize(truncated, cut);
    EXPECT_EXIT(readUnderAddressLimit(padded, longHeader, truncated), ::testing::ExitedWithCode(0), "");
    std::remove(padded.c_str());
    std::remove(longHeader.c_str());
    std::remove(truncated.c_str());
}

TEST(SafeTensors, SerializeRejectsInconsistentTensors) {
    SafeTensors file;
    file.tensors["x"] = Tensor{{2, 2}, {1, 2, 3}};
    EXPECT_EQ(codeOf([&] { serializeSafeTensors(file); }), PSK_ERROR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------------------------
// Random sketch files
// ---------------------------------------------------------------------------------------------

SafeTensors reparse(const SafeTensors& file) { return parse(serializeSafeTensors(file)); }

TEST(RandomSketchFile, RoundTrip) {
    for (const uint32_t degree : {2u, 4u, 8u}) {
        SCOPED_TRACE(degree);
        RandomSketchWeights w = generateRandomSketch(5, degree, 64, 16);
        w.referenceScaling = degree == 8;
        const SafeTensors file = reparse(randomSketchToSafeTensors(w));
        EXPECT_EQ(file.metadata.at("kind"), "random");
        EXPECT_EQ(file.metadata.at("degree"), std::to_string(degree));
        EXPECT_EQ(file.metadata.at("sketch_size"), "16");
        EXPECT_EQ(file.metadata.at("scaling"), degree == 8 ? "reference" : "unbiased");
        for (const uint32_t r : {0u, 16u}) {
            const RandomSketchWeights back = loadRandomSketch(file, 64, r, degree);
            EXPECT_EQ(back.degree, degree);
            EXPECT_EQ(back.headDim, 64u);
            EXPECT_EQ(back.sketchSize, 16u);
            EXPECT_EQ(back.referenceScaling, w.referenceScaling);
            EXPECT_EQ(back.g, w.g);
            EXPECT_EQ(hashSketch(back), hashSketch(w));
        }
    }
    // Degree 2 carries no matrices: the requested sketch size wins.
    const SafeTensors p2 = randomSketchToSafeTensors(generateRandomSketch(5, 2, 64, 16));
    EXPECT_EQ(loadRandomSketch(p2, 64, 32).sketchSize, 32u);
    // Through a file on disk, degree taken from the file.
    const std::string path = tempPath("random.safetensors");
    writeSafeTensors(path, randomSketchToSafeTensors(generateRandomSketch(6, 8, 32, 8)));
    const RandomSketchWeights fromDisk = loadRandomSketch(readSafeTensors(path), 32, 0);
    EXPECT_EQ(fromDisk.g, generateRandomSketch(6, 8, 32, 8).g);
    std::remove(path.c_str());
}

TEST(RandomSketchFile, RejectsMismatches) {
    const SafeTensors good = randomSketchToSafeTensors(generateRandomSketch(5, 8, 64, 16));
    ASSERT_NO_THROW(loadRandomSketch(good, 64, 16, 8));

    {  // missing tensor
        SafeTensors f = good;
        f.tensors.erase("g2_0b");
        expectBadFile([&] { loadRandomSketch(f, 64, 16); }, "missing tensor \"g2_0b\"");
    }
    {  // extra tensor
        SafeTensors f = good;
        f.tensors["g3_0a"] = Tensor{{16, 16}, std::vector<float>(256, 0.0f)};
        expectBadFile([&] { loadRandomSketch(f, 64, 16); }, "unexpected tensor \"g3_0a\"");
    }
    {  // wrong shape
        SafeTensors f = good;
        f.tensors["g2_0a"] = Tensor{{16, 8}, std::vector<float>(128, 0.0f)};
        expectBadFile([&] { loadRandomSketch(f, 64, 16); }, "\"g2_0a\" has shape [16, 8], expected [16, 16] (r x r)");
    }
    {  // non-finite entry
        SafeTensors f = good;
        f.tensors["g1_1a"].data[7] = std::numeric_limits<float>::quiet_NaN();
        expectBadFile([&] { loadRandomSketch(reparse(f), 64, 16); }, "non-finite");
    }
    // h and r against the caller's
    expectBadFile([&] { loadRandomSketch(good, 32, 16); }, "expected [32, 16] (h x r)");
    expectBadFile([&] { loadRandomSketch(good, 64, 32); }, "sketch_size 16, but sketch size 32");
    expectBadFile([&] { loadRandomSketch(good, 64, 16, 4); }, "degree 8, but degree 4");
    // metadata
    auto withMeta = [&](const char* key, const char* value) {
        SafeTensors f = good;
        if (value)
            f.metadata[key] = value;
        else
            f.metadata.erase(key);
        return f;
    };
    expectBadFile([&] { loadRandomSketch(withMeta("kind", nullptr), 64, 16); }, "lacks \"kind\"");
    expectBadFile([&] { loadRandomSketch(withMeta("kind", "learned"), 64, 16); }, "\"kind\" is \"learned\"");
    expectBadFile([&] { loadRandomSketch(withMeta("degree", nullptr), 64, 16); }, "lacks \"degree\"");
    expectBadFile([&] { loadRandomSketch(withMeta("degree", "6"), 64, 16); }, "degree 6 is not supported");
    expectBadFile([&] { loadRandomSketch(withMeta("degree", "eight"), 64, 16); }, "not a non-negative integer");
    expectBadFile([&] { loadRandomSketch(withMeta("degree", "-8"), 64, 16); }, "not a non-negative integer");
    expectBadFile([&] { loadRandomSketch(withMeta("degree", "4"), 64, 16); }, "unexpected tensor \"g1_1a\"");
    expectBadFile([&] { loadRandomSketch(withMeta("sketch_size", nullptr), 64, 16); }, "lacks \"sketch_size\"");
    expectBadFile([&] { loadRandomSketch(withMeta("sketch_size", "0"), 64, 0); }, "sketch_size is 0");
    expectBadFile([&] { loadRandomSketch(withMeta("sketch_size", "99999999999"), 64, 0); }, "non-negative integer");
    expectBadFile([&] { loadRandomSketch(withMeta("sketch_size", "8"), 64, 0); }, "expected [64, 8]");
    expectBadFile([&] { loadRandomSketch(withMeta("scaling", nullptr), 64, 16); }, "lacks \"scaling\"");
    expectBadFile([&] { loadRandomSketch(withMeta("scaling", "biased"), 64, 16); }, "\"scaling\" is \"biased\"");
    EXPECT_EQ(codeOf([&] { loadRandomSketch(good, 0, 16); }), PSK_ERROR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------------------------
// Learned sketch files
// ---------------------------------------------------------------------------------------------

LearnedSketchWeights makeLearned(uint32_t h, uint32_t r) {
    LearnedSketchWeights w;
    w.headDim = h;
    w.sketchSize = r;
    uint32_t stream = 1;
    for (int branch = 0; branch < 2; ++branch) {
        for (int level = 0; level < 2; ++level) {
            LearnedFeedForward& ff = w.ff[branch][level];
            ff.inDim = level == 0 ? h : r;
            gaussianMatrix(11, stream++, 1, ff.inDim, ff.lnScale);
            gaussianMatrix(11, stream++, 1, ff.inDim, ff.lnBias);
            gaussianMatrix(11, stream++, ff.inDim, 8 * r, ff.dense1);
            gaussianMatrix(11, stream++, 8 * r, r, ff.dense2);
        }
    }
    return w;
}

TEST(LearnedSketchFile, RoundTrip) {
    const LearnedSketchWeights w = makeLearned(64, 16);
    const SafeTensors file = reparse(learnedSketchToSafeTensors(w));
    EXPECT_EQ(file.tensors.size(), 16u);
    EXPECT_EQ(file.tensors.at("f1.0.dense1").shape, (std::vector<uint32_t>{64, 128}));
    EXPECT_EQ(file.tensors.at("f2.1.dense1").shape, (std::vector<uint32_t>{16, 128}));
    EXPECT_EQ(file.tensors.at("f2.1.dense2").shape, (std::vector<uint32_t>{128, 16}));
    EXPECT_EQ(file.tensors.at("f1.1.ln.scale").shape, (std::vector<uint32_t>{16}));
    EXPECT_EQ(file.tensors.at("f2.0.ln.bias").shape, (std::vector<uint32_t>{64}));
    for (const uint32_t r : {0u, 16u}) {
        const LearnedSketchWeights back = loadLearnedSketch(file, 64, r);
        EXPECT_EQ(back.degree, 4u);
        EXPECT_EQ(back.headDim, 64u);
        EXPECT_EQ(back.sketchSize, 16u);
        for (int branch = 0; branch < 2; ++branch) {
            for (int level = 0; level < 2; ++level) {
                const LearnedFeedForward& a = w.ff[branch][level];
                const LearnedFeedForward& b = back.ff[branch][level];
                EXPECT_EQ(b.inDim, level == 0 ? 64u : 16u);
                EXPECT_EQ(a.lnScale, b.lnScale);
                EXPECT_EQ(a.lnBias, b.lnBias);
                EXPECT_EQ(a.dense1, b.dense1);
                EXPECT_EQ(a.dense2, b.dense2);
            }
        }
    }
}

TEST(LearnedSketchFile, RejectsMismatches) {
    const SafeTensors good = learnedSketchToSafeTensors(makeLearned(32, 8));
    ASSERT_NO_THROW(loadLearnedSketch(good, 32, 8));
    {
        SafeTensors f = good;
        f.tensors.erase("f2.1.dense2");
        expectBadFile([&] { loadLearnedSketch(f, 32, 8); }, "missing tensor \"f2.1.dense2\"");
    }
    {
        SafeTensors f = good;
        f.tensors["f1.0.dense1"] = Tensor{{32, 8}, std::vector<float>(256, 0.0f)};
        expectBadFile([&] { loadLearnedSketch(f, 32, 8); }, "\"f1.0.dense1\" has shape [32, 8], expected [32, 64]");
    }
    {
        SafeTensors f = good;
        f.tensors["f1.1.ln.scale"] = Tensor{{32}, std::vector<float>(32, 1.0f)};
        expectBadFile([&] { loadLearnedSketch(f, 32, 8); }, "\"f1.1.ln.scale\" has shape [32], expected [8]");
    }
    {
        SafeTensors f = good;
        f.tensors["f3.0.ln.bias"] = Tensor{{32}, std::vector<float>(32, 1.0f)};
        expectBadFile([&] { loadLearnedSketch(f, 32, 8); }, "unexpected tensor \"f3.0.ln.bias\"");
    }
    {
        SafeTensors f = good;
        f.tensors["f2.0.ln.bias"].data[3] = std::numeric_limits<float>::infinity();
        expectBadFile([&] { loadLearnedSketch(f, 32, 8); }, "non-finite");
    }
    expectBadFile([&] { loadLearnedSketch(good, 64, 8); }, "expected [64]");
    expectBadFile([&] { loadLearnedSketch(good, 32, 16); }, "sketch_size 8, but sketch size 16");
    SafeTensors f = good;
    f.metadata["kind"] = "random";
    expectBadFile([&] { loadLearnedSketch(f, 32, 8); }, "\"kind\" is \"random\"");
    f = good;
    f.metadata["degree"] = "8";
    expectBadFile([&] { loadLearnedSketch(f, 32, 8); }, "a learned sketch has degree 4");
    f = good;
    f.metadata.erase("sketch_size");
    expectBadFile([&] { loadLearnedSketch(f, 32, 8); }, "lacks \"sketch_size\"");
    f = good;
    f.metadata["scaling"] = "whatever";
    expectBadFile([&] { loadLearnedSketch(f, 32, 8); }, "\"scaling\" is \"whatever\"");
    f.metadata["scaling"] = "reference";
    EXPECT_NO_THROW(loadLearnedSketch(f, 32, 8));
    // A random sketch file is not a learned one.
    expectBadFile([&] { loadLearnedSketch(randomSketchToSafeTensors(generateRandomSketch(1, 4, 32, 8)), 32, 8); },
                  "\"kind\" is \"random\"");
}

TEST(SafeTensors, ReadsOnlyTheTensorsUnderAPrefix) {
    // A model file: two layers' learned sketches and q/k LayerNorms under "layers.{l}.attn.", and
    // a tensor of another kind (an embedding) that no prefix reads.
    SafeTensors model;
    model.metadata = learnedSketchToSafeTensors(makeLearned(32, 8)).metadata;
    model.metadata["format"] = "polysketch-tinylm";
    std::vector<LearnedSketchWeights> layers = {makeLearned(32, 8), makeLearned(32, 8)};
    layers[1].ff[0][0].dense1[5] += 1.0f;  // the layers differ
    for (size_t l = 0; l < layers.size(); ++l) {
        const std::string prefix = "layers." + std::to_string(l) + ".attn.";
        for (const auto& [name, t] : learnedSketchToSafeTensors(layers[l]).tensors) model.tensors[prefix + name] = t;
        model.tensors[prefix + "ln.scale"] = Tensor{{32}, std::vector<float>(32, 1.5f)};
        model.tensors[prefix + "ln.bias"] = Tensor{{32}, std::vector<float>(32, 0.25f)};
        model.tensors[prefix + "wo"] = Tensor{{4, 4}, std::vector<float>(16, 1.0f)};  // another weight of the layer
    }
    model.tensors["tok_emb"] = Tensor{{7, 32}, std::vector<float>(7 * 32, 0.5f)};
    const std::string path = tempPath("model.safetensors");
    writeSafeTensors(path, model);

    for (size_t l = 0; l < layers.size(); ++l) {
        const SafeTensors view = readSafeTensors(path, "layers." + std::to_string(l) + ".attn.");
        EXPECT_EQ(view.tensors.size(), 19u);  // 16 sketch tensors, the LayerNorm pair and wo, prefix removed
        EXPECT_EQ(view.tensors.count("tok_emb"), 0u);
        EXPECT_EQ(view.metadata.at("format"), "polysketch-tinylm");
        // Side by side, each loader rejects the other's tensors until given its own part.
        expectBadFile([&] { loadLearnedSketch(view, 32, 8); }, "unexpected tensor \"ln.bias\"");
        expectBadFile([&] { loadQkNorm(view, 32); }, "unexpected tensor \"f1.0.dense1\"");
        EXPECT_TRUE(isSketchTensorName("g1_0a") && isSketchTensorName("g12_3b") && isSketchTensorName("f2.1.dense2"));
        EXPECT_FALSE(isSketchTensorName("g1_0") || isSketchTensorName("g_0a") || isSketchTensorName("g1_0ab") ||
                     isSketchTensorName("wo") || isSketchTensorName("ln.scale"));
        SafeTensors sketchPart = view, normPart = view;
        keepLayerPart(sketchPart, false);
        keepLayerPart(normPart, true);
        EXPECT_EQ(sketchPart.tensors.size(), 16u);
        EXPECT_EQ(normPart.tensors.size(), 2u);
        const LearnedSketchWeights back = loadLearnedSketch(sketchPart, 32, 8);
        EXPECT_EQ(back.ff[0][0].dense1, layers[l].ff[0][0].dense1);
        EXPECT_EQ(loadQkNorm(normPart, 32).bias, std::vector<float>(32, 0.25f));
    }
    // Without a prefix the file is not a sketch file; under an absent prefix nothing is read.
    expectBadFile([&] { loadLearnedSketch(readSafeTensors(path), 32, 8); }, "missing tensor");
    EXPECT_TRUE(readSafeTensors(path, "layers.9.attn.").tensors.empty());
    expectBadFile([&] { loadLearnedSketch(readSafeTensors(path, "layers.9.attn."), 32, 8); }, "missing tensor \"f1.0.ln.scale\"");
    std::remove(path.c_str());
}

}  // namespace
}  // namespace psk
