// psk conformance: one case on the device against the float64 reference. The inputs are normal
// random tensors rounded to the storage type, seeded by caseSeed(name) (reference/
// conformance_cases.hpp: FNV-1a 64 of the case's name, as in the tests), so every path sees the
// same ones; the sketch weights are those of the test suite (reference/sketch_fixtures), and
// the metric and thresholds reference/conformance_cases.hpp's.
#include "conformance_run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

#include "reference/device_layout.hpp"
#include "reference/reference.hpp"
#include "reference/storage_types.hpp"
#include "sketch/sketch_weights.hpp"
#include "reference/sketch_fixtures.hpp"

namespace psk::conformance {

// ---- Paths ---------------------------------------------------------------------------------------

namespace {

constexpr const char* kPathVariables[3] = {"PSK_DISABLE_TEAM_KERNELS", "PSK_DISABLE_COOPMAT", "PSK_COOPMAT_EMULATION"};

struct SavedEnvironment {
    bool saved = false;
    bool had[3] = {};
    std::string value[3];
};
SavedEnvironment& savedEnvironment() {
    static SavedEnvironment s;
    return s;
}

}  // namespace

const char* pathName(Path path) {
    switch (path) {
        case Path::Generic: return "generic";
        case Path::Team: return "team";
        case Path::Cooperative: return "cooperative";
        case Path::Emulated: return "emulated";
    }
    return "?";
}

bool parsePath(const std::string& text, Path* path) {
    for (Path p : {Path::Generic, Path::Team, Path::Cooperative, Path::Emulated}) {
        if (text == pathName(p)) {
            *path = p;
            return true;
        }
    }
    return false;
}

void selectPath(Path path) {
    SavedEnvironment& s = savedEnvironment();
    if (!s.saved) {
        for (int i = 0; i < 3; ++i) {
            const char* v = std::getenv(kPathVariables[i]);
            s.had[i] = v != nullptr;
            s.value[i] = v ? v : "";
        }
        s.saved = true;
    }
    // PSK_DISABLE_TEAM_KERNELS, PSK_DISABLE_COOPMAT, PSK_COOPMAT_EMULATION ("0" is off for each).
    const char* values[3] = {"1", "1", "0"};
    if (path == Path::Team) values[0] = "0";
    if (path == Path::Cooperative) values[0] = "0", values[1] = "0";
    if (path == Path::Emulated) values[0] = "0", values[1] = "0", values[2] = "1";
    for (int i = 0; i < 3; ++i) setenv(kPathVariables[i], values[i], 1);
}

void restoreEnvironment() {
    SavedEnvironment& s = savedEnvironment();
    if (!s.saved) return;
    for (int i = 0; i < 3; ++i) {
        if (s.had[i]) setenv(kPathVariables[i], s.value[i].c_str(), 1);
        else unsetenv(kPathVariables[i]);
    }
}

// ---- Helpers -------------------------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

std::vector<float> randomNormal(size_t count, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(count);
    for (float& x : v) x = dist(rng);
    return v;
}

std::vector<double> toDouble(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

/** One line of a plan: "<variant> (<implementation>) NAME=value ...: <reason>". */
struct PlanLine {
    std::string variant, implementation, reason;
};

std::vector<PlanLine> attentionPlan(PskAttention attention) {
    size_t size = 0;
    std::vector<PlanLine> lines;
    if (pskGetAttentionPlan(attention, nullptr, &size) != PSK_SUCCESS) return lines;
    std::string text(size, '\0');
    if (pskGetAttentionPlan(attention, text.data(), &size) != PSK_SUCCESS) return lines;
    text.resize(std::strlen(text.c_str()));
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;  // comments: switches, self-test verdicts
        PlanLine p;
        const size_t open = line.find(" ("), close = line.find(')', open == std::string::npos ? 0 : open);
        if (open == std::string::npos || close == std::string::npos) {
            p.variant = line;
        } else {
            p.variant = line.substr(0, open);
            p.implementation = line.substr(open + 2, close - open - 2);
            const size_t colon = line.find(": ", close);
            if (colon != std::string::npos) p.reason = line.substr(colon + 2);
        }
        lines.push_back(p);
    }
    return lines;
}

void describePlan(const std::vector<PlanLine>& plan, Outcome& o) {
    o.kernels.clear();
    for (const PlanLine& p : plan) o.kernels.push_back(p.variant + " (" + p.implementation + ")");
    std::string ran;
    for (const char* impl : {"cooperative", "team", "generic"}) {
        const bool used = std::any_of(plan.begin(), plan.end(), [&](const PlanLine& p) { return p.implementation == impl; });
        if (used) ran += (ran.empty() ? "" : "+") + std::string(impl);
    }
    o.ran = ran.empty() ? "?" : ran;
}

/**
 * Whether the plan runs `path`: empty when it does, else why not. Team, cooperative and emulated
 * need at least one kernel of their kind (the library chooses kernel by kernel where the shape
 * allows); generic needs every kernel generic.
 */
std::string pathMissing(const std::vector<PlanLine>& plan, Path path) {
    auto has = [&](const char* impl, const char* variantPart) {
        return std::any_of(plan.begin(), plan.end(), [&](const PlanLine& p) {
            return p.implementation == impl && (!variantPart || p.variant.find(variantPart) != std::string::npos);
        });
    };
    auto firstReason = [&](const char* kernel) {
        for (const PlanLine& p : plan)
            if (!kernel || p.variant.rfind(kernel, 0) == 0) return p.reason;
        return plan.empty() ? std::string("no plan") : plan.front().reason;
    };
    switch (path) {
        case Path::Generic:
            for (const PlanLine& p : plan)
                if (p.implementation != "generic") return "expected generic kernels only, got " + p.variant + " (" + p.implementation + ")";
            return {};
        case Path::Team:
            return has("team", nullptr) ? std::string() : "no lane-team kernel for this configuration: " + firstReason(nullptr);
        case Path::Cooperative:
            return has("cooperative", nullptr) ? std::string() : "no cooperative-matrix kernel: " + firstReason("block_states");
        case Path::Emulated:
            return has("cooperative", ".emu_") ? std::string() : "no emulated cooperative-matrix kernel: " + firstReason("block_states");
    }
    return {};
}

/**
 * One forward call from dense BHND tensors in the case's layout and storage type (as
 * tests/support/host_forward.cpp): the output array starts as NaN and the gaps between rows as a
 * sentinel, so that forgotten rows and writes into gaps are both caught.
 */
struct Forward {
    DeviceLayout layout;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    uint32_t Hq = 1, Hkv = 1, h = 1, dv = 1;
    bool explicitStrides = false;

