// psk bench: the FLOP formulas against hand-computed counts, the statistics, and a tiny sweep
// whose JSON and CSV are parsed back (no plot, no peer: those options only report themselves
// unavailable here). Speed itself is never asserted.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench.hpp"
#include "json.hpp"
#include "support/psk_cli.hpp"
#include "support/test_context.hpp"

namespace {

using psk::bench::Config;
using psk::test::Outcome;
using psk::test::runPsk;
using psk::test::TempDir;

Config shape(PskAttentionKind kind, uint32_t B, uint32_t Hq, uint32_t Hkv, uint32_t n, uint32_t h, uint32_t dv, bool causal) {
    Config c;
    c.kind = kind;
    c.batch = B;
    c.heads = Hq;
    c.kvHeads = Hkv;
    c.n = n;
    c.headDim = h;
    c.valueDim = dv;
    c.causal = causal;
    return c;
}

TEST(BenchFlops, QuadraticKinds) {
    // 2 * B * Hq * pairs * (h + dv): causal pairs n(n+1)/2 = 55, full n^2 = 100.
    EXPECT_EQ(psk::bench::flops(shape(PSK_ATTENTION_KIND_SOFTMAX, 2, 3, 3, 10, 16, 8, true)), 2.0 * 2 * 3 * 55 * 24);
    EXPECT_EQ(psk::bench::flops(shape(PSK_ATTENTION_KIND_SOFTMAX, 2, 3, 3, 10, 16, 8, false)), 2.0 * 2 * 3 * 100 * 24);
    Config poly = shape(PSK_ATTENTION_KIND_POLYNOMIAL, 2, 3, 1, 10, 16, 8, true);
    poly.degree = 8;
    EXPECT_EQ(psk::bench::flops(poly), 15840);
}

TEST(BenchFlops, Polysketch) {
    // B=1, Hq=2, Hkv=1, n=300, h=dv=16, r=8, b=128: F = 36, t = 3 blocks (128, 128, 44),
    // local pairs L = 2 * 128*129/2 + 44*45/2 = 17502.
    Config c = shape(PSK_ATTENTION_KIND_POLYSKETCH, 1, 2, 1, 300, 16, 16, true);
    c.degree = 4;
    c.sketchSize = 8;
    c.blockSize = 128;
    const double sketch4 = 3.0 * 300 * (2 * 2 * 16 * 8 + 36);  // (Hq + Hkv) n (S + F), S = 2 m h r
    const double states = 2.0 * 300 * 36 * 17, prefix = 3.0 * 36 * 17, output = 2.0 * 2 * 300 * 36 * 17;
    const double localSketched = 2.0 * 17502 * (2 * 8 + 2 * 17), localExact = 2.0 * 17502 * (2 * 16 + 2 * 17);
    EXPECT_EQ(psk::bench::flops(c), sketch4 + states + prefix + output + localSketched);
    EXPECT_EQ(psk::bench::flops(c), 3346836);
    c.localExact = true;
    EXPECT_EQ(psk::bench::flops(c), sketch4 + states + prefix + output + localExact);
    c.localExact = false;
    c.causal = false;
    EXPECT_EQ(psk::bench::flops(c), sketch4 + states + prefix + output);
    // p = 8: S = 2 m h r + (m/2 - 1) 4 r^2 = 1024 + 256.
    c.causal = true;
    c.degree = 8;
    EXPECT_EQ(psk::bench::flops(c), 3.0 * 300 * (1280 + 36) + states + prefix + output + localSketched);
    // A learned sketch (p = 4): S = 32 h r + 96 r^2 = 4096 + 6144.
    c.degree = 4;
    c.learned = true;
    EXPECT_EQ(psk::bench::flops(c), 3.0 * 300 * (10240 + 36) + states + prefix + output + localSketched);
    c.learned = false;
    // p = 2: the sketch is the identity, r stands for h = 16, F = 136.
    c.degree = 2;
    EXPECT_EQ(psk::bench::flops(c), 3.0 * 300 * 136 + 2.0 * 300 * 136 * 17 + 3.0 * 136 * 17 + 2.0 * 2 * 300 * 136 * 17 +
                                        2.0 * 17502 * (2 * 16 + 2 * 17));
}

// The compulsory HBM bytes per stage, by hand: B = 1, Hq = 2, Hkv = 1, n = 300, h = 16, dv = 24,
// r = 8 (F = 36), b = 256 (t = 2), float16 (e = 2), state rows of Z = 28 floats: the states are
// 2 x 36 x 28 x 4 = 8064 bytes.
TEST(BenchStageBytes, PolysketchByHand) {
    Config c = shape(PSK_ATTENTION_KIND_POLYSKETCH, 1, 2, 1, 300, 16, 24, true);
    c.dtype = PSK_DATA_TYPE_FLOAT16;
    c.degree = 4;
    c.sketchSize = 8;
    c.blockSize = 256;
    c.localExact = true;
    psk::bench::StageBytes s = psk::bench::stageBytes(c);
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_FEATURE_MAP], 900.0 * (16 * 2 + 4 * 8) + 900.0 * 4 * 16);  // q, k in; S, q', k' out
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_BLOCK_STATES], 300.0 * (4 * 8 + 24 * 2) + 8064);            // S(k), v in; H_l out
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_PREFIX], 2.0 * 8064);
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_OUTPUT], 600.0 * (4 * 8 + 24 * 2) + 8064 + 600.0 * 4 * 16 + 300.0 * (4 * 16 + 24 * 2));
    // Z packed into 5000 bytes of records: after the scan, the output's stage packs (Z in, records
    // out) and reads the records; where the packing walks, the prefix reads H_l and writes the
    // records, and the output reads the records alone.
    const double outputBase = 600.0 * (4 * 8 + 24 * 2) + 600.0 * 4 * 16 + 300.0 * (4 * 16 + 24 * 2);
    s = psk::bench::stageBytes(c, false, 5000);
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_PREFIX], 2.0 * 8064);
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_OUTPUT], outputBase + 8064 + 2 * 5000.0);
    s = psk::bench::stageBytes(c, false, 5000, true);
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_PREFIX], 8064.0 + 5000);
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_OUTPUT], outputBase + 5000.0);
    c.causal = false;  // full: one sum (36 x 28 x 4 = 4032 bytes), no local part
    c.localExact = false;
    s = psk::bench::stageBytes(c);
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_FEATURE_MAP], 900.0 * (16 * 2 + 4 * 8));
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_PREFIX], 8064.0 + 4032);
    EXPECT_EQ(s.bytes[PSK_FORWARD_STAGE_OUTPUT], 600.0 * (4 * 8 + 24 * 2) + 4032);
    s = psk::bench::stageBytes(shape(PSK_ATTENTION_KIND_SOFTMAX, 1, 2, 1, 300, 16, 24, true));
    for (double x : s.bytes) EXPECT_EQ(x, 0.0);
}

