// psk run end to end: random q, k, v written as .npy files, the psk binary run on them, its output
// .npy compared with the float64 reference; and every kind of bad input against its one-line
// message, a non-zero exit and no output file. Also the .npy and JSON readers on their own.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "json.hpp"
#include "npy.hpp"
#include "reference/reference.hpp"
#include "reference/storage_types.hpp"
#include "support/psk_cli.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::Outcome;
using psk::test::runPsk;
using psk::test::TempDir;

// ------------------------------------------------------------------------------------------------
// The .npy reader and writer (no device)
// ------------------------------------------------------------------------------------------------

std::vector<uint8_t> npyBytes(int major, const std::string& header, size_t dataBytes, uint8_t fill = 0) {
    std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(major), 0};
    const uint32_t len = uint32_t(header.size());
    b.push_back(uint8_t(len));
    b.push_back(uint8_t(len >> 8));
    if (major >= 2) {
        b.push_back(uint8_t(len >> 16));
        b.push_back(uint8_t(len >> 24));
    }
    b.insert(b.end(), header.begin(), header.end());
    b.insert(b.end(), dataBytes, fill);
    return b;
}

std::string parseError(const std::vector<uint8_t>& bytes) {
    try {
        psk::npy::parse(bytes.data(), bytes.size());
    } catch (const psk::npy::Error& e) {
        return e.what();
    }
    return "(parsed)";
}

TEST(Npy, RoundTripFloat32AndFloat16) {
    const std::vector<float> values = {1.0f, -2.5f, 3.14159f, 0.0f, 65504.0f, 1e-6f};
    for (auto dtype : {psk::npy::DType::Float32, psk::npy::DType::Float16}) {
        const std::vector<uint8_t> raw = [&] {
            std::vector<uint8_t> r;
            for (float v : values) {
                if (dtype == psk::npy::DType::Float32) {
                    uint8_t b[4];
                    std::memcpy(b, &v, 4);
                    r.insert(r.end(), b, b + 4);
                } else {
                    const uint16_t h = psk::npy::floatToHalf(v);
                    r.push_back(uint8_t(h));
                    r.push_back(uint8_t(h >> 8));
                }
            }
            return r;
        }();
        const auto file = psk::npy::serialize({2, 3}, dtype, raw.data(), raw.size());
        EXPECT_EQ((file.size() - raw.size()) % 64, 0u) << "data must start at a multiple of 64";
        const psk::npy::Array a = psk::npy::parse(file.data(), file.size());
        EXPECT_EQ(a.shape, (std::vector<uint64_t>{2, 3}));
        EXPECT_EQ(a.dtype, dtype);
        const auto back = a.toFloat();
        ASSERT_EQ(back.size(), values.size());
        for (size_t i = 0; i < values.size(); ++i) {
            const float want = dtype == psk::npy::DType::Float32 ? values[i] : psk::npy::halfToFloat(psk::npy::floatToHalf(values[i]));
            EXPECT_EQ(back[i], want) << i;
        }
    }
}

TEST(Npy, EmptyArraysReadAndWrite) {
    // No element: the data pointers of the empty vectors are null, and copying zero bytes from or to
    // them must not reach memcpy (undefined behaviour, reported by -fsanitize=undefined).
    for (auto dtype : {psk::npy::DType::Float32, psk::npy::DType::Float16}) {
        for (const std::vector<uint64_t>& shape : {std::vector<uint64_t>{0}, std::vector<uint64_t>{2, 0, 3}, std::vector<uint64_t>{1, 2, 0, 16}}) {
            TempDir dir;
            psk::npy::write(dir / "e.npy", shape, {}, dtype);
            const psk::npy::Array a = psk::npy::read(dir / "e.npy");
            EXPECT_EQ(a.shape, shape);
            EXPECT_EQ(a.dtype, dtype);
            EXPECT_EQ(a.count(), 0u);
            EXPECT_TRUE(a.data.empty());
            EXPECT_TRUE(a.toFloat().empty());
            const std::vector<uint8_t> file = psk::npy::serialize(shape, dtype, nullptr, 0);
            EXPECT_EQ(psk::npy::parse(file.data(), file.size()).shape, shape);
        }
    }
}