    PskResult run(PskAttention attention, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                  std::vector<float>& dense, size_t& gapsTouched) const {
        const DeviceLayout& L = layout;
        const float sentinel = 12345.0f;
        const auto qDev = storage::encode(L.toDevice(q, Hq, h, 0.0f), type);
        const auto kDev = storage::encode(L.toDevice(k, Hkv, h, 0.0f), type);
        const auto vDev = storage::encode(L.toDevice(v, Hkv, dv, 0.0f), type);
        auto oDev = storage::encode(L.toDevice(std::vector<float>(size_t(L.B) * Hq * L.n * dv, NAN), Hq, dv, sentinel), type);
        const PskTensorStrides qs = L.strides(Hq, h), ks = L.strides(Hkv, h), vs = L.strides(Hkv, dv), os = L.strides(Hq, dv);
        PskForwardHostInfo fwd{};
        fwd.batchSize = L.B;
        fwd.seqLen = L.n;
        fwd.q = qDev.data();
        fwd.k = kDev.data();
        fwd.v = vDev.data();
        fwd.out = oDev.data();
        fwd.qBytes = qDev.size();
        fwd.kBytes = kDev.size();
        fwd.vBytes = vDev.size();
        fwd.outBytes = oDev.size();
        if (explicitStrides) {
            fwd.qStrides = &qs;
            fwd.kStrides = &ks;
            fwd.vStrides = &vs;
            fwd.outStrides = &os;
        }
        const PskResult r = pskAttentionForwardHost(attention, &fwd);
        if (r != PSK_SUCCESS) return r;
        const std::vector<float> all = storage::decode(oDev, type);
        dense = L.fromDevice(all, Hq, dv);
        gapsTouched = 0;
        if (L.tokenPad) {
            const float stored = storage::quantize({sentinel}, type)[0];
            for (uint32_t b = 0; b < L.B; ++b)
                for (uint32_t hh = 0; hh < Hq; ++hh)
                    for (uint32_t t = 0; t + 1 < L.n; ++t)
                        for (uint32_t d = dv; d < dv + L.tokenPad; ++d) gapsTouched += all[DeviceLayout::offset(os, b, hh, t) + d] != stored;
        }
        return PSK_SUCCESS;
    }
};

/** Sets the outcome from the output and the reference: PASS when the error is within the threshold. */
void judge(Outcome& o, const std::vector<float>& got, const std::vector<double>& want) {
    double maxRef = 0;
    for (double x : want) maxRef = std::max(maxRef, std::fabs(x));
    o.error = ref::relativeMaxError(got, want);
    if (!(maxRef > 1e-3)) {
        o.status = Outcome::Status::Fail;
        o.note = "the reference output is degenerate (max |ref| <= 1e-3): the case would prove nothing";
        return;
    }
    o.status = o.error <= o.threshold ? Outcome::Status::Pass : Outcome::Status::Fail;
    if (o.status == Outcome::Status::Fail) o.note = "error above the threshold";
}

/** Token-major [n][H][d] -> BHND [1][H][n][d], and back. */
std::vector<float> toBhnd(const std::vector<float>& x, uint32_t n, uint32_t H, uint32_t d) {
    std::vector<float> y(x.size());
    for (uint32_t t = 0; t < n; ++t)
        for (uint32_t hd = 0; hd < H; ++hd) std::memcpy(&y[(size_t(hd) * n + t) * d], &x[(size_t(t) * H + hd) * d], d * 4);
    return y;
}
std::vector<float> fromBhnd(const std::vector<float>& y, uint32_t n, uint32_t H, uint32_t d) {
    std::vector<float> x(y.size());
    for (uint32_t t = 0; t < n; ++t)
        for (uint32_t hd = 0; hd < H; ++hd) std::memcpy(&x[(size_t(t) * H + hd) * d], &y[(size_t(hd) * n + t) * d], d * 4);
    return x;
}

/** Releases an attention and a decode state on every way out. */
struct Handles {
    PskAttention attention = nullptr;
    PskDecodeState state = nullptr;
    ~Handles() {
        pskDestroyDecodeState(state);
        pskDestroyAttention(attention);
    }
};

}  // namespace

