// The polysketch kernels one by one against the float64 reference, by reading back the workspace
// of a forward call (its layout: psk::polysketchWorkspace), plus the self-tensoring kernel alone and
// two properties of the whole: the sketched-local output matches the float64 reference at every
// block size (the reference's output does not depend on it), and the sketch approximates exact
// polynomial attention better as r grows, with non-negative weights.
//
// Metric everywhere: relativeMaxError = max |gpu - ref| / max |ref|. Thresholds: sketch rows and
// local rows 2e-5 (float32 dot products of length h or 8r through at most two sketch levels or four
// FF layers), features 1e-6 (two products), block states and their prefixes / sums 2e-5 (float32
// sums of up to a few hundred products); whole outputs the polysketch conformance threshold
// (reference/conformance_cases.hpp).
#include <gtest/gtest.h>
#include "kernels/kernel_pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>

#include "forward/attention.hpp"
#include "vk/context.hpp"
#include "forward/polysketch_forward.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/sketch_fixtures.hpp"
#include "reference/storage_types.hpp"
#include "support/scoped_env.hpp"
#include "support/test_context.hpp"
#include "util/float16.hpp"

namespace {

using psk::test::ContextTest;
using psk::test::relativeMaxError;

struct Shape {
    uint32_t degree = 4, r = 16, b = 32, h = 32, dv = 32, B = 1, Hq = 2, Hkv = 1, n = 70;
    bool causal = true, localExact = false, learned = false, referenceScaling = false, qkNorm = false, localNorm = false;
    uint32_t variant = 0;  // distinguishes otherwise equal setups (their seeds derive from the name)
    PskDataType dataType = PSK_DATA_TYPE_FLOAT32;  // 16-bit: q, k, v rounded first (the reference sees the rounded values)
};

std::string name(const Shape& s) {
    std::ostringstream o;
    o << (s.learned ? "learned" : "random") << "_p" << s.degree << "_r" << s.r << "_b" << s.b << "_h" << s.h << "_dv" << s.dv << "_n"
      << s.n << (s.causal ? "_causal" : "_full") << (s.localExact ? "_localexact" : "") << (s.referenceScaling ? "_refscale" : "")
      << (s.qkNorm ? "_ln" : "") << (s.localNorm ? "_localln" : "") << "_Hq" << s.Hq << "_Hkv" << s.Hkv << "_B" << s.B;
    if (s.variant) o << "_v" << s.variant;
    if (s.dataType == PSK_DATA_TYPE_FLOAT16) o << "_f16";
    if (s.dataType == PSK_DATA_TYPE_BFLOAT16) o << "_bf16";
    return o.str();
}

/** Copies a device buffer range into host floats (through a readback buffer: works on any device). */
std::vector<float> readBack(PskContext ctx, const psk::Buffer& buffer, VkDeviceSize offset, VkDeviceSize bytes) {
    psk::Buffer host(ctx->allocator(), bytes, VK_BUFFER_USAGE_TRANSFER_DST_BIT, psk::MemoryUsage::HostReadback);
    ctx->execute([&](psk::Recorder& rec) { rec.copy({buffer.handle(), offset, bytes}, {host.handle(), 0, bytes}, bytes); });
    std::vector<float> out(bytes / 4);
    std::memcpy(out.data(), host.mapped(), bytes);
    return out;
}

/** One forward call with everything the reference needs to check its intermediates. */
struct Run {
    Shape s;
    std::vector<float> q, k, v, out;
    psk::PolysketchWorkspace layout;
    std::vector<float> workspace;
    psk::ref::PolysketchConfig config;
    psk::ref::LayerNormParams qkNorm, localNorm;
    int features = 0;
    uint32_t stateStride = 0;  // floats per state row (dv + 1 padded to 4)
    std::string plan;          // pskGetAttentionPlan's text