TEST(BenchStats, MedianMinMax) {
    const auto odd = psk::bench::summarize({5, 1, 3});
    EXPECT_EQ(odd.medianMs, 3);
    EXPECT_EQ(odd.minMs, 1);
    EXPECT_EQ(odd.maxMs, 5);
    EXPECT_EQ(odd.meanMs, 3);
    EXPECT_EQ(psk::bench::summarize({4, 1, 3, 2}).medianMs, 2.5);
    EXPECT_EQ(psk::bench::summarize({4, 1, 1, 2}).meanMs, 2);
    EXPECT_EQ(psk::bench::summarize({}).medianMs, 0);
}

// Splits one CSV line into fields (RFC 4180 quoting).
std::vector<std::string> csvFields(const std::string& line) {
    std::vector<std::string> f(1);
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                f.back() += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                f.back() += c;
            }
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            f.emplace_back();
        } else {
            f.back() += c;
        }
    }
    return f;
}

std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream s(text);
    for (std::string l; std::getline(s, l);) out.push_back(l);
    return out;
}

class PskBench : public psk::test::ContextTest {};

TEST_F(PskBench, TinySweepWritesParseableJsonAndCsv) {
    TempDir dir;
    // h = 8 is below the library's minimum: those configurations must be skipped with the reason.
    // Polysketch: add it to --kinds (with --sketch-size 8 --block-size 16) to cover it here.
    const Outcome r = runPsk({"bench", "--kinds", "softmax,poly", "--n", "40,72", "--heads", "2", "--head-dim", "8,16", "--runs", "3",
                              "--warmup", "1", "--json", dir / "b.json", "--csv", dir / "b.csv"},
                             "PSK_VALIDATION=1");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("validation:"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("skipped: PSK_ERROR_INVALID_SHAPE"), std::string::npos) << r.out;

    const psk::json::Value doc = psk::json::parse(psk::test::readText(dir / "b.json"));
    EXPECT_EQ(doc.num("runs"), 3);
    EXPECT_NE(doc.find("device")->str("name"), "");
    const psk::json::Value* results = doc.find("results");
    ASSERT_TRUE(results && results->array.size() == 8);
    int ok = 0;
    for (const psk::json::Value& e : results->array) {
        const bool softmax = e.str("kind") == "softmax";
        const Config c = [&] {
            Config x = shape(softmax ? PSK_ATTENTION_KIND_SOFTMAX : PSK_ATTENTION_KIND_POLYNOMIAL, 1, 2, 2, uint32_t(e.num("n")),
                             uint32_t(e.num("head_dim")), uint32_t(e.num("value_dim")), e.flag("causal"));
            x.degree = softmax ? 0 : 4;
            return x;
        }();
        EXPECT_TRUE(e.flag("causal"));
        EXPECT_EQ(e.num("flop"), psk::bench::flops(c));
        if (e.num("head_dim") == 8) {
            EXPECT_EQ(e.str("status"), "skipped");
            EXPECT_NE(e.str("reason").find("PSK_ERROR_INVALID_SHAPE"), std::string::npos);
            continue;
        }
        ASSERT_EQ(e.str("status"), "ok") << e.str("reason");
        ++ok;
        const double med = e.num("median_ms"), lo = e.num("min_ms"), hi = e.num("max_ms");
        EXPECT_GT(lo, 0);
        EXPECT_LE(lo, med);
        EXPECT_LE(med, hi);
        ASSERT_EQ(e.find("samples_ms")->array.size(), 3u);
        EXPECT_NEAR(e.num("ms_per_token"), med / e.num("n"), 1e-7 * e.num("ms_per_token"));
        EXPECT_NEAR(e.num("tflops"), e.num("flop") / (med * 1e-3) / 1e12, 1e-6 * e.num("tflops"));
        // Softmax and polynomial attention are one stage: the output.
        const psk::json::Value* stages = e.find("stage_median_ms");
        ASSERT_TRUE(stages);
        EXPECT_GT(stages->num("output"), 0);
        EXPECT_EQ(stages->num("feature_map"), 0);
        EXPECT_EQ(stages->num("block_states"), 0);
        EXPECT_EQ(stages->num("prefix"), 0);
    }
    EXPECT_EQ(ok, 4);

    const auto rows = lines(psk::test::readText(dir / "b.csv"));
    ASSERT_EQ(rows.size(), 9u);
    const auto header = csvFields(rows[0]);
    const size_t status = size_t(std::find(header.begin(), header.end(), "status") - header.begin());
    const size_t reason = size_t(std::find(header.begin(), header.end(), "reason") - header.begin());
    ASSERT_LT(status, header.size());
    ASSERT_LT(reason, header.size());
    for (size_t i = 1; i < rows.size(); ++i) {
        const auto f = csvFields(rows[i]);
        ASSERT_EQ(f.size(), header.size()) << rows[i];
        EXPECT_EQ(f[status], results->array[i - 1].str("status"));
        EXPECT_EQ(f[reason], results->array[i - 1].str("reason"));
    }
}