TEST(Npy, HeaderVariantsNumPyWrites) {
    // Version 2.0 and 3.0 headers, double quotes, no trailing comma, keys in another order, scalars.
    auto ok = [](int major, const std::string& header, size_t bytes) {
        const auto b = npyBytes(major, header, bytes);
        return psk::npy::parse(b.data(), b.size());
    };
    EXPECT_EQ(ok(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", 12).shape, (std::vector<uint64_t>{3}));
    EXPECT_EQ(ok(3, "{\"shape\": (1, 2), \"fortran_order\": False, \"descr\": \"<f2\"}  \n", 4).shape, (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': ()}\n", 4).count(), 1u);
    EXPECT_EQ(ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5)}\n", 0).count(), 0u);
}

TEST(Npy, RejectsWithOneLineReasons) {
    const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n";
    struct Case {
        std::vector<uint8_t> bytes;
        const char* expect;
    };
    std::vector<uint8_t> badMagic = npyBytes(1, good, 8);
    badMagic[1] = 'X';
    std::vector<uint8_t> badVersion = npyBytes(1, good, 8);
    badVersion[6] = 4;
    const Case cases[] = {
        {{}, "too short"},
        {badMagic, "bad magic"},
        {badVersion, "unsupported .npy format version 4.0"},
        {npyBytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n", 16), "dtype '<f8' is not supported"},
        {npyBytes(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }\n", 8), "dtype '<i4' is not supported"},
        {npyBytes(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", 8), "big-endian"},
        {npyBytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }\n", 8), "Fortran-order"},
        {npyBytes(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n", 8), "structured dtypes"},
        {npyBytes(1, good, 7), "truncated data: the shape (2,) needs 8 bytes, the file has 7"},
        {npyBytes(1, good, 9), "1 unexpected bytes after the data"},
        {npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }\n", 8), "must be written (n,)"},
        {npyBytes(1, "{'descr': '<f4', 'shape': (2,), }\n", 8), "lacks 'fortran_order'"},
        {npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n", 8), "unexpected key 'x'"},
        {npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }\n", 8), "non-negative integers"},
        {npyBytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk\n", 8), "text after the dictionary"},
    };
    for (const Case& c : cases) {
        const std::string msg = parseError(c.bytes);
        EXPECT_NE(msg.find(c.expect), std::string::npos) << "got: " << msg << "\nwant: " << c.expect;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    // A header that claims more bytes than the file has.
    std::vector<uint8_t> shortHeader = npyBytes(1, good, 0);
    shortHeader[8] = 0xFF;
    EXPECT_NE(parseError(shortHeader).find("truncated header"), std::string::npos);
}

TEST(Npy, HalfConversionIsExactAndRoundsToNearestEven) {
    // Every finite half widens exactly and narrows back to itself.
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if ((h & 0x7C00) == 0x7C00) continue;  // inf / NaN
        const float f = psk::npy::halfToFloat(uint16_t(h));
        ASSERT_EQ(psk::npy::floatToHalf(f), h) << std::hex << h;
    }
    EXPECT_EQ(psk::npy::halfToFloat(0x3C00), 1.0f);
    EXPECT_EQ(psk::npy::halfToFloat(0x0001), std::ldexp(1.0f, -24));
    // Ties: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 and goes to the even 1.
    EXPECT_EQ(psk::npy::floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
    EXPECT_EQ(psk::npy::floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
    EXPECT_EQ(psk::npy::floatToHalf(std::ldexp(1.0f, -25)), 0x0000);
    EXPECT_EQ(psk::npy::floatToHalf(std::ldexp(1.5f, -25)), 0x0001);
    EXPECT_EQ(psk::npy::floatToHalf(65519.0f), 0x7BFF);
    EXPECT_EQ(psk::npy::floatToHalf(65520.0f), 0x7C00);
    EXPECT_EQ(psk::npy::floatToHalf(-INFINITY), 0xFC00);
    EXPECT_TRUE(std::isnan(psk::npy::halfToFloat(psk::npy::floatToHalf(NAN))));
}

TEST(Json, ParsesAndQuotes) {
    const auto v = psk::json::parse(R"( {"a": [1, -2.5e3, true, null], "s": "x\"\u00e9\ud83d\ude00", "o": {}} )");
    ASSERT_EQ(v.type, psk::json::Value::Type::Object);
    const auto* a = v.find("a");
    ASSERT_TRUE(a && a->array.size() == 4);
    EXPECT_EQ(a->array[1].number, -2500);
    EXPECT_TRUE(a->array[2].boolean);
    EXPECT_TRUE(a->array[3].isNull());
    EXPECT_EQ(v.str("s"), "x\"\xC3\xA9\xF0\x9F\x98\x80");
    EXPECT_EQ(psk::json::parse(psk::json::quote("a\"b\\c\n\x01")).string, "a\"b\\c\n\x01");
    for (const char* bad : {"{", "[1,]", "{\"a\" 1}", "01", "\"\\x\"", "1 2", "nul", "\"\x01\""})
        EXPECT_THROW(psk::json::parse(bad), psk::json::ParseError) << bad;
    EXPECT_EQ(psk::json::number(NAN), "null");
}

// ------------------------------------------------------------------------------------------------
// psk run against the float64 reference (device)
// ------------------------------------------------------------------------------------------------

struct RunCase {
    const char* name;
    const char* kind;      // softmax | poly   (polysketch: add a reference branch in reference())
    int degree;            // 0: the default (4) and no --degree option
    bool causal;
    const char* fileType;  // f32 | f16: the .npy dtype of the inputs
    const char* dtype;     // f32 | f16 | bf16: the storage type on the device
    const char* files;     // --layout, the files' layout: bhnd ([B, H, n, d]) | bnhd ([B, n, H, d])
    const char* device;    // --device-layout: bhnd | bnhd, or "" for none (the default: the files' layout)
    int B, Hq, Hkv, n, h, dv;
    double scale;          // 0: the default and no --scale option
    double tolerance;      // max |got - ref| / max |ref|
    std::vector<std::string> extra = {};  // more psk run options (polysketch: --sketch-size ...)
};

std::ostream& operator<<(std::ostream& os, const RunCase& c) { return os << c.name; }

// [B, H, n, d] <-> [B, n, H, d], written out here independently of psk's own transposes.
std::vector<float> bhndToBnhd(const std::vector<float>& x, uint64_t B, uint64_t H, uint64_t n, uint64_t d) {
    std::vector<float> y(x.size());
    for (uint64_t b = 0; b < B; ++b)
        for (uint64_t hd = 0; hd < H; ++hd)
            for (uint64_t t = 0; t < n; ++t)
                for (uint64_t i = 0; i < d; ++i) y[((b * n + t) * H + hd) * d + i] = x[((b * H + hd) * n + t) * d + i];
    return y;
}

std::vector<float> bnhdToBhnd(const std::vector<float>& y, uint64_t B, uint64_t H, uint64_t n, uint64_t d) {
    std::vector<float> x(y.size());
    for (uint64_t b = 0; b < B; ++b)
        for (uint64_t hd = 0; hd < H; ++hd)
            for (uint64_t t = 0; t < n; ++t)
                for (uint64_t i = 0; i < d; ++i) x[((b * H + hd) * n + t) * d + i] = y[((b * n + t) * H + hd) * d + i];
    return x;
}

// The shape of a [B, H, n, d] tensor as a file in `layout`.
std::vector<uint64_t> fileShape(const std::string& layout, uint64_t B, uint64_t H, uint64_t n, uint64_t d) {
    return layout == "bnhd" ? std::vector<uint64_t>{B, n, H, d} : std::vector<uint64_t>{B, H, n, d};
}

PskDataType typeOf(const std::string& t) {
    return t == "f16" ? PSK_DATA_TYPE_FLOAT16 : t == "bf16" ? PSK_DATA_TYPE_BFLOAT16 : PSK_DATA_TYPE_FLOAT32;
}

// The float64 reference of the case, on exactly the values the device sees.
std::vector<double> reference(const RunCase& c, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v) {
    const psk::ref::Shape shape{c.B, c.Hq, c.Hkv, c.n, c.h, c.dv};
    const std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
    std::vector<double> out;
    const std::string kind = c.kind;
    if (kind == "softmax") {
        const double s = c.scale ? c.scale : 1.0 / std::sqrt(double(c.h));
        psk::ref::softmaxAttention(shape, qd, kd, vd, s, c.causal, out);
    } else if (kind == "poly") {
        psk::ref::polynomialAttention(shape, qd, kd, vd, c.scale ? c.scale : 1.0, c.degree ? c.degree : 4, c.causal, out);
    } else {
        ADD_FAILURE() << "no reference for kind " << kind;
    }
    return out;
}

class PskRunReference : public psk::test::ContextTest, public ::testing::WithParamInterface<RunCase> {
protected:
    void SetUp() override {
        ContextTest::SetUp();  // fails when PSK_REQUIRE_VALIDATION=1 and the layer is missing
        setenv("PSK_VALIDATION", "1", 1);  // psk prints every validation message as "psk: validation:"
    }
};

TEST_P(PskRunReference, MatchesFloat64Reference) {
    const RunCase& c = GetParam();
    TempDir dir;
    const auto fileType = std::string(c.fileType) == "f16" ? psk::npy::DType::Float16 : psk::npy::DType::Float32;
    const uint64_t B = c.B, Hq = c.Hq, Hkv = c.Hkv, n = c.n, h = c.h, dv = c.dv;
    const std::string files = c.files;
    // Random [B, H, n, d] tensors, written in the files' layout.
    auto write = [&](const char* name, uint64_t H, uint64_t d, uint64_t seed) {
        std::vector<float> x = psk::test::randomNormal(B * H * n * d, seed);
        if (files == "bnhd") x = bhndToBnhd(x, B, H, n, d);
        psk::npy::write(dir / name, fileShape(files, B, H, n, d), x, fileType);
    };
    write("q.npy", Hq, h, 11);
    write("k.npy", Hkv, h, 12);
    write("v.npy", Hkv, dv, 13);

    std::vector<std::string> args = {"run",     "--kind",   c.kind,   "--q",      dir / "q.npy", "--k",
                                     dir / "k.npy", "--v", dir / "v.npy", "--out", dir / "o.npy", "--dtype",
                                     c.dtype,   "--layout", c.files,  c.causal ? "--causal" : "--full"};
    if (*c.device) args.insert(args.end(), {"--device-layout", c.device});
    if (c.degree) args.insert(args.end(), {"--degree", std::to_string(c.degree)});
    if (c.scale) args.insert(args.end(), {"--scale", std::to_string(c.scale)});
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const Outcome r = runPsk(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("validation:"), std::string::npos) << r.err;

    // What the device saw: the file's values (float16 files are already rounded), rounded to the
    // storage type the way psk run converts them; back in [B, H, n, d] order for the reference.
    const PskDataType t = typeOf(c.dtype);
    auto read = [&](const char* name, uint64_t H, uint64_t d) {
        std::vector<float> x = psk::npy::read(dir / name).toFloat();
        if (files == "bnhd") x = bnhdToBhnd(x, B, H, n, d);
        return psk::storage::quantize(x, t);
    };
    const auto q = read("q.npy", Hq, h), k = read("k.npy", Hkv, h), v = read("v.npy", Hkv, dv);
    const psk::npy::Array o = psk::npy::read(dir / "o.npy");
    EXPECT_EQ(o.dtype, psk::npy::DType::Float32);
    ASSERT_EQ(o.shape, fileShape(files, B, Hq, n, dv)) << "the output is written in the inputs' layout";
    const std::vector<float> got = files == "bnhd" ? bnhdToBhnd(o.toFloat(), B, Hq, n, dv) : o.toFloat();
    const double err = psk::test::relativeMaxError(got, reference(c, q, k, v));
    EXPECT_LE(err, c.tolerance);
    EXPECT_EQ(dir.files(), (std::vector<std::string>{"k.npy", "o.npy", "q.npy", "v.npy"})) << "no temporary file may remain";
}

// Shapes are odd on purpose (n not a multiple of any tile, dv != h, grouped-query heads). The
// "bnhddevice" cases keep [B, H, n, d] files and put the tensors on the device as [B, n, H, d] (a
// host transpose each way); the "bnhdfiles" cases hold [B, n, H, d] files (--layout bnhd), with
// B >= 2, H >= 2 and n != H so that reading them in the other order cannot match the reference,
// and Hq == Hkv in some so that the other order is not even rejected as a shape mismatch.
INSTANTIATE_TEST_SUITE_P(
    Kinds, PskRunReference,
    ::testing::Values(
        RunCase{"softmax_f32_bhnd_causal_gqa", "softmax", 0, true, "f32", "f32", "bhnd", "", 2, 4, 2, 37, 32, 24, 0, 2e-5},
        RunCase{"poly_f32_bnhddevice_full_gqa", "poly", 0, false, "f32", "f32", "bhnd", "bnhd", 2, 4, 2, 37, 32, 24, 0, 2e-5},
        RunCase{"softmax_f16file_bnhddevice_full", "softmax", 0, false, "f16", "f32", "bhnd", "bnhd", 1, 2, 2, 50, 16, 16, 0, 2e-5},
        RunCase{"poly_p2_f16file_f16storage_causal_gqa", "poly", 2, true, "f16", "f16", "bhnd", "", 1, 3, 1, 29, 48, 40, 0, 2e-3},
        RunCase{"softmax_bf16storage_bnhddevice_scale", "softmax", 0, true, "f32", "bf16", "bhnd", "bnhd", 1, 2, 1, 33, 16, 16, 0.25, 1.5e-2},
        RunCase{"poly_p8_scale_causal", "poly", 8, true, "f32", "f32", "bhnd", "", 1, 2, 2, 45, 32, 32, 0.3, 1e-4},
        // [B, n, H, d] files: the device in the same layout (the default, and given), or in bhnd.
        RunCase{"softmax_f32_bnhdfiles_causal_gqa", "softmax", 0, true, "f32", "f32", "bnhd", "", 2, 4, 2, 37, 32, 24, 0, 2e-5},
        RunCase{"softmax_f32_bnhdfiles_bhnddevice_causal_gqa", "softmax", 0, true, "f32", "f32", "bnhd", "bhnd", 2, 4, 2, 37, 32, 24, 0, 2e-5},
        RunCase{"poly_f32_bnhdfiles_full", "poly", 0, false, "f32", "f32", "bnhd", "", 2, 3, 3, 21, 32, 16, 0, 2e-5},
        RunCase{"poly_f32_bnhdfiles_bhnddevice_full", "poly", 0, false, "f32", "f32", "bnhd", "bhnd", 2, 3, 3, 21, 32, 16, 0, 2e-5},
        RunCase{"softmax_f16file_bnhdfiles_bnhddevice_full", "softmax", 0, false, "f16", "f32", "bnhd", "bnhd", 3, 2, 2, 19, 16, 24, 0, 2e-5},
        // [B, H, n, d] files on a [B, n, H, d] device, B >= 2 and n != H.
        RunCase{"softmax_f32_bhndfiles_bnhddevice_causal", "softmax", 0, true, "f32", "f32", "bhnd", "bnhd", 2, 3, 3, 21, 32, 16, 0, 2e-5}
        // Polysketch: add cases with kind "polysketch", `extra` options (--sketch-size, --block-size,
        // --seed, --local-exact) and a matching branch in reference().
        ),
    [](const ::testing::TestParamInfo<RunCase>& i) { return std::string(i.param.name); });

// The same [B, n, H, d] files (--layout bnhd) on either device layout: the same answer, written
// [B, n, H, dv] each time, within float32 rounding of each other and of the reference.
class PskRunFileLayout : public psk::test::ContextTest {
protected:
    void SetUp() override {
        ContextTest::SetUp();
        setenv("PSK_VALIDATION", "1", 1);
    }
};

TEST_F(PskRunFileLayout, BnhdFilesGiveTheSameAnswerOnEitherDeviceLayout) {
    TempDir dir;
    const uint64_t B = 2, H = 3, n = 26, h = 32, dv = 24;  // Hq == Hkv: the other order is a valid shape too
    const auto q = psk::test::randomNormal(B * H * n * h, 21), k = psk::test::randomNormal(B * H * n * h, 22),
               v = psk::test::randomNormal(B * H * n * dv, 23);
    psk::npy::write(dir / "q.npy", {B, n, H, h}, bhndToBnhd(q, B, H, n, h));
    psk::npy::write(dir / "k.npy", {B, n, H, h}, bhndToBnhd(k, B, H, n, h));
    psk::npy::write(dir / "v.npy", {B, n, H, dv}, bhndToBnhd(v, B, H, n, dv));
    const psk::ref::Shape shape{int(B), int(H), int(H), int(n), int(h), int(dv)};
    std::vector<double> ref;
    psk::ref::softmaxAttention(shape, std::vector<double>(q.begin(), q.end()), std::vector<double>(k.begin(), k.end()),
                               std::vector<double>(v.begin(), v.end()), 1.0 / std::sqrt(double(h)), true, ref);

    std::vector<std::vector<float>> outputs;
    for (const std::vector<std::string>& device : {std::vector<std::string>{}, {"--device-layout", "bnhd"}, {"--device-layout", "bhnd"}}) {
        const std::string out = dir / ("o" + std::to_string(outputs.size()) + ".npy");
        std::vector<std::string> args = {"run", "--kind", "softmax", "--q", dir / "q.npy", "--k", dir / "k.npy", "--v", dir / "v.npy",
                                         "--out", out, "--layout", "bnhd"};
        args.insert(args.end(), device.begin(), device.end());
        SCOPED_TRACE(device.empty() ? "default device layout" : device[1]);
        const Outcome r = runPsk(args);
        ASSERT_EQ(r.code, 0) << r.err;
        EXPECT_EQ(r.err.find("validation:"), std::string::npos) << r.err;
        const psk::npy::Array o = psk::npy::read(out);
        ASSERT_EQ(o.shape, (std::vector<uint64_t>{B, n, H, dv}));
        outputs.push_back(bnhdToBhnd(o.toFloat(), B, H, n, dv));
        EXPECT_LE(psk::test::relativeMaxError(outputs.back(), ref), 2e-5);
    }
    for (size_t i = 1; i < outputs.size(); ++i) {
        const std::vector<double> first(outputs[0].begin(), outputs[0].end());
        EXPECT_LE(psk::test::relativeMaxError(outputs[i], first), 2e-5) << "output " << i << " differs from the default's";
    }
}

TEST_F(PskRunFileLayout, CuSeqlensRunsEachPackedSequenceAlone) {
    // Three sequences (5, 0 and 19 tokens) packed into BNHD files of n = 24: --cu-seqlens gives
    // each one's rows as the reference computes it alone; without it the rows differ.
    TempDir dir;
    const uint64_t H = 2, h = 16, dv = 16, n = 24;
    const std::vector<uint32_t> cu = {0, 5, 5, 24};
    const auto q = psk::test::randomNormal(H * n * h, 31), k = psk::test::randomNormal(H * n * h, 32),
               v = psk::test::randomNormal(H * n * dv, 33);  // BHND order, B = 1
    psk::npy::write(dir / "q.npy", {1, n, H, h}, bhndToBnhd(q, 1, H, n, h));
    psk::npy::write(dir / "k.npy", {1, n, H, h}, bhndToBnhd(k, 1, H, n, h));
    psk::npy::write(dir / "v.npy", {1, n, H, dv}, bhndToBnhd(v, 1, H, n, dv));
    std::vector<double> want(H * n * dv, 0.0);  // BHND
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
        const int len = int(cu[s + 1] - cu[s]);
        if (!len) continue;
        std::vector<double> qs, ks, vs, out;
        for (uint64_t hd = 0; hd < H; ++hd)
            for (int t = 0; t < len; ++t) {
                const size_t row = hd * n + cu[s] + t;
                qs.insert(qs.end(), q.begin() + row * h, q.begin() + (row + 1) * h);
                ks.insert(ks.end(), k.begin() + row * h, k.begin() + (row + 1) * h);
                vs.insert(vs.end(), v.begin() + row * dv, v.begin() + (row + 1) * dv);
            }
        psk::ref::softmaxAttention(psk::ref::Shape{1, int(H), int(H), len, int(h), int(dv)}, qs, ks, vs, 1.0 / std::sqrt(double(h)), true, out);
        for (uint64_t hd = 0; hd < H; ++hd)
            for (int t = 0; t < len; ++t)
                std::copy(out.begin() + (hd * len + t) * dv, out.begin() + (hd * len + t + 1) * dv, want.begin() + (hd * n + cu[s] + t) * dv);
    }
    auto run = [&](const std::vector<std::string>& extra) {
        const std::string out = dir / "o.npy";
        std::vector<std::string> args = {"run", "--kind", "softmax", "--q", dir / "q.npy", "--k", dir / "k.npy", "--v", dir / "v.npy",
                                         "--out", out, "--layout", "bnhd"};
        args.insert(args.end(), extra.begin(), extra.end());
        const Outcome r = runPsk(args);
        EXPECT_EQ(r.code, 0) << r.err;
        return r.code == 0 ? bnhdToBhnd(psk::npy::read(out).toFloat(), 1, H, n, dv) : std::vector<float>{};
    };
    EXPECT_LE(psk::test::relativeMaxError(run({"--cu-seqlens", "0,5,5,24"}), want), 2e-5);
    EXPECT_GT(psk::test::relativeMaxError(run({}), want), 1e-3);  // the control: one causal sequence of 24
    // Offsets that do not fit the files: exit 2, one line.
    for (const char* bad : {"0,5,23", "1,5,24", "0,9,5,24", "0"}) {
        const Outcome r = runPsk({"run", "--kind", "softmax", "--q", dir / "q.npy", "--k", dir / "k.npy", "--v", dir / "v.npy", "--out",
                                  dir / "bad.npy", "--layout", "bnhd", "--cu-seqlens", bad});
        EXPECT_EQ(r.code, 2) << bad << ": " << r.err;
        EXPECT_NE(r.err.find("cu-seqlens"), std::string::npos) << r.err;
    }
}

// ------------------------------------------------------------------------------------------------
// Bad inputs: a one-line message naming the problem, a non-zero exit, no output file
// ------------------------------------------------------------------------------------------------

struct BadCase {
    const char* name;
    const char* expect;                                         // a substring of the one stderr line
    std::function<void(const TempDir&, std::vector<std::string>&)> setup;  // edits files or arguments
};

std::ostream& operator<<(std::ostream& os, const BadCase& c) { return os << c.name; }

void writeValid(const TempDir& d, uint64_t Hq = 2, uint64_t Hkv = 2, uint64_t h = 16) {
    psk::npy::write(d / "q.npy", {1, Hq, 8, h}, psk::test::randomNormal(Hq * 8 * h, 1));
    psk::npy::write(d / "k.npy", {1, Hkv, 8, h}, psk::test::randomNormal(Hkv * 8 * h, 2));
    psk::npy::write(d / "v.npy", {1, Hkv, 8, h}, psk::test::randomNormal(Hkv * 8 * h, 3));
}

void writeRaw(const std::string& path, const std::vector<uint8_t>& bytes) { psk::npy::writeFile(path, bytes); }

void replaceArg(std::vector<std::string>& args, const std::string& option, const std::string& value) {
    const auto it = std::find(args.begin(), args.end(), option);
    ASSERT_NE(it, args.end());
    *(it + 1) = value;
}

class PskRunBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(PskRunBadInput, FailsWithOneLineAndNoOutput) {
    const BadCase& c = GetParam();
    TempDir dir;
    writeValid(dir);
    std::vector<std::string> args = {"run", "--kind", "softmax", "--q", dir / "q.npy", "--k", dir / "k.npy", "--v", dir / "v.npy",
                                     "--out", dir / "o.npy"};
    c.setup(dir, args);
    const auto before = dir.files();
    const Outcome r = runPsk(args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << "stderr: " << r.err << "want: " << c.expect;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    EXPECT_EQ(dir.files(), before) << "no output or temporary file may be written";
}

const std::string kGoodHeader = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 8, 16), }\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, PskRunBadInput,
    ::testing::Values(
        BadCase{"missing_file", "missing.npy: cannot open", [](const TempDir& d, auto& a) { replaceArg(a, "--q", d / "missing.npy"); }},
        BadCase{"bad_magic", "q.npy: not a .npy file (bad magic string)",
                [](const TempDir& d, auto&) { writeRaw(d / "q.npy", std::vector<uint8_t>(200, 'x')); }},
        BadCase{"wrong_dtype", "k.npy: dtype '<f8' is not supported",
                [](const TempDir& d, auto&) {
                    writeRaw(d / "k.npy", npyBytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2, 8, 16), }\n", 2048));
                }},
        BadCase{"big_endian", "v.npy: big-endian data ('>f4') is not supported",
                [](const TempDir& d, auto&) {
                    writeRaw(d / "v.npy", npyBytes(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1, 2, 8, 16), }\n", 1024));
                }},
        BadCase{"fortran_order", "q.npy: Fortran-order arrays are not supported",
                [](const TempDir& d, auto&) {
                    writeRaw(d / "q.npy", npyBytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2, 8, 16), }\n", 1024));
                }},
        BadCase{"truncated", "q.npy: truncated data", [](const TempDir& d, auto&) { writeRaw(d / "q.npy", npyBytes(1, kGoodHeader, 1000)); }},
        BadCase{"three_d", "q.npy: q must be a 4-D array [B, Hq, n, h], got 3-D shape (2, 8, 16)",
                [](const TempDir& d, auto&) { psk::npy::write(d / "q.npy", {2, 8, 16}, std::vector<float>(256, 1.0f)); }},
        BadCase{"head_count_mismatch", "head-count mismatch: q has 3 heads, k and v have 2",
                [](const TempDir& d, auto&) { psk::npy::write(d / "q.npy", {1, 3, 8, 16}, std::vector<float>(384, 1.0f)); }},
        BadCase{"kv_head_mismatch", "head-count mismatch: k has 2 heads, v has 1",
                [](const TempDir& d, auto&) { psk::npy::write(d / "v.npy", {1, 1, 8, 16}, std::vector<float>(128, 1.0f)); }},
        BadCase{"sequence_mismatch", "sequence lengths differ",
                [](const TempDir& d, auto&) { psk::npy::write(d / "k.npy", {1, 2, 9, 16}, std::vector<float>(288, 1.0f)); }},
        BadCase{"sketch_and_learned", "--seed, --sketch and --learned conflict",
                [](const TempDir& d, auto& a) {
                    replaceArg(a, "--kind", "polysketch");
                    a.insert(a.end(), {"--sketch", d / "s.safetensors", "--learned", d / "l.safetensors"});
                }},
        BadCase{"causal_and_full", "--causal and --full conflict", [](const TempDir&, auto& a) { a.insert(a.end(), {"--causal", "--full"}); }},
        BadCase{"local_exact_without_polysketch", "--local-exact applies only to --kind polysketch",
                [](const TempDir&, auto& a) { a.push_back("--local-exact"); }},
        BadCase{"local_exact_full", "--local-exact needs causal attention",
                [](const TempDir&, auto& a) {
                    replaceArg(a, "--kind", "polysketch");
                    a.insert(a.end(), {"--local-exact", "--full"});
                }},
        BadCase{"degree_3", "--degree must be 2, 4 or 8 (got '3')",
                [](const TempDir&, auto& a) {
                    replaceArg(a, "--kind", "poly");
                    a.insert(a.end(), {"--degree", "3"});
                }},
        BadCase{"degree_with_softmax", "--degree applies to poly and polysketch", [](const TempDir&, auto& a) { a.insert(a.end(), {"--degree", "4"}); }},
        BadCase{"bad_scale", "--scale needs a finite non-zero number", [](const TempDir&, auto& a) { a.insert(a.end(), {"--scale", "nan"}); }},
        BadCase{"unknown_option", "unknown option '--bogus'", [](const TempDir&, auto& a) { a.push_back("--bogus"); }},
        BadCase{"missing_kind", "--kind is required", [](const TempDir&, auto& a) { a.erase(a.begin() + 1, a.begin() + 3); }},
        BadCase{"missing_out", "--out is required", [](const TempDir&, auto& a) { a.erase(a.end() - 2, a.end()); }},
        // From the library (device): its code and its message.
        BadCase{"library_head_dim", "PSK_ERROR_INVALID_SHAPE: pskCreateAttention: headDim must be 16 to 256 (got 8)",
                [](const TempDir& d, auto&) { writeValid(d, 2, 2, 8); }},
        BadCase{"library_non_finite", "PSK_ERROR_NON_FINITE_INPUT",
                [](const TempDir& d, auto&) {
                    std::vector<float> q(256, 0.5f);
                    q[77] = NAN;
                    psk::npy::write(d / "q.npy", {1, 2, 8, 16}, q);
                }}),
    [](const ::testing::TestParamInfo<BadCase>& i) { return std::string(i.param.name); });

// ------------------------------------------------------------------------------------------------
// --scale must be finite and non-zero as the float the library receives: a bad value is a bad command
// line (exit 2), caught before any device is touched
// ------------------------------------------------------------------------------------------------

TEST(PskRunScale, OutOfFloatRangeExitsTwo) {
    for (const char* scale : {"1e39", "-1e39", "3.5e38", "1e-50", "-1e-46"}) {
        SCOPED_TRACE(scale);
        TempDir dir;
        writeValid(dir);
        const std::vector<std::string> args = {"run", "--kind", "softmax", "--q", dir / "q.npy", "--k", dir / "k.npy", "--v", dir / "v.npy",
                                               "--out", dir / "o.npy", "--scale", scale};
        const auto before = dir.files();
        const Outcome r = runPsk(args);
        EXPECT_EQ(r.code, 2) << r.err;
        EXPECT_NE(r.err.find("--scale"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find(scale), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
        EXPECT_EQ(dir.files(), before) << "no output file";
    }
    // The float range's edges are accepted: FLT_MAX and the smallest subnormal.
    for (const char* scale : {"3.4028234e38", "1.5e-45"}) {
        SCOPED_TRACE(scale);
        TempDir dir;
        writeValid(dir);
        const Outcome r = runPsk({"run", "--kind", "softmax", "--q", dir / "q.npy", "--k", dir / "k.npy", "--v", dir / "v.npy", "--out",
                                  dir / "o.npy", "--scale", scale});
        EXPECT_NE(r.code, 2) << r.err;
    }
}

// ------------------------------------------------------------------------------------------------
// --layout describes the files: q, k, v that do not fit together read in the declared layout exit 2
// (before any device is touched), one line, no output file
// ------------------------------------------------------------------------------------------------

struct LayoutCase {
    const char* name;
    const char* files;     // how the files are written: bhnd | bnhd
    const char* layout;    // --layout given, or "" for none (the default, bhnd)
    uint64_t Bk, Hq, Hkv, Hv;  // k's batch and the head counts (q and v have B = 2; n = 37)
    std::vector<const char*> expect;  // substrings of the one stderr line
};

std::ostream& operator<<(std::ostream& os, const LayoutCase& c) { return os << c.name; }

class PskRunLayoutMismatch : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(PskRunLayoutMismatch, ExitsTwoWithOneLineAndNoOutput) {
    const LayoutCase& c = GetParam();
    TempDir dir;
    const uint64_t B = 2, n = 37, h = 32, dv = 24;
    auto write = [&](const char* name, uint64_t b, uint64_t H, uint64_t d) {
        psk::npy::write(dir / name, fileShape(c.files, b, H, n, d), psk::test::randomNormal(b * H * n * d, 5));
    };
    write("q.npy", B, c.Hq, h);
    write("k.npy", c.Bk, c.Hkv, h);
    write("v.npy", B, c.Hv, dv);
    std::vector<std::string> args = {"run", "--kind", "softmax", "--q", dir / "q.npy", "--k", dir / "k.npy", "--v", dir / "v.npy",
                                     "--out", dir / "o.npy"};
    if (*c.layout) args.insert(args.end(), {"--layout", c.layout});
    const auto before = dir.files();
    const Outcome r = runPsk(args);
    EXPECT_EQ(r.code, 2) << r.err;
    for (const char* e : c.expect) EXPECT_NE(r.err.find(e), std::string::npos) << "stderr: " << r.err << "want: " << e;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    EXPECT_EQ(dir.files(), before) << "no output or temporary file may be written";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PskRunLayoutMismatch,
    ::testing::Values(
        // [B, H, n, d] files declared bnhd: q's "n" is 4, k's 2.
        LayoutCase{"bhnd_files_as_bnhd", "bhnd", "bnhd", 2, 4, 2, 2,
                   {"sequence lengths differ: q (2, 4, 37, 32), k (2, 2, 37, 32)", "--layout bnhd reads the files as [B, n, H, dim]",
                    "they fit --layout bhnd [B, H, n, dim]"}},
        // [B, n, H, d] files without --layout (bhnd): q's "n" is 4, k's 2.
        LayoutCase{"bnhd_files_as_default_bhnd", "bnhd", "", 2, 4, 2, 2,
                   {"sequence lengths differ: q (2, 37, 4, 32), k (2, 37, 2, 32)", "--layout bhnd reads the files as [B, H, n, dim]",
                    "they fit --layout bnhd [B, n, H, dim]"}},
        // [B, n, H, d] files declared bnhd that disagree in either layout.
        LayoutCase{"bnhd_batch_mismatch", "bnhd", "bnhd", 3, 2, 2, 2, {"batch sizes differ: q (2, 37, 2, 32), k (3, 37, 2, 32)"}},
        LayoutCase{"bnhd_kv_head_mismatch", "bnhd", "bnhd", 2, 4, 2, 1, {"head-count mismatch: k has 2 heads, v has 1", "--layout bnhd"}},
        LayoutCase{"bnhd_q_heads_not_multiple", "bnhd", "bnhd", 2, 3, 2, 2,
                   {"head-count mismatch: q has 3 heads, k and v have 2", "--layout bnhd reads the files as [B, n, H, dim]"}}),
    [](const ::testing::TestParamInfo<LayoutCase>& i) { return std::string(i.param.name); });

TEST(PskRunHelp, DescribesTheFilesLayoutAndTheDeviceLayout) {
    const Outcome r = runPsk({"run", "--help"});
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char* e : {"--layout L          the layout of the FILES", "--device-layout L", "[B, n, Hq, h]", "[B, n, Hq, dv]"})
        EXPECT_NE(r.out.find(e), std::string::npos) << e;
    const Outcome bad = runPsk({"run", "--kind", "softmax", "--q", "q", "--k", "k", "--v", "v", "--out", "o", "--device-layout", "nhbd"});
    EXPECT_EQ(bad.code, 2);
    EXPECT_NE(bad.err.find("--device-layout takes bhnd or bnhd (got 'nhbd')"), std::string::npos) << bad.err;
}

}  // namespace