    std::vector<float> region(const psk::PolysketchWorkspace::Region& r) const {
        return std::vector<float>(workspace.begin() + r.offset / 4, workspace.begin() + (r.offset + r.size) / 4);
    }
    /** Rows of q or k (BHND, batch b, head hd) as the sketch sees them. */
    std::vector<double> prepared(const std::vector<float>& x, uint32_t heads, uint32_t b, uint32_t hd, bool isQ,
                                 const psk::ref::LayerNormParams* ln) const {
        const std::vector<double> raw(x.begin() + ((size_t(b) * heads + hd) * s.n) * s.h,
                                      x.begin() + ((size_t(b) * heads + hd) * s.n + s.n) * s.h);
        return psk::ref::prepareRows(raw.data(), int(s.n), int(s.h), ln, isQ ? config.scale : 1.0);
    }
};

std::string planText(PskAttention attn) {
    size_t size = 0;
    if (pskGetAttentionPlan(attn, nullptr, &size) != PSK_SUCCESS) return {};
    std::string text(size, '\0');
    pskGetAttentionPlan(attn, text.data(), &size);
    text.resize(std::strlen(text.c_str()));
    return text;
}

std::unique_ptr<Run> runForward(PskContext ctx, const Shape& s) {
    // Every intermediate in the workspace, q's sketch and local rows too, which a cooperative output
    // that computes the query side itself (PSK_COOPMAT_FUSED_QUERY; fused_query_test) leaves out.
    psk::test::ScopedEnv fusedQuery("PSK_COOPMAT_FUSED_QUERY", "off");
    auto run = std::make_unique<Run>();
    run->s = s;
    const uint64_t seed = psk::conformance::caseSeed(name(s));
    run->q = psk::test::randomNormal(size_t(s.B) * s.Hq * s.n * s.h, seed + 1);
    run->k = psk::test::randomNormal(size_t(s.B) * s.Hkv * s.n * s.h, seed + 2);
    run->v = psk::test::randomNormal(size_t(s.B) * s.Hkv * s.n * s.dv, seed + 3);
    run->out.assign(size_t(s.B) * s.Hq * s.n * s.dv, 0.0f);
    for (std::vector<float>* x : {&run->q, &run->k, &run->v}) *x = psk::storage::quantize(*x, s.dataType);

    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = (s.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (s.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0) |
                 (s.referenceScaling ? PSK_ATTENTION_REFERENCE_SCALING_BIT : 0);
    info.degree = s.degree;
    info.scale = 1.0f / std::sqrt(float(s.h));
    info.numQueryHeads = s.Hq;
    info.numKeyValueHeads = s.Hkv;
    info.headDim = s.h;
    info.valueDim = s.dv;
    info.sketchSize = s.r;
    info.blockSize = s.b;
    info.seed = seed;
    info.dataType = s.dataType;
    psk::test::TempFile sketchFile("psk_units_sketch"), normFile("psk_units_norm");
    if (s.learned) {
        const psk::LearnedSketchWeights w = psk::test::randomLearnedSketch(s.h, s.r, seed + 4);
        psk::writeSafeTensors(sketchFile.path(), psk::learnedSketchToSafeTensors(w));
        info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
        info.sketchFile = sketchFile.path().c_str();
        run->config.sketch = psk::ref::sketchFunction(psk::test::toReference(w));
    } else {
        psk::RandomSketchWeights w = psk::generateRandomSketch(seed, s.degree, s.h, s.r);
        w.referenceScaling = s.referenceScaling;
        run->config.sketch = psk::ref::sketchFunction(psk::test::toReference(w));
    }
    if (s.qkNorm) {
        const psk::QkNormWeights norm = psk::test::randomQkNorm(s.h, s.localNorm, seed + 5);
        psk::writeSafeTensors(normFile.path(), psk::qkNormToSafeTensors(norm));
        info.qkNormFile = normFile.path().c_str();
        run->qkNorm = psk::test::toReference(norm.scale, norm.bias);
        run->config.qkNorm = &run->qkNorm;
        if (s.localNorm) {
            run->localNorm = psk::test::toReference(norm.localScale, norm.localBias);
            run->config.localNorm = &run->localNorm;
        }
    }
    run->config.degree = int(s.degree);
    run->config.scale = info.scale;
    run->config.causal = s.causal;
    run->config.localExact = s.localExact;
    run->config.blockSize = int(s.b);

    PskAttention attn = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
    if (!attn) return nullptr;
    run->plan = planText(attn);
    const std::vector<uint8_t> q = psk::storage::encode(run->q, s.dataType), k = psk::storage::encode(run->k, s.dataType),
                               v = psk::storage::encode(run->v, s.dataType);
    std::vector<uint8_t> out(run->out.size() * psk::storage::elementBytes(s.dataType));
    PskForwardHostInfo fwd{};
    fwd.batchSize = s.B;
    fwd.seqLen = s.n;
    fwd.q = q.data();
    fwd.k = k.data();
    fwd.v = v.data();
    fwd.out = out.data();
    fwd.qBytes = q.size();
    fwd.kBytes = k.size();
    fwd.vBytes = v.size();
    fwd.outBytes = out.size();
    PskForwardStats stats{};
    fwd.stats = &stats;
    EXPECT_EQ(pskAttentionForwardHost(attn, &fwd), PSK_SUCCESS);
    run->out = psk::storage::decode(out, s.dataType);
    const psk::ForwardGeometry g =
        psk::makeForwardGeometry(attn->config(), ctx->caps(), s.B, s.n, nullptr, nullptr, nullptr, nullptr);
    run->layout = attn->polysketch()->workspace(g);
    EXPECT_EQ(stats.workspaceBytes, run->layout.total);
    run->workspace = readBack(ctx, attn->workspaceBuffer(), 0, run->layout.total);
    run->features = int(attn->polysketch()->plan().features);
    run->stateStride = attn->polysketch()->plan().stateStride;
    pskDestroyAttention(attn);
    return run;
}

/** H_l of every (batch, kv head) from the reference, [seq][block] -> F x (dv + 1) (unpadded). */
std::vector<std::vector<std::vector<double>>> referenceStates(const Run& run) {
    const Shape& s = run.s;
    std::vector<std::vector<std::vector<double>>> all;
    for (uint32_t b = 0; b < s.B; ++b) {
        for (uint32_t hd = 0; hd < s.Hkv; ++hd) {
            const std::vector<double> K = run.prepared(run.k, s.Hkv, b, hd, false, run.config.qkNorm);
            int F = 0;
            const std::vector<double> phiK = psk::ref::featureRows(run.config.sketch, K.data(), int(s.n), int(s.h), F);
            const std::vector<double> V(run.v.begin() + ((size_t(b) * s.Hkv + hd) * s.n) * s.dv,
                                        run.v.begin() + ((size_t(b) * s.Hkv + hd) * s.n + s.n) * s.dv);
            all.push_back(psk::ref::blockStates(phiK, V, int(s.n), F, int(s.dv), int(s.b)));
        }
    }
    return all;
}

// ---- feature map: sketch rows and local rows ----

class FeatureMap : public ContextTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(FeatureMap, SketchRowsMatchReference) {
    const Shape s = GetParam();
    const auto run = runForward(ctx, s);
    ASSERT_TRUE(run);
    struct Side {
        const std::vector<float>* x;
        uint32_t heads;
        bool isQ;
        const psk::PolysketchWorkspace::Region* sketch;
        const psk::PolysketchWorkspace::Region* local;
    } sides[] = {{&run->q, s.Hq, true, &run->layout.qSketch, &run->layout.qLocal},
                 {&run->k, s.Hkv, false, &run->layout.kSketch, &run->layout.kLocal}};
    for (const Side& side : sides) {
        std::vector<double> wantSketch, wantLocal;
        for (uint32_t b = 0; b < s.B; ++b) {
            for (uint32_t hd = 0; hd < side.heads; ++hd) {
                const std::vector<double> x = run->prepared(*side.x, side.heads, b, hd, side.isQ, run->config.qkNorm);
                for (uint32_t i = 0; i < s.n; ++i) {
                    const std::vector<double> sk = run->config.sketch(&x[size_t(i) * s.h]);
                    wantSketch.insert(wantSketch.end(), sk.begin(), sk.end());
                }
                if (s.localExact) {
                    const auto* ln = run->config.localNorm ? run->config.localNorm : run->config.qkNorm;
                    const std::vector<double> l = run->prepared(*side.x, side.heads, b, hd, side.isQ, ln);
                    wantLocal.insert(wantLocal.end(), l.begin(), l.end());
                }
            }
        }
        const std::vector<float> got = run->region(*side.sketch);
        ASSERT_EQ(got.size(), wantSketch.size());
        EXPECT_LE(relativeMaxError(got, wantSketch), 2e-5) << (side.isQ ? "q" : "k") << " sketch rows";
        if (s.localExact) {
            const std::vector<float> gotLocal = run->region(*side.local);
            ASSERT_EQ(gotLocal.size(), wantLocal.size());
            EXPECT_LE(relativeMaxError(gotLocal, wantLocal), 2e-5) << (side.isQ ? "q" : "k") << " local rows";
        }
    }
}

std::vector<Shape> featureCases() {
    std::vector<Shape> cases;
    for (uint32_t degree : {2u, 4u, 8u}) {
        Shape s;
        s.degree = degree;
        cases.push_back(s);
        if (degree != 2) {
            s.referenceScaling = true;
            cases.push_back(s);
        }
    }
    Shape s;
    s.learned = true;
    cases.push_back(s);
    s.qkNorm = true;
    cases.push_back(s);
    s.learned = false;
    s.localExact = true;
    cases.push_back(s);
    s.localNorm = true;
    s.B = 2;
    s.Hq = 4;
    s.Hkv = 2;
    cases.push_back(s);
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, FeatureMap, ::testing::ValuesIn(featureCases()),
                         [](const ::testing::TestParamInfo<Shape>& i) { return name(i.param); });

// ---- the feature map in 16-bit storage, on the raw kernel the device plans (no self-test) ----
//
// The S rows alone (float32 in the workspace) against the float64 sketch of the rounded inputs, on
// whatever kernel the plan takes with PSK_COOPMAT_SELFTEST=0: on a GPU with cooperative matrices
// the cooperative feature map itself (the self-test would hide a wrong kernel behind the generic
// one), on lavapipe the generic or lane-team kernel, and through the emulated backend with its own
// and the GPU's tiling. Threshold 1e-4 of the largest |S|: the cooperative kernel's hi + lo
// operands keep ~22 bits (the FP32 kernels stay near 1e-6). A failure prints where the wrong
// entries sit (row within the workgroup's tile, column, side), what a GPU run needs to place the
// fault (docs/RELIABILITY.md, "second run").

struct FeatureCase16 {
    Shape s;
    const char* path;  // "device", "emulated" (small tiles) or "gpu-tiles" (emulated, the GPU's tiling)
    int tile = -1;     // >= 0: the GPU tile list's entry (kFeatureCoopMatTiles) through a tuning table
    // PSK_COOPMAT_FEATURE_DIAGNOSTIC (random sketch): the rows hold an intermediate instead of S,
    // each checked against its own reference, so that a wrong S is placed at a step.
    const char* diagnostic = nullptr;
};

class FeatureMap16 : public ContextTest, public ::testing::WithParamInterface<FeatureCase16> {};

// A failing case's arrays as raw little-endian files in $PSK_TEST_ARTIFACTS (the GPU check sets
// it; tools/gpu_run/feature_map_forensics.py reads them): what the kernel wrote, what the float64
// reference wants, the rows it read, and the random sketch's weights, so that a wrong S can be
// held against hypotheses about its layout on a machine without the GPU.
template <typename T>
void writeArtifact(const std::string& path, const std::vector<T>& values) {
    if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
        std::fwrite(values.data(), sizeof(T), values.size(), f);
        std::fclose(f);
    }
}

TEST_P(FeatureMap16, SketchRowsOfTheRawKernelMatchReference) {
    const FeatureCase16 c = GetParam();
    const std::string path = c.path;
    psk::test::ScopedEnv selfTest("PSK_COOPMAT_SELFTEST", "0");
    psk::test::ScopedEnv backend("PSK_COOPMAT_BACKEND", path == "device" ? nullptr : "emulated");
    psk::test::ScopedEnv emulation("PSK_COOPMAT_EMULATION", path == "device" ? nullptr : path == "gpu-tiles" ? "gpu-tiles" : "1");
    // One entry of the GPU's tile list at a time (a tuning table that applies to any device): which
    // tilings a device gets wrong, in one run.
    psk::test::TempFile table("psk_units_tile");
    if (c.tile >= 0) {
        std::FILE* f = std::fopen(table.path().c_str(), "w");
        ASSERT_NE(f, nullptr);
        std::fprintf(f, "psk-tuning 1\ndevice any\nfeatures.tile %d\n", c.tile);
        std::fclose(f);
    }
    psk::test::ScopedEnv tuning("PSK_TUNING_TABLE", c.tile >= 0 ? table.path().c_str() : nullptr);
    psk::test::ScopedEnv diagnostic("PSK_COOPMAT_FEATURE_DIAGNOSTIC", c.diagnostic);
    const std::string diag = c.diagnostic ? c.diagnostic : "";
    const Shape& s = c.s;
    const auto run = runForward(ctx, s);
    ASSERT_TRUE(run);
    if (!diag.empty() && run->plan.find("FEATURE-MAP DIAGNOSTIC") == std::string::npos)
        ADD_FAILURE() << "the plan does not name the diagnostic:\n" << run->plan;
    if (!diag.empty() && run->plan.find("sketch_features_coopmat") == std::string::npos)
        GTEST_SKIP() << "no cooperative feature map here, so no diagnostic:\n" << run->plan;
    // The first product's weights (diagnostic "product"): G1_0a of the case's seeded sketch, h x r.
    const std::vector<float> ga = diag == "product" ? psk::generateRandomSketch(psk::conformance::caseSeed(name(s)), s.degree, s.h, s.r)
                                                           .g.at(psk::randomSketchTensorName(1, 0, false))
                                                     : std::vector<float>();
    if (c.tile >= 0 && run->plan.find("features.tile=" + std::to_string(c.tile) + " from") == std::string::npos)
        GTEST_SKIP() << "tile " << c.tile << " does not run here (no cooperative feature map, or it does not fit):\n" << run->plan;
    std::string featureKernel;
    for (size_t at = 0; at < run->plan.size();) {
        size_t end = run->plan.find('\n', at);
        if (end == std::string::npos) end = run->plan.size();
        const std::string line = run->plan.substr(at, end - at);
        if (line.rfind("sketch_features", 0) == 0) featureKernel = line.substr(0, line.find(':'));
        at = end + 1;
    }
    if (path != "device")
        EXPECT_NE(featureKernel.find("_coopmat.emu_"), std::string::npos) << "the emulated cooperative feature map did not run:\n" << run->plan;
    const std::vector<uint32_t> heads = {s.Hq, s.Hkv};
    const psk::PolysketchWorkspace::Region* regions[] = {&run->layout.qSketch, &run->layout.kSketch};
    for (int side = 0; side < 2; ++side) {
        std::vector<double> want, rowsRead;
        for (uint32_t b = 0; b < s.B; ++b)
            for (uint32_t hd = 0; hd < heads[side]; ++hd) {
                const std::vector<double> x = run->prepared(side == 0 ? run->q : run->k, heads[side], b, hd, side == 0, run->config.qkNorm);
                rowsRead.insert(rowsRead.end(), x.begin(), x.end());
                for (uint32_t i = 0; i < s.n; ++i) {
                    const double* xi = &x[size_t(i) * s.h];
                    if (diag.empty()) {
                        const std::vector<double> sk = run->config.sketch(xi);
                        want.insert(want.end(), sk.begin(), sk.end());
                    } else {
                        for (uint32_t col = 0; col < s.r; ++col) {
                            double v = 0.0;
                            if (diag == "product") {
                                for (uint32_t d = 0; d < s.h; ++d) v += xi[d] * double(ga[size_t(d) * s.r + col]);
                            } else if (col < s.h && diag == "operands") {
                                v = psk::halfToFloat(psk::floatToHalf(float(xi[col])));  // x rounded to float16 (the high part)
                            } else if (col < s.h) {
                                v = xi[col];  // "rows", "identity" and "accumulators": x itself, zero past h
                            }
                            want.push_back(v);
                        }
                    }
                }
            }
        const std::vector<float> got = run->region(*regions[side]);
        ASSERT_EQ(got.size(), want.size());
        const double error = relativeMaxError(got, want);
        if (error <= 1e-4) continue;
        // Where the wrong entries are: rows within a tile of 64 and columns, counted.
        double maxWant = 0.0;
        for (double w : want) maxWant = std::max(maxWant, std::fabs(w));
        const uint32_t r = uint32_t(got.size() / (size_t(s.B) * heads[side] * s.n));
        std::vector<uint32_t> byRow(64, 0), byColumn(r, 0);
        std::ostringstream first;
        size_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            if (std::isfinite(got[i]) && std::fabs(got[i] - want[i]) <= 1e-4 * maxWant) continue;
            const size_t row = i / r % s.n, column = i % r;
            ++byRow[row % 64];
            ++byColumn[column];
            if (bad++ < 6) first << " [row " << row << ", column " << column << "] " << got[i] << " (want " << want[i] << ")";
        }
        std::ostringstream rows, columns;
        for (uint32_t i = 0; i < 64; ++i)
            if (byRow[i]) rows << " " << i << ":" << byRow[i];
        for (uint32_t i = 0; i < r; ++i)
            if (byColumn[i]) columns << " " << i << ":" << byColumn[i];
        std::string artifacts;
        if (const char* dir = std::getenv("PSK_TEST_ARTIFACTS")) {
            // <case>.<q|k>.{got.f32, want.f64, x.f64} (B x heads x n x r, or x h) and <case>.G.<name>.f32 (h x r).
            std::string testName = ::testing::UnitTest::GetInstance()->current_test_info()->name();
            std::replace(testName.begin(), testName.end(), '/', '.');
            const std::string base = std::string(dir) + "/" + testName;
            const std::string sideName = side == 0 ? "q" : "k";
            writeArtifact(base + "." + sideName + ".got.f32", got);
            writeArtifact(base + "." + sideName + ".want.f64", want);
            writeArtifact(base + "." + sideName + ".x.f64", rowsRead);
            if (!s.learned)
                for (const auto& [tensor, g] : psk::generateRandomSketch(psk::conformance::caseSeed(name(s)), s.degree, s.h, s.r).g)
                    writeArtifact(base + ".G." + tensor + ".f32", g);
            artifacts = "\n  arrays in " + base + "." + sideName + ".*";
        }
        ADD_FAILURE() << (side == 0 ? "q" : "k") << (diag.empty() ? "" : " diagnostic " + diag) << " sketch rows: error " << error << " (limit 1e-4) with " << featureKernel << "; " << bad
                      << " of " << got.size() << " entries wrong;" << first.str() << "\n  wrong entries by row modulo 64:" << rows.str()
                      << "\n  by column:" << columns.str() << artifacts;
    }
}