TEST_F(PskBench, MissingPeerAndPlotReportThemselves) {
    TempDir dir;
    const Outcome r = runPsk({"bench", "--kinds", "softmax", "--n", "16", "--heads", "1", "--head-dim", "16", "--runs", "1", "--warmup",
                              "0", "--peer", "torch", "--json", dir / "b.json", "--csv", dir / "b.csv", "--plot", dir / "b.png", "--quiet"},
                             "PSK_TORCH_PYTHON=/nonexistent/python PSK_BENCH_PYTHON=/nonexistent/python3");
    EXPECT_EQ(r.code, 1) << "a requested plot that cannot be drawn is an error";
    EXPECT_NE(r.err.find("peer torch unavailable: no Python at /nonexistent/python"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no plot written"), std::string::npos) << r.err;
    const psk::json::Value doc = psk::json::parse(psk::test::readText(dir / "b.json"));
    const psk::json::Value* peer = doc.find("peer");
    ASSERT_TRUE(peer);
    EXPECT_FALSE(peer->flag("available", true));
    EXPECT_NE(peer->str("reason").find("install_bench_deps.sh"), std::string::npos);
    EXPECT_EQ(doc.find("results")->array.at(0).str("status"), "ok");
    EXPECT_NE(psk::test::readText(dir / "b.csv").find("peer unavailable"), std::string::npos);
    EXPECT_EQ(dir.files(), (std::vector<std::string>{"b.csv", "b.json"}));
}

TEST(PskBenchOptions, BadOptionsExitTwo) {
    for (const auto& [args, expect] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"bench", "--kinds", "softmax,nope"}, "--kinds takes softmax, poly, polysketch (got 'nope')"},
             {{"bench", "--n", "1k,0"}, "--n takes integers from 1"},
             {{"bench", "--degree", "3"}, "--degree takes 2, 4, 8"},
             {{"bench", "--peer", "jax"}, "--peer takes torch"},
             {{"bench", "--local-exact", "--full"}, "--local-exact needs causal"},
             {{"bench", "--bogus"}, "unknown option '--bogus'"},
             {{"bench", "--decode", "--kinds", "poly"}, "--decode takes the kinds softmax and polysketch"},
             {{"bench", "--decode", "--runs", "3"}, "--runs does not apply to --decode (use --steps)"},
             {{"bench", "--decode", "--full"}, "--decode is causal"},
             {{"bench", "--decode", "--peer", "torch"}, "--peer does not apply to --decode"},
             {{"bench", "--steps", "5"}, "--steps needs --decode"},
             {{"bench", "--learned-sketch", "--degree", "4,8"}, "--learned-sketch sketches have degree 4"},
             {{"bench", "--decode", "--context", "1k,x"}, "--context takes integers from 1"}}) {
        const Outcome r = runPsk(args);
        EXPECT_EQ(r.code, 2) << expect;
        EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    }
}

