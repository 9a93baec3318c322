// psk demo: the main job of the README. Random q, k, v on the best device present (or the one
// PSK_DEVICE / --device names): softmax, exact polynomial and polysketch attention, their GPU
// time, and their error against the float64 CPU reference of the same function (polysketch: with
// the same sketch), held to the conformance thresholds (reference/conformance_cases.hpp); exit
// status 1 when one exceeds its tolerance. Polysketch's approximation error against exact
// polynomial attention, the thing it approximates, is printed too, not checked.
#include <polysketch/polysketch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/error_metric.hpp"
#include "reference/reference.hpp"
#include "reference/storage_types.hpp"
#include "sketch/sketch_weights.hpp"
#include "reference/sketch_fixtures.hpp"

namespace {

// The polysketch the demo runs: p = 4, r = 32, b = 256, this seed's random sketch.
constexpr uint32_t kDegree = 4, kSketchSize = 32, kBlockSize = 256;
constexpr uint64_t kSketchSeed = 2024;

struct DemoOptions {
    uint32_t n = 1024, heads = 4, dim = 64, runs = 5;
    double thresholdScale = 1.0;  // --threshold-scale: tolerances times this (tests make the demo fail with it)
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    bool causal = true;
    const char* device = nullptr;
};

void demoUsage() {
    std::printf(
        "usage: psk demo [--n N] [--heads H] [--dim D] [--dtype f32|f16|bf16] [--full] [--runs R] [--device SEL]\n"
        "                [--threshold-scale X]\n"
        "\n"
        "Runs softmax, exact polynomial (p = 4) and polysketch (p = 4, r = 32, b = 256, local exact when\n"
        "causal, seeded sketch) attention on random inputs and prints the median GPU time of R runs and\n"
        "the error against the float64 CPU reference of the same function (polysketch: the same sketch)\n"
        "next to its tolerance, the conformance threshold: f32 %.1e (softmax, polynomial) and %.1e\n"
        "(polysketch), f16 %.1e, bf16 %.1e. Polysketch's approximation error against exact polynomial\n"
        "attention is printed too, not checked. Exit status: 0 when every error is within its\n"
        "tolerance, 1 when one is not (or a call fails), 2 for a bad command line. --threshold-scale X\n"
        "multiplies every tolerance by X (1e-12: float rounding alone exceeds them, the run must fail).\n"
        "Defaults: --n 1024 --heads 4 --dim 64 --dtype f32 --runs 5, causal.\n"
        "SEL is a device index or part of its name (see psk info); default: PSK_DEVICE or the best.\n",
        psk::conformance::kQuadraticFloat32, psk::conformance::kPolysketchFloat32, psk::conformance::kFloat16,
        psk::conformance::kBFloat16);
}

bool parseUint(const char* s, uint32_t* out) {
    char* end = nullptr;
    const unsigned long v = std::strtoul(s, &end, 10);
    if (!s[0] || *end || v == 0 || v > 1u << 24) return false;
    *out = static_cast<uint32_t>(v);
    return true;
}

void onMessage(PskMessageSeverity severity, PskResult result, const char* message, void*) {
    if (severity == PSK_MESSAGE_SEVERITY_ERROR) std::fprintf(stderr, "psk demo: %s (%s)\n", message, pskResultToString(result));
}

}  // namespace