std::vector<FeatureCase16> featureCases16() {
    std::vector<FeatureCase16> cases;
    for (const char* path : {"device", "emulated", "gpu-tiles"}) {
        Shape s;
        s.dataType = PSK_DATA_TYPE_FLOAT16;
        s.r = 32;
        s.n = 150;  // three workgroups of 64 rows (the GPU's tiles), the last partial
        cases.push_back({s, path});
        s.learned = true;
        s.r = 16;
        s.qkNorm = true;
        cases.push_back({s, path});
    }
    // Each GPU tiling alone (kFeatureCoopMatTiles: 4 x 2, 2 x 2, 2 x 2 with 32 columns, 1 x 2
    // subgroups), on the device and emulated with the GPU's tiling.
    for (const char* path : {"device", "gpu-tiles"})
        for (int tile = 0; tile < 4; ++tile) {
            Shape s;
            s.dataType = PSK_DATA_TYPE_FLOAT16;
            s.r = 32;
            s.n = 150;
            s.variant = 10 + uint32_t(tile);
            cases.push_back({s, path, tile});
        }
    // The random sketch's intermediates (rows, identity product, first product, accumulator loads
    // and stores alone, operand loads and stores alone), on the device and emulated: where the
    // device's S is wrong, the first of these that is wrong names the step.
    for (const char* path : {"device", "emulated"})
        for (const char* diagnostic : {"rows", "identity", "product", "accumulators", "operands"}) {
            Shape s;
            s.dataType = PSK_DATA_TYPE_FLOAT16;
            s.r = 32;
            s.n = 150;
            s.variant = 20;
            FeatureCase16 c{s, path};
            c.diagnostic = diagnostic;
            cases.push_back(c);
        }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, FeatureMap16, ::testing::ValuesIn(featureCases16()), [](const ::testing::TestParamInfo<FeatureCase16>& i) {
    return name(i.param.s) + "_" + (std::string(i.param.path) == "gpu-tiles" ? "gputiles" : i.param.path) +
           (i.param.tile >= 0 ? "_tile" + std::to_string(i.param.tile) : "") +
           (i.param.diagnostic ? std::string("_diag_") + i.param.diagnostic : "");
});