// ---- Runner --------------------------------------------------------------------------------------

void Runner::callback(PskMessageSeverity severity, PskResult, const char* message, void* user) {
    auto* self = static_cast<Runner*>(user);
    const std::string text = message ? message : "";
    std::lock_guard<std::mutex> lock(self->mutex_);
    if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) {
        ++self->validationMessages_;
        std::fprintf(stderr, "psk conformance: validation: %s\n", text.c_str());
    } else if (severity == PSK_MESSAGE_SEVERITY_ERROR) {
        self->lastError_ = text;
    } else if (text.rfind("device: ", 0) == 0 && text.find("validation on") != std::string::npos) {
        self->validationOn_ = true;
    }
}

PskResult Runner::open(const std::string& device, bool requireValidation) {
    PskContextCreateInfo ci{};
    ci.device = device.empty() ? nullptr : device.c_str();
    ci.flags = requireValidation ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : 0;
    ci.messageCallback = &Runner::callback;
    ci.messageUserData = this;
    return pskCreateContext(&ci, &ctx_);
}

Runner::~Runner() { pskDestroyContext(ctx_); }

bool Runner::validationOn() {
    std::lock_guard<std::mutex> lock(mutex_);
    return validationOn_;
}

uint64_t Runner::validationMessages() {
    std::lock_guard<std::mutex> lock(mutex_);
    return validationMessages_;
}

