#include "forward/coopmat_self_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "forward/attention.hpp"
#include "forward/coopmat_switches.hpp"
#include "kernels/kernel_table.hpp"
#include "util/error.hpp"
#include "util/float16.hpp"
#include "util/storage_type.hpp"
#include "vk/context.hpp"

namespace psk {

namespace {

/** The verdicts of this process: a cache of facts about (device, driver, kernel), never stale. */
struct VerdictCache {
    std::mutex mutex;
    std::map<std::string, std::vector<CoopSelfTestVerdict>> byDevice;  // device key -> verdicts in order
    std::set<std::string> passed;    // device key | variant | constants
    std::set<std::string> disabled;  // device key | variant (every configuration of a kernel that failed once)
};

VerdictCache& cache() {
    static VerdictCache c;  // function-local: built on first use, thread-safe
    return c;
}

std::string deviceKey(const DeviceCaps& caps) {
    const VkPhysicalDeviceProperties& p = caps.properties;
    char uuid[2 * VK_UUID_SIZE + 1];
    for (uint32_t i = 0; i < VK_UUID_SIZE; ++i) std::snprintf(uuid + 2 * i, 3, "%02x", p.pipelineCacheUUID[i]);
    return cat(p.vendorID, ":", p.deviceID, ":", p.driverVersion, ":", uuid);
}

std::string deviceText(const DeviceCaps& caps) {
    return cat(caps.properties.deviceName, " (driver version ", caps.properties.driverVersion, ")");
}

uint32_t stageOf(KernelId id) {
    switch (id) {
        case KernelId::SketchFeaturesCoopMat: return kCoopFeatures;
        case KernelId::BlockStatesCoopMat: return kCoopStates;
        case KernelId::PolysketchOutputCoopMat: return kCoopOutput;
        case KernelId::AttentionTiledCoopMat: return kCoopBaselines;
        case KernelId::AttentionFlashCoopMat: return kCoopBaselines;
        default: return 0;
    }
}

bool emulatedVariant(const std::string& variant) { return variant.find(".emu_") != std::string::npos; }

/** Inputs of the known-answer case: a fixed-seed sequence, uniform in [-1, 1), as storage bits. */
std::vector<uint8_t> probeInput(size_t elements, PskDataType type, uint32_t seed) {
    std::vector<uint8_t> bytes(elements * elementBytes(type));
    uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (size_t i = 0; i < elements; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const float x = float(double(state >> 40) / double(1ull << 24)) * 2.0f - 1.0f;
        if (type == PSK_DATA_TYPE_FLOAT32) {
            std::memcpy(bytes.data() + 4 * i, &x, 4);
        } else {
            const uint16_t h = type == PSK_DATA_TYPE_FLOAT16 ? floatToHalf(x) : floatToBf16(x);
            std::memcpy(bytes.data() + 2 * i, &h, 2);
        }
    }
    return bytes;
}

float storedValue(const std::vector<uint8_t>& bytes, size_t i, PskDataType type) {
    if (type == PSK_DATA_TYPE_FLOAT32) {
        float x;
        std::memcpy(&x, bytes.data() + 4 * i, 4);
        return x;
    }
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    return type == PSK_DATA_TYPE_FLOAT16 ? halfToFloat(h) : bf16ToFloat(h);
}

struct ProbeShape {
    uint32_t tokens = 0;
    size_t qElems = 0, kElems = 0, vElems = 0, outElems = 0;
};

ProbeShape probeShape(const AttentionConfig& c) {
    ProbeShape s;
    // Three blocks and a partial one (causal: the prefix state, the scan, the local part and a
    // short last block all run), at most 1061 tokens: a few milliseconds on a GPU.
    s.tokens = std::min<uint32_t>(3 * c.blockSize + 29, 1061);
    s.qElems = size_t(c.numQueryHeads) * s.tokens * c.headDim;
    s.kElems = size_t(c.numKeyValueHeads) * s.tokens * c.headDim;
    s.vElems = size_t(c.numKeyValueHeads) * s.tokens * c.valueDim;
    s.outElems = size_t(c.numQueryHeads) * s.tokens * c.valueDim;
    return s;
}

/** One probe forward: the attention's configuration with `coopStages`, batch 1, the layout's default strides. */
std::vector<uint8_t> runProbe(PskContext_T* context, const PskAttentionCreateInfo& info, const AttentionConfig& c, uint32_t coopStages,
                              const ProbeShape& s, AttentionConfig::ProbeWalk walk = AttentionConfig::ProbeWalk::Plan) {
    PskAttention_T probe(context, info, coopStages, true, walk);
    const PskDataType type = c.dataType;
    const std::vector<uint8_t> q = probeInput(s.qElems, type, 1), k = probeInput(s.kElems, type, 2), v = probeInput(s.vElems, type, 3);
    std::vector<uint8_t> out(s.outElems * elementBytes(type));
    PskForwardHostInfo f{};
    f.batchSize = 1;
    f.seqLen = s.tokens;
    f.q = q.data();
    f.k = k.data();
    f.v = v.data();
    f.out = out.data();
    f.qBytes = q.size();
    f.kBytes = k.size();
    f.vBytes = v.size();
    f.outBytes = out.size();
    probe.forwardHost(f);
    return out;
}

/** Relative tolerance of a probe against the generic kernels: 5x the conformance thresholds (docs/RELIABILITY.md). */
double probeTolerance(PskDataType type) { return type == PSK_DATA_TYPE_BFLOAT16 ? 6e-2 : 1e-2; }

}  // namespace

uint32_t coopSelfTest(PskContext_T* context, const PskAttentionCreateInfo& info, const AttentionConfig& config,
                      const std::vector<KernelChoice>& kernels) {
    const CoopMatSwitches switches = coopMatSwitches();
    if (switches.selfTest == CoopSelfTestMode::Off || config.selfTestProbe) return 0;
    const DeviceCaps& caps = context->caps();
    const std::string device = deviceKey(caps);
    // The switches shape the kernels (the fault injection above all): part of the key; the
    // self-test's own mode does not, so a verdict holds whichever mode found it.
    CoopMatSwitches shaping = switches;
    shaping.selfTest = CoopSelfTestMode::Hardware;
    const std::string salt = describeCoopMatSwitches(shaping);
    uint32_t off = 0;
    for (const KernelChoice& k : kernels) {
        const uint32_t stage = stageOf(k.kernel);
        if (!stage || !(config.coopStages & stage) || (off & stage)) continue;
        if (emulatedVariant(k.variant) && switches.selfTest == CoopSelfTestMode::Hardware) continue;
        const std::string variantKey = device + "|" + salt + "|" + k.variant;
        const std::string fullKey = variantKey + "|" + k.constants.describe();
        {
            VerdictCache& c = cache();
            std::lock_guard<std::mutex> lock(c.mutex);
            if (c.disabled.count(variantKey)) {
                off |= stage;
                continue;
            }
            if (c.passed.count(fullKey)) continue;
        }
        if (switches.selfTest == CoopSelfTestMode::Known) continue;  // no probe: the caller checks (psk tune)
        // Both probes, then the comparison. A probe that cannot run (out of memory, a device
        // lost) decides nothing: the error reaches the caller, whose attention fails as it would.
        const ProbeShape shape = probeShape(config);
        const std::vector<uint8_t> generic = runProbe(context, info, config, 0, shape);
        // The block states have two kernels (per block, walking): each probe runs the one it checks.
        AttentionConfig::ProbeWalk walk = AttentionConfig::ProbeWalk::Plan;
        if (k.kernel == KernelId::BlockStatesCoopMat)
            for (size_t i = 0; i < k.constants.names.size(); ++i)
                if (std::strcmp(k.constants.names[i], "WALK") == 0)
                    walk = k.constants.values[i] ? AttentionConfig::ProbeWalk::Force : AttentionConfig::ProbeWalk::Forbid;
        const std::vector<uint8_t> coop = runProbe(context, info, config, stage, shape, walk);
        double maxRef = 0.0, maxDiff = 0.0;
        size_t nonFinite = 0;
        for (size_t i = 0; i < shape.outElems; ++i) {
            const double g = storedValue(generic, i, config.dataType), x = storedValue(coop, i, config.dataType);
            if (!std::isfinite(g)) continue;  // the generic kernel's own (not expected: random inputs)
            if (!std::isfinite(x)) {
                ++nonFinite;
                continue;
            }
            maxRef = std::max(maxRef, std::fabs(g));
            maxDiff = std::max(maxDiff, std::fabs(x - g));
        }
        const double error = maxDiff / std::max(maxRef, 1e-30), limit = probeTolerance(config.dataType);
        CoopSelfTestVerdict v;
        v.device = deviceText(caps);
        v.kernel = k.variant + " " + k.constants.describe();
        v.stage = stage;
        v.passed = nonFinite == 0 && error <= limit;
        char detail[160];
        std::snprintf(detail, sizeof detail, "%zu of %zu values non-finite, max |difference| / max |generic| %.3e (limit %.0e), n = %u",
                      nonFinite, shape.outElems, error, limit, shape.tokens);
        v.detail = detail;
        {
            VerdictCache& c = cache();
            std::lock_guard<std::mutex> lock(c.mutex);
            (v.passed ? c.passed.insert(fullKey) : c.disabled.insert(variantKey));
            c.byDevice[device].push_back(v);
        }
        if (!v.passed) {
            off |= stage;
            context->message(PSK_MESSAGE_SEVERITY_INFO, PSK_SUCCESS,
                             cat("cooperative ", coopStageName(stage), " kernel ", k.variant, " disagrees with the generic kernel on ",
                                 v.device, ": ", v.detail, "; it is disabled on this device, the ", coopStageName(stage),
                                 " stage runs the generic kernel"));
        }
    }
    return off;
}

std::vector<CoopSelfTestVerdict> coopSelfTestVerdicts(const DeviceCaps& caps) {
    VerdictCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.byDevice.find(deviceKey(caps));
    return it == c.byDevice.end() ? std::vector<CoopSelfTestVerdict>{} : it->second;
}

void clearCoopSelfTestVerdicts() {
    VerdictCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    c.byDevice.clear();
    c.passed.clear();
    c.disabled.clear();
}

}  // namespace psk