// ---- block states, their Blelloch prefix (causal) and their sum (full) ----

class BlockStates : public ContextTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(BlockStates, StatesMatchReference) {
    const Shape s = GetParam();
    const auto run = runForward(ctx, s);
    ASSERT_TRUE(run);
    const auto H = referenceStates(*run);
    const size_t elems = size_t(run->features) * (s.dv + 1);
    const std::vector<float> padded = run->region(run->layout.states);
    // Rows are padded to stateStride floats (a multiple of 4, or of 8 for the team kernels; zero
    // padding): drop the padding.
    ASSERT_EQ(run->stateStride % 4, 0u);
    ASSERT_GE(run->stateStride, s.dv + 1);
    ASSERT_LT(run->stateStride, s.dv + 9);
    ASSERT_EQ(padded.size(), H.size() * run->layout.blocks * run->features * run->stateStride);
    std::vector<float> got;
    size_t nonzeroPadding = 0;
    for (size_t row = 0; row < padded.size() / run->stateStride; ++row) {
        got.insert(got.end(), padded.begin() + row * run->stateStride, padded.begin() + row * run->stateStride + s.dv + 1);
        for (size_t c = s.dv + 1; c < run->stateStride; ++c) nonzeroPadding += padded[row * run->stateStride + c] != 0.0f;
    }
    EXPECT_EQ(nonzeroPadding, 0u);
    std::vector<double> want;
    std::vector<float> gotCompared;
    for (size_t seq = 0; seq < H.size(); ++seq) {
        ASSERT_EQ(H[seq].size(), run->layout.blocks);
        if (s.causal) {
            // After the scan: Z_l = sum_{j<l} H_j for every block.
            for (const auto& z : psk::ref::exclusivePrefix(H[seq])) want.insert(want.end(), z.begin(), z.end());
            gotCompared.insert(gotCompared.end(), got.begin() + seq * H[seq].size() * elems,
                               got.begin() + (seq + 1) * H[seq].size() * elems);
        } else {
            // After the reduction: block 0 holds the sum of all blocks (= H_0 when there is one).
            std::vector<double> sum(elems, 0.0);
            for (const auto& h : H[seq])
                for (size_t e = 0; e < elems; ++e) sum[e] += h[e];
            want.insert(want.end(), sum.begin(), sum.end());
            gotCompared.insert(gotCompared.end(), got.begin() + seq * H[seq].size() * elems,
                               got.begin() + seq * H[seq].size() * elems + elems);
        }
    }
    double maxRef = 0;
    for (double x : want) maxRef = std::max(maxRef, std::fabs(x));
    ASSERT_GT(maxRef, 1e-3) << "degenerate states";
    EXPECT_LE(relativeMaxError(gotCompared, want), 2e-5);
}

