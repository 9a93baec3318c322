// psk conformance end to end: the psk binary runs the quick conformance sweep on the test device
// (lavapipe in CI) under the validation layer and must pass, with a JSON file that parses and lists
// every case; with its thresholds shrunk (--threshold-scale 1e-12) real float rounding must exceed
// them and the run must fail with exit status 1, so that the command is shown able to fail; bad
// command lines exit 2 without touching a device.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "json.hpp"
#include "reference/conformance_cases.hpp"
#include "support/psk_cli.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::Outcome;
using psk::test::runPsk;
using psk::test::TempDir;

class PskConformance : public psk::test::ContextTest {
protected:
    void SetUp() override {
        ContextTest::SetUp();  // fails when PSK_REQUIRE_VALIDATION=1 and the layer is missing
        setenv("PSK_VALIDATION", "1", 1);  // psk conformance fails on any validation message
    }
    /** --validation when the suite requires the layer: psk then refuses to run without it. */
    static std::vector<std::string> validationArgs() {
        const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
        return require && std::string(require) == "1" ? std::vector<std::string>{"--validation"} : std::vector<std::string>{};
    }
};

const psk::json::Value& member(const psk::json::Value& v, const char* key) {
    static const psk::json::Value none;
    const psk::json::Value* m = v.find(key);
    EXPECT_NE(m, nullptr) << "no member " << key;
    return m ? *m : none;
}