int runDemo(int argc, char** argv) {
    DemoOptions o;
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
        auto need = [&](uint32_t* field) {
            if (!next || !parseUint(next, field)) {
                std::fprintf(stderr, "psk demo: %s needs a positive integer\n", a.c_str());
                return false;
            }
            ++i;
            return true;
        };
        if (a == "--help" || a == "-h") {
            demoUsage();
            return 0;
        } else if (a == "--n") {
            if (!need(&o.n)) return 2;
        } else if (a == "--heads") {
            if (!need(&o.heads)) return 2;
        } else if (a == "--dim") {
            if (!need(&o.dim)) return 2;
        } else if (a == "--runs") {
            if (!need(&o.runs)) return 2;
        } else if (a == "--full") {
            o.causal = false;
        } else if (a == "--threshold-scale" && next) {
            char* end = nullptr;
            o.thresholdScale = std::strtod(next, &end);
            ++i;
            if (!next[0] || *end || !(o.thresholdScale > 0) || !std::isfinite(o.thresholdScale)) {
                std::fprintf(stderr, "psk demo: --threshold-scale needs a positive number\n");
                return 2;
            }
        } else if (a == "--device" && next) {
            o.device = next;
            ++i;
        } else if (a == "--dtype" && next) {
            const std::string t = next;
            ++i;
            if (t == "f32") o.type = PSK_DATA_TYPE_FLOAT32;
            else if (t == "f16") o.type = PSK_DATA_TYPE_FLOAT16;
            else if (t == "bf16") o.type = PSK_DATA_TYPE_BFLOAT16;
            else {
                std::fprintf(stderr, "psk demo: --dtype takes f32, f16 or bf16\n");
                return 2;
            }
        } else {
            std::fprintf(stderr, "psk demo: unknown option '%s'\n", a.c_str());
            demoUsage();
            return 2;
        }
    }

    PskContextCreateInfo ci{};
    ci.device = o.device;
    ci.messageCallback = onMessage;
    PskContext ctx = nullptr;
    if (pskCreateContext(&ci, &ctx) != PSK_SUCCESS) return 1;
    PskDeviceInfo dev;
    pskGetDeviceInfo(ctx, &dev);
    std::printf("device: %s (%s %s)\n", dev.name, dev.driverName, dev.driverInfo);
    const char* typeName = o.type == PSK_DATA_TYPE_FLOAT32 ? "f32" : o.type == PSK_DATA_TYPE_FLOAT16 ? "f16" : "bf16";
    std::printf("shape: B=1 H=%u n=%u h=dv=%u, %s storage, %s\n\n", o.heads, o.n, o.dim, typeName, o.causal ? "causal" : "full");

    const size_t count = size_t(o.heads) * o.n * o.dim;
    std::mt19937_64 rng(2024);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> q(count), k(count), v(count);
    for (auto* t : {&q, &k, &v})
        for (float& x : *t) x = normal(rng);
    q = psk::storage::quantize(q, o.type);
    k = psk::storage::quantize(k, o.type);
    v = psk::storage::quantize(v, o.type);
    const auto qb = psk::storage::encode(q, o.type), kb = psk::storage::encode(k, o.type), vb = psk::storage::encode(v, o.type);
    std::vector<uint8_t> ob(qb.size());
    const std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
    const psk::ref::Shape shape{1, int(o.heads), int(o.heads), int(o.n), int(o.dim), int(o.dim)};
    const double scale = 1.0 / std::sqrt(double(o.dim));

    std::printf("%-22s %12s %14s %16s %11s\n", "kind", "median ms", "tokens/s", "max rel. error", "tolerance");
    int status = 0;
    double approximation = NAN;
    std::vector<std::string> failed;
    for (PskAttentionKind kind : {PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_KIND_POLYNOMIAL, PSK_ATTENTION_KIND_POLYSKETCH}) {
        PskAttentionCreateInfo ai{};
        ai.kind = kind;
        ai.flags = o.causal ? PSK_ATTENTION_CAUSAL_BIT : 0;
        if (kind == PSK_ATTENTION_KIND_POLYSKETCH && o.causal) ai.flags |= PSK_ATTENTION_LOCAL_EXACT_BIT;
        ai.degree = kDegree;
        ai.scale = static_cast<float>(scale);
        ai.numQueryHeads = o.heads;
        ai.headDim = o.dim;
        ai.dataType = o.type;
        ai.sketchSize = kSketchSize;
        ai.blockSize = kBlockSize;
        ai.seed = kSketchSeed;
        PskAttention attn = nullptr;
        if (pskCreateAttention(ctx, &ai, &attn) != PSK_SUCCESS) {
            status = 1;
            continue;
        }
        PskForwardStats stats{};
        PskForwardHostInfo f{};
        f.seqLen = o.n;
        f.q = qb.data();
        f.k = kb.data();
        f.v = vb.data();
        f.out = ob.data();
        f.qBytes = qb.size();
        f.kBytes = kb.size();
        f.vBytes = vb.size();
        f.outBytes = ob.size();
        f.stats = &stats;
        std::vector<double> times;
        for (uint32_t r = 0; r < o.runs + 1; ++r) {  // the first run warms up
            if (pskAttentionForwardHost(attn, &f) != PSK_SUCCESS) {
                status = 1;
                break;
            }
            if (r > 0) times.push_back(stats.gpuMilliseconds);
        }
        pskDestroyAttention(attn);
        if (times.empty()) continue;
        std::sort(times.begin(), times.end());
        const double median = times[times.size() / 2];

        const std::vector<float> got = psk::storage::decode(ob, o.type);
        std::vector<double> want;
        if (kind == PSK_ATTENTION_KIND_SOFTMAX)
            psk::ref::softmaxAttention(shape, qd, kd, vd, scale, o.causal, want);
        else if (kind == PSK_ATTENTION_KIND_POLYNOMIAL)
            psk::ref::polynomialAttention(shape, qd, kd, vd, scale, int(kDegree), o.causal, want);
        else {
            // The same function in float64, with the very sketch the library generates from the seed.
            psk::ref::PolysketchConfig sketched;
            sketched.sketch = psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(kSketchSeed, kDegree, o.dim, kSketchSize)));
            sketched.degree = int(kDegree);
            sketched.scale = scale;
            sketched.causal = o.causal;
            sketched.localExact = o.causal;
            sketched.blockSize = int(kBlockSize);
            psk::ref::polysketchAttention(shape, qd, kd, vd, sketched, want);
        }
        const double err = psk::ref::relativeMaxError(got, want);
        const double tolerance =
            o.thresholdScale * psk::conformance::threshold(o.type, kind == PSK_ATTENTION_KIND_POLYSKETCH ? psk::conformance::Family::Polysketch
                                                                                                          : psk::conformance::Family::Quadratic);
        const bool ok = err <= tolerance;  // false for NaN too
        const char* name = kind == PSK_ATTENTION_KIND_SOFTMAX      ? "softmax"
                           : kind == PSK_ATTENTION_KIND_POLYNOMIAL ? "polynomial (p=4)"
                                                                   : "polysketch (p=4, r=32)";
        std::printf("%-22s %12.3f %14.0f %16.2e %11.2e  %s\n", name, median, median > 0 ? o.n * 1e3 / median : 0.0, err, tolerance,
                    ok ? "ok" : "EXCEEDS");
        if (!ok) failed.push_back(name);
        if (kind == PSK_ATTENTION_KIND_POLYSKETCH) {
            std::vector<double> exact;
            psk::ref::polynomialAttention(shape, qd, kd, vd, scale, int(kDegree), o.causal, exact);
            approximation = psk::ref::relativeMaxError(got, exact);
        }
    }
    if (!std::isnan(approximation))
        std::printf("\npolysketch against exact polynomial attention (its approximation error, not checked): %.2e\n", approximation);
    std::printf("\nerror: max |gpu - ref| / max |ref| against the float64 CPU reference of the same function on the\n"
                "same rounded inputs (polysketch: with the same r = %u sketch); tolerance: the conformance threshold\n"
                "of the kind and storage type (reference/conformance_cases.hpp)\n",
                kSketchSize);
    if (failed.empty() && status == 0) {
        std::printf("accuracy: PASS, every error within its tolerance\n");
    } else if (!failed.empty()) {
        std::string which;
        for (const std::string& f : failed) which += (which.empty() ? "" : ", ") + f;
        std::printf("accuracy: FAIL, above the tolerance: %s\n", which.c_str());
        status = 1;
    } else {
        std::printf("accuracy: FAIL, a call failed (see the messages above)\n");
    }
    pskDestroyContext(ctx);
    return status;
}