std::vector<Shape> stateCases() {
    std::vector<Shape> cases;
    // Full: one block (a single row, short, exact) is H_0 itself; more blocks are summed.
    // Causal: the prefixes of 2 blocks, 3 with a short last one, 5 blocks plus 3 rows.
    for (bool causal : {false, true}) {
        for (uint32_t n : causal ? std::vector<uint32_t>{64, 65, 163} : std::vector<uint32_t>{1, 29, 32, 163}) {
            Shape s;
            s.causal = causal;
            s.n = n;
            cases.push_back(s);
        }
    }
    Shape odd;  // F = 36 and 105 (partial feature tiles), dv = 40 and 100 (partial column tiles)
    odd.r = 8;
    odd.dv = 40;
    odd.n = 100;
    odd.causal = false;
    cases.push_back(odd);
    odd.r = 14;
    odd.dv = 100;
    odd.B = 2;
    odd.Hq = 2;
    odd.Hkv = 2;
    odd.causal = true;
    cases.push_back(odd);
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, BlockStates, ::testing::ValuesIn(stateCases()),
                         [](const ::testing::TestParamInfo<Shape>& i) { return name(i.param); });

// The packing walk (z_operands.comp WALK = 1, prefix.pack_min_groups): where it runs, the Blelloch
// scan does not, so after the call the states region still holds the blocks' own sums H_l (the
// float32 prefix is never written); where the table turns it off (4294967295), the scan leaves the
// prefixes Z_l there. Either way the output matches the float64 reference. Emulated cooperative
// output (16-bit), 4 blocks with a short last one, GQA.
TEST_F(ContextTest, PackingWalkLeavesTheBlockStatesAndSkipsTheScan) {
    psk::test::ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    psk::test::ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
    Shape s;
    s.dataType = PSK_DATA_TYPE_FLOAT16;
    s.n = 110;
    for (const char* minGroups : {"1", "4294967295"}) {
        const bool walks = std::string(minGroups) == "1";
        psk::test::TempFile table("psk_units_walk");
        std::FILE* f = std::fopen(table.path().c_str(), "w");
        ASSERT_NE(f, nullptr);
        std::fprintf(f, "psk-tuning 1\ndevice any\nprefix.pack_min_groups %s\n", minGroups);
        std::fclose(f);
        psk::test::ScopedEnv tuning("PSK_TUNING_TABLE", table.path().c_str());
        const auto run = runForward(ctx, s);
        ASSERT_TRUE(run);
        ASSERT_NE(run->plan.find(" WALK=1: the prefix and the packing in one pass"), std::string::npos) << run->plan;
        const auto H = referenceStates(*run);
        const std::vector<float> padded = run->region(run->layout.states);
        ASSERT_EQ(padded.size(), H.size() * run->layout.blocks * run->features * run->stateStride);
        std::vector<double> want;
        std::vector<float> got;
        for (size_t seq = 0; seq < H.size(); ++seq) {
            const auto blocks = walks ? H[seq] : psk::ref::exclusivePrefix(H[seq]);
            for (size_t l = 0; l < blocks.size(); ++l) {
                want.insert(want.end(), blocks[l].begin(), blocks[l].end());
                for (int f = 0; f < run->features; ++f) {
                    const size_t row = ((seq * blocks.size() + l) * run->features + f) * run->stateStride;
                    got.insert(got.end(), padded.begin() + row, padded.begin() + row + s.dv + 1);
                }
            }
        }
        EXPECT_LE(relativeMaxError(got, want), 2e-5) << (walks ? "the walk ran: H_l expected" : "the scan ran: Z_l expected");
        psk::ref::PolysketchConfig config = run->config;
        std::vector<double> ref;
        const psk::ref::Shape shape{int(s.B), int(s.Hq), int(s.Hkv), int(s.n), int(s.h), int(s.dv)};
        psk::ref::polysketchAttention(shape, std::vector<double>(run->q.begin(), run->q.end()),
                                      std::vector<double>(run->k.begin(), run->k.end()),
                                      std::vector<double>(run->v.begin(), run->v.end()), config, ref);
        EXPECT_LE(relativeMaxError(run->out, ref), psk::conformance::kFloat16);
    }
}