TEST_F(PskConformance, QuickSweepPassesAndWritesJson) {
    TempDir dir;
    std::vector<std::string> args = {"conformance", "--quick", "--json", dir / "c.json"};
    for (const std::string& a : validationArgs()) args.push_back(a);
    const Outcome r = runPsk(args);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(r.err.find("validation:"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("PASS: every case that ran is within its threshold"), std::string::npos) << r.out;

    const psk::json::Value doc = psk::json::parse(psk::test::readText(dir / "c.json"));
    EXPECT_EQ(doc.str("tool"), "psk conformance");
    EXPECT_EQ(doc.str("mode"), "quick");
    EXPECT_FALSE(doc.str("device").empty());
    EXPECT_FALSE(doc.str("driver").empty());
    if (!validationArgs().empty()) EXPECT_TRUE(doc.flag("validation_layer")) << "the run was not validated";
    const psk::json::Value& cases = member(doc, "cases");
    ASSERT_EQ(cases.type, psk::json::Value::Type::Array);
    // Every case that ran is within its threshold, and the thresholds are the suite's.
    std::set<std::string> kinds, storages, paths;
    size_t passed = 0, skipped = 0;
    for (const psk::json::Value& c : cases.array) {
        const std::string status = c.str("status"), kind = c.str("kind"), storage = c.str("storage");
        EXPECT_TRUE(status == "pass" || status == "skip") << c.str("name") << ": " << status << " " << c.str("note");
        if (status == "skip") {
            ++skipped;
            continue;
        }
        ++passed;
        kinds.insert(kind);
        storages.insert(storage);
        paths.insert(c.str("path") + ":" + c.str("ran"));
        EXPECT_LE(c.num("error"), c.num("threshold")) << c.str("name");
        const PskDataType type = storage == "f16" ? PSK_DATA_TYPE_FLOAT16 : storage == "bf16" ? PSK_DATA_TYPE_BFLOAT16 : PSK_DATA_TYPE_FLOAT32;
        double want = psk::conformance::threshold(type, kind == "softmax" || kind == "poly" ? psk::conformance::Family::Quadratic
                                                                                            : psk::conformance::Family::Polysketch);
        if (c.str("check") == "forward") want = psk::conformance::kDecodeVsForward;
        EXPECT_DOUBLE_EQ(c.num("threshold"), want) << c.str("name");
        EXPECT_FALSE(member(c, "kernels").array.empty()) << c.str("name");
    }
    EXPECT_GE(passed, 30u);
    EXPECT_EQ(kinds, (std::set<std::string>{"softmax", "poly", "polysketch", "decode"}));
    EXPECT_EQ(storages, (std::set<std::string>{"f32", "f16", "bf16"}));
    EXPECT_TRUE(paths.count("generic:generic")) << "the generic kernels ran";
    const std::string device = doc.str("device");
    if (device.find("llvmpipe") != std::string::npos) {
        // lavapipe: the lane-team kernels run, the device has no cooperative matrices.
        EXPECT_TRUE(paths.count("team:team+generic")) << "the lane-team kernels ran";
        bool coopSkipped = false;
        for (const psk::json::Value& p : member(doc, "paths").array)
            if (p.str("name") == "cooperative") coopSkipped = p.str("status") == "skipped";
        EXPECT_TRUE(coopSkipped);
    }
    const psk::json::Value& summary = member(doc, "summary");
    EXPECT_EQ(summary.str("result"), "pass");
    EXPECT_EQ(summary.num("failed", -1), 0);
    EXPECT_EQ(summary.num("passed", -1), double(passed));
    EXPECT_GE(summary.num("skipped", -1), double(skipped));
    EXPECT_EQ(summary.num("validation_messages", -1), 0);
    const psk::json::Value& worst = member(summary, "worst");
    for (const char* type : {"f32", "f16", "bf16"}) {
        const psk::json::Value& w = member(worst, type);
        EXPECT_LE(w.num("error", 1), w.num("threshold", 0)) << type;
    }
}

// The checker must be able to fail: thresholds shrunk by 1e-12 are below float rounding, so every
// case with a non-zero error (softmax, exact polynomial, polysketch, decoding; each storage type)
// fails and the exit status is 1.
TEST_F(PskConformance, FailsWhenThresholdsAreBelowRounding) {
    TempDir dir;
    const Outcome r = runPsk({"conformance", "--quick", "--paths", "generic", "--threshold-scale", "1e-12", "--json", dir / "c.json"});
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("FAIL: "), std::string::npos) << r.out;
    const psk::json::Value doc = psk::json::parse(psk::test::readText(dir / "c.json"));
    EXPECT_DOUBLE_EQ(doc.num("threshold_scale"), 1e-12);
    const psk::json::Value& cases = member(doc, "cases");
    std::set<std::string> storages, kinds;
    size_t failed = 0;
    for (const psk::json::Value& c : cases.array) {
        EXPECT_NE(c.str("status"), "skip") << c.str("name");
        EXPECT_LE(c.num("threshold"), 1.2e-14) << c.str("name");  // the largest threshold, bfloat16 1.2e-2, times 1e-12
        if (c.num("error") == 0) continue;  // bit-exact (n = 1 softmax: the output row is v's)
        EXPECT_EQ(c.str("status"), "fail") << c.str("name");
        EXPECT_EQ(c.str("note"), "error above the threshold") << c.str("name");
        ++failed;
        storages.insert(c.str("storage"));
        kinds.insert(c.str("kind"));
    }
    EXPECT_GE(failed, 20u);
    EXPECT_EQ(storages, (std::set<std::string>{"f32", "f16", "bf16"}));
    EXPECT_EQ(kinds, (std::set<std::string>{"softmax", "poly", "polysketch", "decode"}));
    const psk::json::Value& summary = member(doc, "summary");
    EXPECT_EQ(summary.str("result"), "fail");
    EXPECT_EQ(summary.num("failed"), double(failed));
}

TEST(PskConformanceUsage, BadCommandLinesExitTwo) {
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"conformance", "--bogus"},
             {"conformance", "--quick", "--full"},
             {"conformance", "--threshold-scale", "0"},
             {"conformance", "--threshold-scale", "x"},
             {"conformance", "--paths", "generic,tensor"},
             {"conformance", "--filter", "no case has this name"},
             {"conformance", "--json"},
             {"conformance", "--quick=1"},
         }) {
        const Outcome r = runPsk(args);
        EXPECT_EQ(r.code, 2) << args.back() << "\n" << r.out << r.err;
        EXPECT_NE(r.err.find("psk conformance: "), std::string::npos) << r.err;
    }
    const Outcome help = runPsk({"conformance", "--help"});
    EXPECT_EQ(help.code, 0);
    EXPECT_NE(help.out.find("--threshold-scale"), std::string::npos);
}

}  // namespace