std::string Runner::describe(PskResult r) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string s = pskResultToString(r);
    if (!lastError_.empty()) s += ": " + lastError_;
    lastError_.clear();
    return s;
}

namespace {

/** A library call failed: the device cannot run the case (skip) or it is a failure. */
void callFailed(Outcome& o, PskResult r, const std::string& what, const std::string& message) {
    const bool cannot = r == PSK_ERROR_UNSUPPORTED || r == PSK_ERROR_TOO_LARGE;
    o.status = cannot ? Outcome::Status::Skip : Outcome::Status::Fail;
    o.note = (cannot ? "the device cannot run it: " : what + " failed: ") + message;
}

}  // namespace

std::string Runner::pathUnavailable(Path path) {
    PskDeviceInfo dev{};
    pskGetDeviceInfo(ctx_, &dev);
    if (path == Path::Cooperative && !dev.cooperativeMatrixNV && !dev.cooperativeMatrixKHR)
        return "the device has no cooperative matrices (VK_KHR_cooperative_matrix, VK_NV_cooperative_matrix)";
    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = PSK_ATTENTION_CAUSAL_BIT;
    info.headDim = 32;
    info.sketchSize = 16;
    info.blockSize = 32;
    info.dataType = path == Path::Cooperative || path == Path::Emulated ? PSK_DATA_TYPE_FLOAT16 : PSK_DATA_TYPE_FLOAT32;
    Handles h;
    const PskResult r = pskCreateAttention(ctx_, &info, &h.attention);
    if (r != PSK_SUCCESS) return "a probe attention failed: " + describe(r);
    return pathMissing(attentionPlan(h.attention), path);
}

Outcome Runner::run(const BaselineCase& c, Path path) {
    const auto t0 = Clock::now();
    Outcome o;
    o.threshold = threshold(c.type, Family::Quadratic) * thresholdScale;
    const uint64_t seed = caseSeed(name(c));
    const auto q = storage::quantize(randomNormal(size_t(c.B) * c.Hq * c.n * c.h, seed + 1), c.type);
    const auto k = storage::quantize(randomNormal(size_t(c.B) * c.Hkv * c.n * c.h, seed + 2), c.type);
    const auto v = storage::quantize(randomNormal(size_t(c.B) * c.Hkv * c.n * c.dv, seed + 3), c.type);
    // Polynomial weights need s q.k of order one to be meaningful; softmax uses its default.
    const float scale = 1.0f / std::sqrt(float(c.h));
    PskAttentionCreateInfo info{};
    info.kind = c.kind;
    info.flags = c.causal ? PSK_ATTENTION_CAUSAL_BIT : 0;
    info.degree = c.degree;
    info.scale = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0.0f : scale;
    info.numQueryHeads = c.Hq;
    info.numKeyValueHeads = c.Hkv;
    info.headDim = c.h;
    info.valueDim = c.dv;
    info.dataType = c.type;
    info.layout = c.layout;
    Handles h;
    PskResult r = pskCreateAttention(ctx_, &info, &h.attention);
    if (r != PSK_SUCCESS) {
        callFailed(o, r, "pskCreateAttention", describe(r));
        return o;
    }
    const std::vector<PlanLine> plan = attentionPlan(h.attention);
    describePlan(plan, o);
    if (path == Path::Cooperative || path == Path::Emulated) {  // attention_tiled_coopmat (16-bit storage)
        if (const std::string missing = pathMissing(plan, path); !missing.empty()) {
            o.status = Outcome::Status::Skip;
            o.note = missing;
            return o;
        }
    }
    Forward f;
    f.layout = {c.B, c.n, c.layout, c.tokenPad};
    f.type = c.type;
    f.Hq = c.Hq;
    f.Hkv = c.Hkv;
    f.h = c.h;
    f.dv = c.dv;
    f.explicitStrides = c.tokenPad != 0;
    std::vector<float> got;
    size_t gaps = 0;
    r = f.run(h.attention, q, k, v, got, gaps);
    if (r != PSK_SUCCESS) {
        callFailed(o, r, "pskAttentionForwardHost", describe(r));
        return o;
    }
    const ref::Shape shape{int(c.B), int(c.Hq), int(c.Hkv), int(c.n), int(c.h), int(c.dv)};
    std::vector<double> want;
    if (c.kind == PSK_ATTENTION_KIND_SOFTMAX)
        ref::softmaxAttention(shape, toDouble(q), toDouble(k), toDouble(v), 1.0 / std::sqrt(double(c.h)), c.causal, want);
    else
        ref::polynomialAttention(shape, toDouble(q), toDouble(k), toDouble(v), scale, int(c.degree), c.causal, want);
    judge(o, got, want);
    if (gaps) {
        o.status = Outcome::Status::Fail;
        o.note = std::to_string(gaps) + " elements written between output rows (custom strides)";
    }
    o.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return o;
}