// ---- self-tensoring alone ----

class SelfTensor : public ContextTest, public ::testing::WithParamInterface<uint32_t> {};

TEST_P(SelfTensor, PackedFeaturesMatchReference) {
    const uint32_t R = GetParam(), rows = 37, F = R * (R + 1) / 2;
    const std::vector<float> sketches = psk::test::randomNormal(size_t(rows) * R, R);
    const std::vector<uint32_t> pairs = psk::selfTensorPairs(R);
    const VkBufferUsageFlags usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    psk::Buffer in(ctx->allocator(), sketches.size() * 4, usage, psk::MemoryUsage::HostUpload);
    psk::Buffer pairBuf(ctx->allocator(), pairs.size() * 4, usage, psk::MemoryUsage::HostUpload);
    psk::Buffer out(ctx->allocator(), size_t(rows) * F * 4, usage, psk::MemoryUsage::DeviceLocal);
    std::memcpy(in.mapped(), sketches.data(), sketches.size() * 4);
    std::memcpy(pairBuf.mapped(), pairs.data(), pairs.size() * 4);
    VkPipeline pipeline = psk::kernelPipeline(ctx->pipelines(), psk::selfTensorKernel());
    ctx->execute([&](psk::Recorder& rec) {
        psk::recordSelfTensor(rec, pipeline, ctx->caps(), {in.handle(), 0, in.size()}, {pairBuf.handle(), 0, pairBuf.size()},
                              {out.handle(), 0, out.size()}, rows, R);
    });
    const std::vector<float> got = readBack(ctx, out, 0, size_t(rows) * F * 4);
    std::vector<double> want;
    for (uint32_t i = 0; i < rows; ++i) {
        const std::vector<double> u(sketches.begin() + size_t(i) * R, sketches.begin() + size_t(i + 1) * R);
        const std::vector<double> psi = psk::ref::selfTensorPacked(u);
        want.insert(want.end(), psi.begin(), psi.end());
    }
    EXPECT_LE(relativeMaxError(got, want), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Lengths, SelfTensor, ::testing::Values(1u, 8u, 17u, 32u, 128u));

// ---- properties of the whole ----

class PolysketchProperties : public ContextTest {};

// The test fixtures run every forward on a workspace filled with NaN first (PSK_POISON_WORKSPACE,
// tests/support/test_context.cpp): the plan says so, the forward's output stays right (no kernel
// reads a workspace element its call did not write; every test of the suite checks the same), and
// the switch takes 0 and 1 only.
TEST_F(PolysketchProperties, PoisonedWorkspaceIsNamedInThePlanAndChangesNothing) {
    const std::string note = "# workspace filled with NaN before the kernels (PSK_POISON_WORKSPACE=1, a diagnostic)";
    Shape s;
    s.n = 45;
    s.localExact = true;
    for (const char* value : {"1", "0"}) {
        psk::test::ScopedEnv poison("PSK_POISON_WORKSPACE", value);
        const auto run = runForward(ctx, s);
        ASSERT_TRUE(run);
        EXPECT_EQ(run->plan.find(note) != std::string::npos, value[0] == '1') << run->plan;
        std::vector<double> want;
        psk::ref::Shape shape{int(s.B), int(s.Hq), int(s.Hkv), int(s.n), int(s.h), int(s.dv)};
        const std::vector<double> q(run->q.begin(), run->q.end()), k(run->k.begin(), run->k.end()), v(run->v.begin(), run->v.end());
        psk::ref::polysketchAttention(shape, q, k, v, run->config, want);
        EXPECT_LE(relativeMaxError(run->out, want), 2e-4) << "PSK_POISON_WORKSPACE=" << value;
    }
    psk::test::ScopedEnv poison("PSK_POISON_WORKSPACE", "yes");
    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.numQueryHeads = info.numKeyValueHeads = 1;
    info.headDim = info.valueDim = 16;
    PskAttention attn = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(attn, nullptr);
    pskDestroyAttention(attn);
    const psk::test::MessageLog& log = psk::test::sharedLog();
    ASSERT_FALSE(log.errors.empty());
    EXPECT_NE(log.errors.back().find("PSK_POISON_WORKSPACE=yes: expected 0 or 1"), std::string::npos) << log.errors.back();
    psk::test::sharedLog().clear();
}

TEST_F(PolysketchProperties, SketchedLocalOutputMatchesReferenceAtEveryBlockSize) {
    // Sketched local weights are the same inner products as the prefix part, so the block size
    // only changes the order of float32 sums: the float64 reference gives the same output for every
    // b (checked below, so the test rests on the reference, not on that claim), and every b's
    // device output is held to it with the polysketch conformance threshold. n = 150 leaves a short
    // last block for every b (16, 32, 48, 128), and b = 128 has a single full block.
    const uint32_t h = 32, dv = 32, n = 150, Hq = 2, r = 16;
    const uint64_t sketchSeed = 99;
    const std::vector<float> q = psk::test::randomNormal(size_t(Hq) * n * h, 11), k = psk::test::randomNormal(size_t(Hq) * n * h, 12),
                             v = psk::test::randomNormal(size_t(Hq) * n * dv, 13);
    const float scale = 1.0f / std::sqrt(float(h));
    const psk::ref::Shape shape{1, int(Hq), int(Hq), int(n), int(h), int(dv)};
    const std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
    psk::ref::PolysketchConfig config;
    config.sketch = psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(sketchSeed, 4, h, r)));
    config.degree = 4;
    config.scale = scale;
    config.causal = true;
    config.localExact = false;
    config.blockSize = 16;
    std::vector<double> want;
    psk::ref::polysketchAttention(shape, qd, kd, vd, config, want);
    double maxRef = 0;
    for (double x : want) maxRef = std::max(maxRef, std::fabs(x));
    ASSERT_GT(maxRef, 1e-3) << "degenerate reference output";
    for (uint32_t b : {16u, 32u, 48u, 128u}) {
        SCOPED_TRACE("b = " + std::to_string(b));
        config.blockSize = int(b);
        std::vector<double> wantB;
        psk::ref::polysketchAttention(shape, qd, kd, vd, config, wantB);
        double spread = 0;
        for (size_t i = 0; i < want.size(); ++i) spread = std::max(spread, std::fabs(wantB[i] - want[i]));
        EXPECT_LE(spread, 1e-12 * maxRef) << "the float64 reference depends on the block size";

        PskAttentionCreateInfo info{};
        info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
        info.flags = PSK_ATTENTION_CAUSAL_BIT;
        info.scale = scale;
        info.numQueryHeads = Hq;
        info.headDim = h;
        info.valueDim = dv;
        info.sketchSize = r;
        info.blockSize = b;
        info.seed = sketchSeed;
        PskAttention attn = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
        std::vector<float> out(size_t(Hq) * n * dv, NAN);
        PskForwardHostInfo fwd{};
        fwd.seqLen = n;
        fwd.q = q.data();
        fwd.k = k.data();
        fwd.v = v.data();
        fwd.out = out.data();
        fwd.qBytes = q.size() * 4;
        fwd.kBytes = k.size() * 4;
        fwd.vBytes = v.size() * 4;
        fwd.outBytes = out.size() * 4;
        ASSERT_EQ(pskAttentionForwardHost(attn, &fwd), PSK_SUCCESS);
        pskDestroyAttention(attn);
        const double error = relativeMaxError(out, want);
        RecordProperty("relative_max_error_b" + std::to_string(b), psk::ref::formatError(error));
        EXPECT_LE(error, psk::conformance::kPolysketchFloat32);
    }
}