// psk bench --decode: a tiny sweep of both kinds at two contexts; the default step count is one
// block cycle; the state bytes follow the formulas (polysketch constant in the context, softmax
// its capacity = context + warm-up + steps); JSON and CSV agree; the plot is drawn when
// matplotlib is installed.
TEST_F(PskBench, DecodeSweepWritesJsonCsvAndPlot) {
    TempDir dir;
    const uint32_t H = 2, h = 16, r = 8, b = 16, warmup = 1;
    const Outcome out = runPsk({"bench", "--decode", "--context", "20,40", "--heads", "2", "--head-dim", "16", "--sketch-size", "8",
                                "--block-size", "16", "--local-exact", "--warmup", "1", "--json", dir / "d.json", "--csv", dir / "d.csv",
                                "--plot", dir / "d.png"},
                               "PSK_VALIDATION=1 PSK_BENCH_PYTHON=/usr/bin/python3");
    const bool matplotlib = std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
    EXPECT_EQ(out.code, matplotlib ? 0 : 1) << out.err;
    EXPECT_EQ(out.err.find("validation:"), std::string::npos) << out.err;
    EXPECT_NE(out.out.find("state bytes"), std::string::npos) << out.out;

    const psk::json::Value doc = psk::json::parse(psk::test::readText(dir / "d.json"));
    EXPECT_EQ(doc.str("mode"), "decode");
    EXPECT_EQ(doc.num("steps"), b) << "default: one block cycle";
    const psk::json::Value* results = doc.find("results");
    ASSERT_TRUE(results && results->array.size() == 4);  // context-major: polysketch, softmax
    const uint64_t F = r * (r + 1) / 2;
    for (const psk::json::Value& e : results->array) {
        ASSERT_EQ(e.str("status"), "ok") << e.str("reason");
        const uint32_t L = uint32_t(e.num("context"));
        EXPECT_TRUE(L == 20 || L == 40);
        ASSERT_EQ(e.find("samples_ms")->array.size(), b);
        const double med = e.num("median_ms"), mean = e.num("mean_ms"), lo = e.num("min_ms"), hi = e.num("max_ms");
        EXPECT_GT(lo, 0);
        EXPECT_LE(lo, med);
        EXPECT_LE(med, hi);
        EXPECT_LE(lo, mean);
        EXPECT_LE(mean, hi);
        const uint64_t want = e.str("kind") == "polysketch" ? H * (2 * F * (h + 1) + uint64_t(b) * (h + h)) * 4 + 8
                                                            : uint64_t(H) * (L + warmup + b) * (h + h) * 4 + 8;
        EXPECT_EQ(uint64_t(e.num("state_bytes")), want) << e.str("kind") << " at " << L;
        // The timed steps' wall span (gpu_run's decode step reads the SM clock over it).
        const double t0 = e.num("timed_start_unix"), t1 = e.num("timed_end_unix");
        EXPECT_GT(t0, 1.7e9) << "seconds since 1970";
        EXPECT_LE(t0, t1);
        EXPECT_LT(t1 - t0, 600.0);
    }
    EXPECT_GE(results->array[1].num("timed_start_unix"), results->array[0].num("timed_end_unix")) << "rows run one after another";
    EXPECT_EQ(results->array[0].str("kind"), "polysketch");
    EXPECT_EQ(results->array[1].str("kind"), "softmax");

    const auto rows = lines(psk::test::readText(dir / "d.csv"));
    ASSERT_EQ(rows.size(), 5u);
    const auto header = csvFields(rows[0]);
    auto column = [&](const char* name) { return size_t(std::find(header.begin(), header.end(), name) - header.begin()); };
    for (const char* name : {"kind", "context", "median_ms", "mean_ms", "state_bytes", "steps", "timed_start_unix", "timed_end_unix"})
        ASSERT_LT(column(name), header.size()) << name;
    for (size_t i = 1; i < rows.size(); ++i) {
        const auto f = csvFields(rows[i]);
        ASSERT_EQ(f.size(), header.size()) << rows[i];
        const psk::json::Value& e = results->array[i - 1];
        EXPECT_EQ(f[column("kind")], e.str("kind"));
        EXPECT_EQ(std::stod(f[column("context")]), e.num("context"));
        EXPECT_EQ(std::stod(f[column("state_bytes")]), e.num("state_bytes"));
        EXPECT_EQ(std::stod(f[column("steps")]), b);
    }
    if (matplotlib) {
        const std::string png = psk::test::readText(dir / "d.png");
        ASSERT_GT(png.size(), 8u);
        EXPECT_EQ(png.substr(1, 3), "PNG");
    } else {
        EXPECT_NE(out.err.find("no plot written"), std::string::npos) << out.err;
    }
}