Outcome Runner::run(const PolysketchCase& c, Path path) {
    const auto t0 = Clock::now();
    Outcome o;
    o.threshold = threshold(c.type, Family::Polysketch) * thresholdScale;
    const uint64_t seed = caseSeed(name(c));
    const auto q = storage::quantize(randomNormal(size_t(c.B) * c.Hq * c.n * c.h, seed + 1), c.type);
    const auto k = storage::quantize(randomNormal(size_t(c.B) * c.Hkv * c.n * c.h, seed + 2), c.type);
    const auto v = storage::quantize(randomNormal(size_t(c.B) * c.Hkv * c.n * c.dv, seed + 3), c.type);
    const float scale = 1.0f / std::sqrt(float(c.h));

    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = (c.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (c.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0) |
                 (c.referenceScaling ? PSK_ATTENTION_REFERENCE_SCALING_BIT : 0);
    info.degree = c.degree;
    info.scale = scale;
    info.numQueryHeads = c.Hq;
    info.numKeyValueHeads = c.Hkv;
    info.headDim = c.h;
    info.valueDim = c.dv;
    info.dataType = c.type;
    info.layout = c.layout;
    info.sketchSize = c.r;
    info.blockSize = c.b;
    info.seed = seed;

    // The sketch, on the library's side (info: a seed or a file) and the reference's.
    ref::PolysketchConfig config;
    test::TempFile sketchFile("psk_conformance_sketch"), normFile("psk_conformance_qknorm");
    if (c.source == SketchSource::Learned) {
        const LearnedSketchWeights w = test::randomLearnedSketch(c.h, c.r, seed + 4);
        writeSafeTensors(sketchFile.path(), learnedSketchToSafeTensors(w));
        info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
        info.sketchFile = sketchFile.path().c_str();
        config.sketch = ref::sketchFunction(test::toReference(w));
    } else {
        RandomSketchWeights w = generateRandomSketch(seed, c.degree, c.h, c.r);
        w.referenceScaling = c.referenceScaling;
        if (c.source == SketchSource::File) {
            writeSafeTensors(sketchFile.path(), randomSketchToSafeTensors(w));
            info.sketchSource = PSK_SKETCH_SOURCE_FILE;
            info.sketchFile = sketchFile.path().c_str();
        }
        config.sketch = ref::sketchFunction(test::toReference(w));
    }
    ref::LayerNormParams qkNorm, localNorm;
    if (c.qkNorm) {
        const QkNormWeights norm = test::randomQkNorm(c.h, c.localNorm, seed + 5);
        writeSafeTensors(normFile.path(), qkNormToSafeTensors(norm));
        info.qkNormFile = normFile.path().c_str();
        qkNorm = test::toReference(norm.scale, norm.bias);
        config.qkNorm = &qkNorm;
        if (c.localNorm) {
            localNorm = test::toReference(norm.localScale, norm.localBias);
            config.localNorm = &localNorm;
        }
    }
    config.degree = int(c.degree);
    config.scale = scale;
    config.causal = c.causal;
    config.localExact = c.localExact;
    config.blockSize = int(c.b);

    Handles h;
    PskResult r = pskCreateAttention(ctx_, &info, &h.attention);
    if (r != PSK_SUCCESS) {
        callFailed(o, r, "pskCreateAttention", describe(r));
        return o;
    }
    const std::vector<PlanLine> plan = attentionPlan(h.attention);
    describePlan(plan, o);
    if (const std::string missing = pathMissing(plan, path); !missing.empty()) {
        o.status = path == Path::Generic ? Outcome::Status::Fail : Outcome::Status::Skip;
        o.note = missing;
        return o;
    }
    Forward f;
    f.layout = {c.B, c.n, c.layout, c.tokenPad};
    f.type = c.type;
    f.Hq = c.Hq;
    f.Hkv = c.Hkv;
    f.h = c.h;
    f.dv = c.dv;
    f.explicitStrides = c.tokenPad != 0;
    std::vector<float> got;
    size_t gaps = 0;
    r = f.run(h.attention, q, k, v, got, gaps);
    if (r != PSK_SUCCESS) {
        callFailed(o, r, "pskAttentionForwardHost", describe(r));
        return o;
    }
    const ref::Shape shape{int(c.B), int(c.Hq), int(c.Hkv), int(c.n), int(c.h), int(c.dv)};
    std::vector<double> want;
    ref::polysketchAttention(shape, toDouble(q), toDouble(k), toDouble(v), config, want);
    judge(o, got, want);
    if (gaps) {
        o.status = Outcome::Status::Fail;
        o.note = std::to_string(gaps) + " elements written between output rows (custom strides)";
    }
    o.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return o;
}

std::vector<Outcome> Runner::run(const DecodeCase& c, Path path) {
    const auto t0 = Clock::now();
    std::vector<Outcome> out(2);
    Outcome &vsRef = out[0], &vsFwd = out[1];
    vsRef.threshold = kPolysketchFloat32 * thresholdScale;
    vsFwd.threshold = kDecodeVsForward * thresholdScale;
    auto finish = [&](Outcome::Status status, const std::string& note) {
        for (Outcome& o : out) {
            o.status = status;
            o.note = note;
            o.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        }
        return out;
    };
    const bool softmax = c.kind == PSK_ATTENTION_KIND_SOFTMAX;
    const uint64_t seed = caseSeed(name(c));
    const float scale = softmax ? 0.0f : 1.0f / std::sqrt(float(c.h));

    PskAttentionCreateInfo info{};
    info.kind = c.kind;
    info.flags = PSK_ATTENTION_CAUSAL_BIT | (c.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    info.degree = c.degree;
    info.scale = scale;
    info.numQueryHeads = c.Hq;
    info.numKeyValueHeads = c.Hkv;
    info.headDim = c.h;
    info.valueDim = c.dv;
    info.sketchSize = softmax ? 0 : c.r;
    info.blockSize = softmax ? 0 : c.b;
    info.seed = seed;
    ref::PolysketchConfig config;
    test::TempFile sketchFile("psk_conformance_decode_sketch");
    if (!softmax) {
        if (c.learned) {
            const LearnedSketchWeights w = test::randomLearnedSketch(c.h, c.r, seed + 4);
            writeSafeTensors(sketchFile.path(), learnedSketchToSafeTensors(w));
            info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
            info.sketchFile = sketchFile.path().c_str();
            config.sketch = ref::sketchFunction(test::toReference(w));
        } else {
            config.sketch = ref::sketchFunction(test::toReference(generateRandomSketch(seed, c.degree, c.h, c.r)));
        }
        config.degree = int(c.degree);
        config.scale = scale;
        config.causal = true;
        config.localExact = c.localExact;
        config.blockSize = int(c.b);
    }

    Handles h;
    PskResult r = pskCreateAttention(ctx_, &info, &h.attention);
    if (r != PSK_SUCCESS) {
        callFailed(vsRef, r, "pskCreateAttention", describe(r));
        return finish(vsRef.status, vsRef.note);
    }
    const std::vector<PlanLine> plan = attentionPlan(h.attention);
    describePlan(plan, vsRef);
    describePlan(plan, vsFwd);
    if (const std::string missing = pathMissing(plan, path); !missing.empty())
        return finish(path == Path::Generic ? Outcome::Status::Fail : Outcome::Status::Skip, missing);

    const uint32_t S = uint32_t(c.prompts.size());
    const uint32_t longest = *std::max_element(c.prompts.begin(), c.prompts.end());
    PskDecodeStateCreateInfo si{};
    si.batchSize = S;
    si.capacity = softmax ? longest + c.steps : 0;
    r = pskCreateDecodeState(h.attention, &si, &h.state);
    if (r != PSK_SUCCESS) {
        callFailed(vsRef, r, "pskCreateDecodeState", describe(r));
        return finish(vsRef.status, vsRef.note);
    }

    // What each sequence consumed (token-major [t][head][dim]) and the rows it produced.
    struct Sequence {
        std::vector<float> q, k, v, out;
        uint32_t tokens = 0;
    };
    std::vector<Sequence> seqs(S);
    uint64_t rng = seed + 1000;
    for (uint32_t s = 0; s < S; ++s) {
        const uint32_t n = c.prompts[s];
        Sequence& sq = seqs[s];
        sq.q = randomNormal(size_t(n) * c.Hq * c.h, ++rng);
        sq.k = randomNormal(size_t(n) * c.Hkv * c.h, ++rng);
        sq.v = randomNormal(size_t(n) * c.Hkv * c.dv, ++rng);
        const auto q = toBhnd(sq.q, n, c.Hq, c.h), k = toBhnd(sq.k, n, c.Hkv, c.h), v = toBhnd(sq.v, n, c.Hkv, c.dv);
        std::vector<float> o(size_t(n) * c.Hq * c.dv, NAN);
        PskDecodePrefillInfo p{};
        p.firstSequence = s;
        p.seqLen = n;
        p.q = q.data();
        p.k = k.data();
        p.v = v.data();
        p.out = o.data();
        p.qBytes = q.size() * 4;
        p.kBytes = k.size() * 4;
        p.vBytes = v.size() * 4;
        p.outBytes = o.size() * 4;
        r = pskDecodePrefillHost(h.state, &p);
        if (r != PSK_SUCCESS) {
            callFailed(vsRef, r, "pskDecodePrefillHost", describe(r));
            return finish(vsRef.status, vsRef.note);
        }
        sq.out = fromBhnd(o, n, c.Hq, c.dv);
        sq.tokens = n;
    }
    for (uint32_t t = 0; t < c.steps; ++t) {
        const auto q = randomNormal(size_t(S) * c.Hq * c.h, ++rng), k = randomNormal(size_t(S) * c.Hkv * c.h, ++rng),
                   v = randomNormal(size_t(S) * c.Hkv * c.dv, ++rng);
        std::vector<float> o(size_t(S) * c.Hq * c.dv, NAN);
        PskDecodeStepInfo step{};
        step.q = q.data();
        step.k = k.data();
        step.v = v.data();
        step.out = o.data();
        step.qBytes = q.size() * 4;
        step.kBytes = k.size() * 4;
        step.vBytes = v.size() * 4;
        step.outBytes = o.size() * 4;
        r = pskDecodeStepHost(h.state, &step);
        if (r != PSK_SUCCESS) {
            callFailed(vsRef, r, "pskDecodeStepHost", describe(r));
            return finish(vsRef.status, vsRef.note);
        }
        for (uint32_t s = 0; s < S; ++s) {
            Sequence& sq = seqs[s];
            auto append = [&](std::vector<float>& dst, const std::vector<float>& src, size_t per) {
                dst.insert(dst.end(), src.begin() + s * per, src.begin() + (s + 1) * per);
            };
            append(sq.q, q, size_t(c.Hq) * c.h);
            append(sq.k, k, size_t(c.Hkv) * c.h);
            append(sq.v, v, size_t(c.Hkv) * c.dv);
            append(sq.out, o, size_t(c.Hq) * c.dv);
            ++sq.tokens;
        }
    }

    // Every row of every sequence against the forward over the same tokens and the float64 reference.
    vsRef.error = vsFwd.error = 0;
    std::string note;
    for (uint32_t s = 0; s < S; ++s) {
        const Sequence& sq = seqs[s];
        const uint32_t n = sq.tokens;
        uint64_t position = 0;
        if (pskGetDecodePosition(h.state, s, &position) != PSK_SUCCESS || position != n)
            note = "sequence " + std::to_string(s) + " is at position " + std::to_string(position) + ", not " + std::to_string(n);
        const auto q = toBhnd(sq.q, n, c.Hq, c.h), k = toBhnd(sq.k, n, c.Hkv, c.h), v = toBhnd(sq.v, n, c.Hkv, c.dv);
        Forward f;
        f.layout = {1, n, PSK_LAYOUT_BHND, 0};
        f.Hq = c.Hq;
        f.Hkv = c.Hkv;
        f.h = c.h;
        f.dv = c.dv;
        std::vector<float> forward;
        size_t gaps = 0;
        r = f.run(h.attention, q, k, v, forward, gaps);
        if (r != PSK_SUCCESS) {
            callFailed(vsRef, r, "pskAttentionForwardHost", describe(r));
            return finish(vsRef.status, vsRef.note);
        }
        const ref::Shape shape{1, int(c.Hq), int(c.Hkv), int(n), int(c.h), int(c.dv)};
        std::vector<double> want;
        if (softmax)
            ref::softmaxAttention(shape, toDouble(q), toDouble(k), toDouble(v), 1.0 / std::sqrt(double(c.h)), true, want);
        else
            ref::polysketchAttention(shape, toDouble(q), toDouble(k), toDouble(v), config, want);
        Outcome a = vsRef, b = vsFwd;
        // The reference in token-major order (the decoded rows' order).
        std::vector<double> want64(want.size());
        for (uint32_t tk = 0; tk < n; ++tk)
            for (uint32_t hd = 0; hd < c.Hq; ++hd)
                for (uint32_t e = 0; e < c.dv; ++e) want64[(size_t(tk) * c.Hq + hd) * c.dv + e] = want[(size_t(hd) * n + tk) * c.dv + e];
        judge(a, sq.out, want64);
        judge(b, sq.out, toDouble(fromBhnd(forward, n, c.Hq, c.dv)));
        for (auto [mine, one] : {std::pair<Outcome*, Outcome*>{&vsRef, &a}, {&vsFwd, &b}}) {
            if (s == 0 || !(one->error <= mine->error)) mine->error = one->error;
            if (s == 0 || one->status == Outcome::Status::Fail) {
                mine->status = one->status;
                mine->note = one->note;
            }
        }
    }
    for (Outcome& o : out) {
        if (!note.empty()) {
            o.status = Outcome::Status::Fail;
            o.note = note;
        }
        o.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    return out;
}

}  // namespace psk::conformance