TEST_F(PolysketchProperties, TensorPrefixReadsALayerOfAModelFile) {
    // One model file holding two layers' learned sketches and q/k LayerNorms under
    // "layers.{l}.attn." gives, per layer, the output of that layer's own sketch and norm files.
    const uint32_t h = 32, dv = 32, n = 70, r = 16;
    const std::vector<float> q = psk::test::randomNormal(size_t(n) * h, 21), k = psk::test::randomNormal(size_t(n) * h, 22),
                             v = psk::test::randomNormal(size_t(n) * dv, 23);
    psk::SafeTensors model;
    std::vector<std::unique_ptr<psk::test::TempFile>> own;
    for (uint32_t l = 0; l < 2; ++l) {
        const psk::SafeTensors sketch = psk::learnedSketchToSafeTensors(psk::test::randomLearnedSketch(h, r, 30 + l));
        const psk::SafeTensors norm = psk::qkNormToSafeTensors(psk::test::randomQkNorm(h, false, 40 + l));
        model.metadata = sketch.metadata;
        for (const auto& [name, t] : sketch.tensors) model.tensors["layers." + std::to_string(l) + ".attn." + name] = t;
        for (const auto& [name, t] : norm.tensors) model.tensors["layers." + std::to_string(l) + ".attn." + name] = t;
        own.push_back(std::make_unique<psk::test::TempFile>("psk_prefix_sketch"));
        psk::writeSafeTensors(own.back()->path(), sketch);
        own.push_back(std::make_unique<psk::test::TempFile>("psk_prefix_norm"));
        psk::writeSafeTensors(own.back()->path(), norm);
    }
    model.tensors["tok_emb"] = psk::Tensor{{5, 8}, std::vector<float>(40, 1.0f)};
    for (uint32_t l = 0; l < 2; ++l)  // the layer's other weights under the same prefix
        model.tensors["layers." + std::to_string(l) + ".attn.wqkv"] = psk::Tensor{{8, 24}, std::vector<float>(192, 0.5f)};
    psk::test::TempFile modelFile("psk_prefix_model");
    psk::writeSafeTensors(modelFile.path(), model);

    auto forward = [&](const char* sketchFile, const char* normFile, const char* prefix, PskResult expect = PSK_SUCCESS) {
        PskAttentionCreateInfo info{};
        info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
        info.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
        info.headDim = h;
        info.valueDim = dv;
        info.blockSize = 32;
        info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
        info.sketchFile = sketchFile;
        info.qkNormFile = normFile;
        info.tensorPrefix = prefix;
        std::vector<float> out(size_t(n) * dv);
        PskAttention attn = nullptr;
        EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), expect);
        if (!attn) return out;
        PskForwardHostInfo fwd{};
        fwd.seqLen = n;
        fwd.q = q.data();
        fwd.k = k.data();
        fwd.v = v.data();
        fwd.out = out.data();
        fwd.qBytes = q.size() * 4;
        fwd.kBytes = k.size() * 4;
        fwd.vBytes = v.size() * 4;
        fwd.outBytes = out.size() * 4;
        EXPECT_EQ(pskAttentionForwardHost(attn, &fwd), PSK_SUCCESS);
        pskDestroyAttention(attn);
        return out;
    };
    const std::vector<float> layer0 = forward(modelFile.path().c_str(), modelFile.path().c_str(), "layers.0.attn.");
    const std::vector<float> layer1 = forward(modelFile.path().c_str(), modelFile.path().c_str(), "layers.1.attn.");
    EXPECT_EQ(layer0, forward(own[0]->path().c_str(), own[1]->path().c_str(), nullptr));
    EXPECT_EQ(layer1, forward(own[2]->path().c_str(), own[3]->path().c_str(), ""));
    EXPECT_NE(layer0, layer1);
    // The whole model file is not a sketch file, and an absent prefix reads nothing.
    forward(modelFile.path().c_str(), nullptr, nullptr, PSK_ERROR_BAD_FILE);
    forward(modelFile.path().c_str(), nullptr, "layers.2.attn.", PSK_ERROR_BAD_FILE);
}