// psk bench --decode --resident: the timed steps recorded in one command buffer on psk's own
// device, after warm-up steps on a second state (bursts of 256: at least --warmup of them); one
// sample per timed step, all positive; the softmax state holds the context and the timed steps
// only (the warm-up ran elsewhere); the rows say how they were timed, in JSON and CSV.
TEST_F(PskBench, DecodeResidentTimesStepsInOneCommandBuffer) {
    TempDir dir;
    const uint32_t H = 2, h = 16, r = 8, b = 16, steps = 12, L = 20;
    const Outcome out = runPsk({"bench", "--decode", "--resident", "--context", "20", "--heads", "2", "--head-dim", "16", "--sketch-size",
                                "8", "--block-size", "16", "--local-exact", "--steps", "12", "--warmup", "300", "--json", dir / "d.json",
                                "--csv", dir / "d.csv"});
    ASSERT_EQ(out.code, 0) << out.err;
    EXPECT_NE(out.out.find("decode, device-resident"), std::string::npos) << out.out;
    const psk::json::Value doc = psk::json::parse(psk::test::readText(dir / "d.json"));
    const psk::json::Value* results = doc.find("results");
    ASSERT_TRUE(results && results->array.size() == 2);
    const uint64_t F = r * (r + 1) / 2;
    for (const psk::json::Value& e : results->array) {
        ASSERT_EQ(e.str("status"), "ok") << e.str("reason");
        EXPECT_EQ(e.str("timing"), "resident");
        EXPECT_EQ(e.num("warmup_steps"), 512) << "two bursts of 256 reach 300";
        ASSERT_EQ(e.find("samples_ms")->array.size(), steps);
        for (const psk::json::Value& x : e.find("samples_ms")->array) EXPECT_GT(x.number, 0.0);
        EXPECT_GT(e.num("step_scratch_bytes"), 0);
        const uint64_t want = e.str("kind") == "polysketch" ? H * (2 * F * (h + 1) + uint64_t(b) * (h + h)) * 4 + 8
                                                            : uint64_t(H) * (L + steps) * (h + h) * 4 + 8;
        EXPECT_EQ(uint64_t(e.num("state_bytes")), want) << e.str("kind");
    }
    const auto rows = lines(psk::test::readText(dir / "d.csv"));
    ASSERT_EQ(rows.size(), 3u);
    const auto header = csvFields(rows[0]);
    const size_t timing = size_t(std::find(header.begin(), header.end(), "timing") - header.begin());
    ASSERT_LT(timing, header.size());
    for (size_t i = 1; i < rows.size(); ++i) {
        const auto f = csvFields(rows[i]);
        ASSERT_EQ(f.size(), header.size()) << rows[i];
        EXPECT_EQ(f[timing], "resident");
    }
}

// An explicit step count in every storage type: 16-bit attention objects decode too (their
// steps take uint16_t bit patterns), and psk bench must time them, not skip them as UNSUPPORTED.
TEST_F(PskBench, DecodeStepsInEveryStorageType) {
    TempDir dir;
    const Outcome out = runPsk({"bench", "--decode", "--kinds", "softmax,polysketch", "--context", "8", "--dtype", "f32,f16,bf16",
                                "--heads", "1", "--head-dim", "16", "--sketch-size", "8", "--block-size", "16", "--steps", "5",
                                "--warmup", "0", "--json", dir / "d.json", "--quiet"});
    ASSERT_EQ(out.code, 0) << out.err;
    const psk::json::Value doc = psk::json::parse(psk::test::readText(dir / "d.json"));
    const psk::json::Value* results = doc.find("results");
    ASSERT_TRUE(results && results->array.size() == 6);
    for (const psk::json::Value& r : results->array) {
        EXPECT_EQ(r.str("status"), "ok") << r.str("kind") << " " << r.str("reason");
        ASSERT_TRUE(r.find("samples_ms"));
        EXPECT_EQ(r.find("samples_ms")->array.size(), 5u);
    }
}

}  // namespace