TEST_F(PolysketchProperties, SketchApproximatesPolynomialWeightsBetterAsRGrows) {
    // Degree 4: w_ij = <phi(q_i), phi(k_j)> from the device's sketch rows, expanded to packed
    // features by the self-tensoring kernel, against the exact (q_i . k_j)^4, over 6 seeds.
    const uint32_t h = 16, n = 24;
    double previous = 1e300;
    for (uint32_t r : {16u, 32u, 64u, 128u}) {
        double errorSum = 0;
        for (uint64_t seed = 1; seed <= 6; ++seed) {
            Shape s;
            s.r = r;
            s.h = h;
            s.dv = 16;
            s.n = n;
            s.Hq = 1;
            s.causal = false;
            s.variant = uint32_t(seed);
            const auto run = runForward(ctx, s);
            ASSERT_TRUE(run);
            // The forward's scale is 1/sqrt(h): the sketch saw s q and k.
            const std::vector<float> sq = run->region(run->layout.qSketch), sk = run->region(run->layout.kSketch);
            const uint32_t F = r * (r + 1) / 2;
            std::vector<double> phiQ(size_t(n) * F), phiK(size_t(n) * F);
            for (uint32_t i = 0; i < n; ++i) {
                const auto a = psk::ref::selfTensorPacked(std::vector<double>(sq.begin() + i * r, sq.begin() + (i + 1) * r));
                const auto b = psk::ref::selfTensorPacked(std::vector<double>(sk.begin() + i * r, sk.begin() + (i + 1) * r));
                std::copy(a.begin(), a.end(), phiQ.begin() + size_t(i) * F);
                std::copy(b.begin(), b.end(), phiK.begin() + size_t(i) * F);
            }
            double num = 0, den = 0, minW = 0, maxW = 0;
            for (uint32_t i = 0; i < n; ++i) {
                for (uint32_t j = 0; j < n; ++j) {
                    double w = 0, dot = 0;
                    for (uint32_t f = 0; f < F; ++f) w += phiQ[size_t(i) * F + f] * phiK[size_t(j) * F + f];
                    for (uint32_t d = 0; d < h; ++d) dot += double(run->q[i * h + d]) * run->k[j * h + d];
                    const double exact = std::pow(dot * run->config.scale, 4);
                    num += (w - exact) * (w - exact);
                    den += exact * exact;
                    minW = std::min(minW, w);
                    maxW = std::max(maxW, w);
                }
            }
            EXPECT_GE(minW, -1e-9 * maxW) << "a sketched weight is negative (r = " << r << ")";
            errorSum += std::sqrt(num / den);
        }
        const double error = errorSum / 6;
        EXPECT_LT(error, previous) << "r = " << r;
        previous = error;
    }
}

}  // namespace

namespace {

// PskForwardStats.stageMilliseconds: polysketch enters all four stages, each takes time, and the
// stages add up to the whole (timestamps between the stages' dispatches); softmax has one stage.
TEST_F(PolysketchProperties, StageTimesAddUpToTheForwardTime) {
    const uint32_t h = 32, dv = 32, n = 700;
    const std::vector<float> q = psk::test::randomNormal(size_t(n) * h, 21), k = psk::test::randomNormal(size_t(n) * h, 22),
                             v = psk::test::randomNormal(size_t(n) * dv, 23);
    for (PskAttentionKind kind : {PSK_ATTENTION_KIND_POLYSKETCH, PSK_ATTENTION_KIND_SOFTMAX}) {
        PskAttentionCreateInfo info{};
        info.kind = kind;
        info.flags = PSK_ATTENTION_CAUSAL_BIT;
        info.headDim = h;
        info.valueDim = dv;
        info.sketchSize = 16;
        info.blockSize = 64;
        PskAttention attn = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
        std::vector<float> out(size_t(n) * dv);
        PskForwardStats stats{};
        for (double& ms : stats.stageMilliseconds) ms = -1.0;  // every entry must be written
        PskForwardHostInfo fwd{};
        fwd.seqLen = n;
        fwd.q = q.data();
        fwd.k = k.data();
        fwd.v = v.data();
        fwd.out = out.data();
        fwd.qBytes = q.size() * 4;
        fwd.kBytes = k.size() * 4;
        fwd.vBytes = v.size() * 4;
        fwd.outBytes = out.size() * 4;
        fwd.stats = &stats;
        ASSERT_EQ(pskAttentionForwardHost(attn, &fwd), PSK_SUCCESS);
        pskDestroyAttention(attn);
        ASSERT_GT(stats.gpuMilliseconds, 0.0);
        double sum = 0;
        for (uint32_t s = 0; s < PSK_FORWARD_STAGE_COUNT; ++s) {
            const bool present = kind == PSK_ATTENTION_KIND_POLYSKETCH || s == PSK_FORWARD_STAGE_OUTPUT;
            if (present) EXPECT_GT(stats.stageMilliseconds[s], 0.0) << "stage " << s;
            else EXPECT_EQ(stats.stageMilliseconds[s], 0.0) << "stage " << s;
            sum += stats.stageMilliseconds[s];
        }
        // Only the gap between the span's start and the first stage mark is outside the stages.
        EXPECT_NEAR(sum, stats.gpuMilliseconds, 0.02 * stats.gpuMilliseconds) << "kind " << kind;
    }
}

}  // namespace
