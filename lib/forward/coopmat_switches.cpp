#include "forward/coopmat_switches.hpp"

#include <cstdlib>
#include <cstring>

#include "util/error.hpp"
#include "forward/coopmat_selection.hpp"
#include "vk/device_caps.hpp"

namespace psk {

namespace {

bool empty(const char* v) { return !v || !*v; }

const struct {
    const char* name;
    uint32_t bit;
} kStages[] = {{"features", kCoopFeatures}, {"states", kCoopStates}, {"output", kCoopOutput}, {"baselines", kCoopBaselines}};

/** A comma list of stage names ("all", "none" too) into bits; false on an unknown name. */
bool parseStages(const char* text, uint32_t* bits, std::string* bad) {
    *bits = 0;
    std::string list(text);
    size_t begin = 0;
    while (begin <= list.size()) {
        size_t end = list.find(',', begin);
        if (end == std::string::npos) end = list.size();
        const std::string item = list.substr(begin, end - begin);
        begin = end + 1;
        if (item.empty()) continue;
        if (item == "all") {
            *bits |= kCoopAllStages;
            continue;
        }
        if (item == "none") continue;
        bool known = false;
        for (const auto& s : kStages)
            if (item == s.name) {
                *bits |= s.bit;
                known = true;
            }
        if (!known) {
            *bad = item;
            return false;
        }
    }
    return true;
}

}  // namespace

const char* coopStageName(uint32_t bit) {
    for (const auto& s : kStages)
        if (s.bit == bit) return s.name;
    return "stages";
}

bool parseCoopMatSwitches(const char* backend, const char* stages, const char* selfTest, const char* featureTerms,
                          const char* fault, CoopMatSwitches* out, std::string* error) {
    CoopMatSwitches s;
    if (!empty(backend)) {
        const std::string b(backend);
        if (b == "auto") s.backend = CoopBackendRequest::Auto;
        else if (b == "khr") s.backend = CoopBackendRequest::KHR;
        else if (b == "nv") s.backend = CoopBackendRequest::NV;
        else if (b == "emulated") s.backend = CoopBackendRequest::Emulated;
        else if (b == "off") s.backend = CoopBackendRequest::Off;
        else {
            *error = "PSK_COOPMAT_BACKEND=" + b + ": expected auto, khr, nv, emulated or off";
            return false;
        }
    }
    std::string bad;
    if (!empty(stages) && !parseStages(stages, &s.stages, &bad)) {
        *error = "PSK_COOPMAT_STAGES: unknown stage '" + bad + "' (expected all, none or a comma list of features, states, output, baselines)";
        return false;
    }
    if (!empty(selfTest)) {
        const std::string t(selfTest);
        if (t == "1" || t == "on") s.selfTest = CoopSelfTestMode::Hardware;
        else if (t == "0" || t == "off") s.selfTest = CoopSelfTestMode::Off;
        else if (t == "force") s.selfTest = CoopSelfTestMode::Always;
        else if (t == "known") s.selfTest = CoopSelfTestMode::Known;
        else {
            *error = "PSK_COOPMAT_SELFTEST=" + t + ": expected 1, 0, force or known";
            return false;
        }
    }
    if (!empty(featureTerms)) {
        const std::string t(featureTerms);
        if (t == "3") s.featureTerms = 3;
        else if (t == "1") s.featureTerms = 1;
        else {
            *error = "PSK_COOPMAT_FEATURE_TERMS=" + t + ": expected 3 or 1";
            return false;
        }
    }
    if (!empty(fault) && !parseStages(fault, &s.faultStages, &bad)) {
        *error = "PSK_COOPMAT_FAULT: unknown stage '" + bad + "' (expected a comma list of features, states, output, baselines)";
        return false;
    }
    *out = s;
    return true;
}

namespace {

/** An auto / on (1) / off (0) switch; null or empty is auto. */
template <typename Request>
bool parseAutoOnOff(const char* variable, const char* value, Request* out, std::string* error) {
    const std::string v = empty(value) ? std::string("auto") : std::string(value);
    if (v == "auto") *out = Request::Auto;
    else if (v == "on" || v == "1") *out = Request::On;
    else if (v == "off" || v == "0") *out = Request::Off;
    else {
        *error = std::string(variable) + "=" + v + ": expected auto, on or off";
        return false;
    }
    return true;
}

}  // namespace

bool parseStatesWalk(const char* value, StatesWalkRequest* out, std::string* error) {
    return parseAutoOnOff("PSK_COOPMAT_STATES_WALK", value, out, error);
}

bool parseFloat32Request(const char* value, Float32Request* out, std::string* error) {
    return parseAutoOnOff("PSK_COOPMAT_FLOAT32", value, out, error);
}

bool parseFusedQuery(const char* value, FusedQueryRequest* out, std::string* error) {
    return parseAutoOnOff("PSK_COOPMAT_FUSED_QUERY", value, out, error);
}

bool parseZPacked(const char* value, ZPackedRequest* out, std::string* error) {
    return parseAutoOnOff("PSK_COOPMAT_Z_PACKED", value, out, error);
}

bool parseFeatureDiagnostic(const char* value, uint32_t* out, std::string* error) {
    static const char* names[] = {"off", "rows", "identity", "product", "accumulators", "operands"};
    if (empty(value)) {
        *out = 0;
        return true;
    }
    for (uint32_t i = 0; i < 6; ++i)
        if (std::string(value) == names[i]) {
            *out = i;
            return true;
        }
    *error = "PSK_COOPMAT_FEATURE_DIAGNOSTIC=" + std::string(value) + ": expected off, rows, identity, product, accumulators or operands";
    return false;
}

bool parseAblate(const char* value, uint32_t* states, uint32_t* output, uint32_t* features, std::string* error) {
    struct Part {
        const char* name;
        uint32_t* mask;
        uint32_t bit;
    };
    const Part parts[] = {{"states.products", states, 1}, {"states.expand", states, 2}, {"states.loads", states, 4},
                          {"output.inter", output, 1},    {"output.local", output, 2},  {"output.products", output, 4},
                          {"output.zrange", output, 8},   {"output.expand", output, 16}, {"output.zstage", output, 32},
                          {"output.kvstage", output, 64}, {"features.products", features, 1}, {"features.loads", features, 2},
                          {"features.local", features, 4}};
    *states = *output = *features = 0;
    if (empty(value)) return true;
    const std::string list(value);
    for (size_t at = 0; at <= list.size();) {
        size_t end = list.find(',', at);
        if (end == std::string::npos) end = list.size();
        const std::string item = list.substr(at, end - at);
        at = end + 1;
        bool known = false;
        for (const Part& p : parts)
            if (item == p.name) {
                *p.mask |= p.bit;
                known = true;
            }
        if (!known) {
            *error = "PSK_ABLATE: unknown part '" + item +
                     "' (expected a comma list of states.products, states.expand, states.loads, output.inter, output.local, output.products, "
                     "output.zrange, output.expand, output.zstage, output.kvstage, features.products, features.loads, features.local)";
            return false;
        }
    }
    return true;
}

CoopMatSwitches coopMatSwitches() {
    CoopMatSwitches s;
    std::string error;
    if (!parseCoopMatSwitches(std::getenv("PSK_COOPMAT_BACKEND"), std::getenv("PSK_COOPMAT_STAGES"),
                              std::getenv("PSK_COOPMAT_SELFTEST"), std::getenv("PSK_COOPMAT_FEATURE_TERMS"),
                              std::getenv("PSK_COOPMAT_FAULT"), &s, &error))
        fail(PSK_ERROR_INVALID_ARGUMENT, error);
    if (!parseStatesWalk(std::getenv("PSK_COOPMAT_STATES_WALK"), &s.statesWalk, &error)) fail(PSK_ERROR_INVALID_ARGUMENT, error);
    if (!parseFloat32Request(std::getenv("PSK_COOPMAT_FLOAT32"), &s.float32, &error)) fail(PSK_ERROR_INVALID_ARGUMENT, error);
    if (!parseFusedQuery(std::getenv("PSK_COOPMAT_FUSED_QUERY"), &s.fusedQuery, &error)) fail(PSK_ERROR_INVALID_ARGUMENT, error);
    if (!parseZPacked(std::getenv("PSK_COOPMAT_Z_PACKED"), &s.zPacked, &error)) fail(PSK_ERROR_INVALID_ARGUMENT, error);
    if (!parseFeatureDiagnostic(std::getenv("PSK_COOPMAT_FEATURE_DIAGNOSTIC"), &s.featureDiagnostic, &error))
        fail(PSK_ERROR_INVALID_ARGUMENT, error);
    if (!parseAblate(std::getenv("PSK_ABLATE"), &s.ablateStates, &s.ablateOutput, &s.ablateFeatures, &error))
        fail(PSK_ERROR_INVALID_ARGUMENT, error);
    // The older spellings: an explicit backend wins over them.
    if (s.backend == CoopBackendRequest::Auto) {
        const char* emulation = std::getenv("PSK_COOPMAT_EMULATION");
        if (coopMatDisabledBy(std::getenv("PSK_DISABLE_COOPMAT")))
            s.backend = CoopBackendRequest::Off;
        else if (!empty(emulation) && std::strcmp(emulation, "0") != 0)
            s.backend = CoopBackendRequest::Emulated;
    }
    return s;
}

CoopMatSelection selectCoopMatWithSwitches(const DeviceCaps& caps, const CoopMatSwitches& switches) {
    CoopMatCapabilities c = coopMatCapabilities(caps);
    if (switches.backend == CoopBackendRequest::KHR) c.nvCooperativeMatrix = false;
    if (switches.backend == CoopBackendRequest::NV) c.khrCooperativeMatrix = false;
    const bool off = switches.backend == CoopBackendRequest::Off || switches.backend == CoopBackendRequest::Emulated;
    CoopMatSelection selection = selectCoopMat(c, off);
    if (off) {
        const char* why = switches.backend == CoopBackendRequest::Off ? "scalar (PSK_COOPMAT_BACKEND=off or PSK_DISABLE_COOPMAT)"
                                                                      : "scalar (the emulated backend is requested)";
        selection.float16.reason = selection.bfloat16.reason = why;
    } else if (switches.backend != CoopBackendRequest::Auto) {
        const char* only = switches.backend == CoopBackendRequest::KHR ? " [PSK_COOPMAT_BACKEND=khr]" : " [PSK_COOPMAT_BACKEND=nv]";
        selection.float16.reason += only;
        selection.bfloat16.reason += only;
    }
    return selection;
}

std::optional<CoopVariant> coopVariantFor(const CoopMatChoice& choice, bool emulate, PskDataType type, const DeviceCaps& caps,
                                          bool splitFloat32) {
    const bool float32 = type == PSK_DATA_TYPE_FLOAT32;
    if (float32 && !splitFloat32) return std::nullopt;
    const CoopOperand operand = type == PSK_DATA_TYPE_BFLOAT16 ? CoopOperand::BF16 : CoopOperand::F16;
    if (emulate) {
        if (caps.subgroupSize < 4 || caps.minSubgroupSize != caps.maxSubgroupSize) return std::nullopt;
        return CoopVariant{CoopBackend::Emulated, operand};
    }
    if (choice.path == CoopMatPath::Scalar) return std::nullopt;
    if (choice.path == CoopMatPath::NV) return CoopVariant{CoopBackend::NV, CoopOperand::F16};
    // hi + lo in bfloat16 holds 16 bits, not the 22 of float16 that float32 storage needs.
    if (float32 && choice.operand != CoopMatOperand::Float16) return std::nullopt;
    return CoopVariant{CoopBackend::KHR, choice.operand == CoopMatOperand::BFloat16 ? CoopOperand::BF16 : CoopOperand::F16};
}

std::string describeCoopMatSwitches(const CoopMatSwitches& s) {
    std::string d;
    auto add = [&](const std::string& part) { d += (d.empty() ? "" : ", ") + part; };
    static const char* backends[] = {"auto", "khr", "nv", "emulated", "off"};
    if (s.backend != CoopBackendRequest::Auto) add(std::string("backend ") + backends[int(s.backend)]);
    auto stageList = [](uint32_t bits) {
        std::string l;
        for (const auto& st : kStages)
            if (bits & st.bit) l += (l.empty() ? "" : ",") + std::string(st.name);
        return l.empty() ? std::string("none") : l;
    };
    if (s.stages != kCoopAllStages) add("stages " + stageList(s.stages));
    if (s.selfTest == CoopSelfTestMode::Off) add("self-test off");
    if (s.selfTest == CoopSelfTestMode::Always) add("self-test forced");
    if (s.selfTest == CoopSelfTestMode::Known) add("self-test: earlier verdicts only");
    if (s.featureTerms != 3) add("feature-map products " + std::to_string(s.featureTerms));
    if (s.featureDiagnostic) add("FEATURE-MAP DIAGNOSTIC " + std::to_string(s.featureDiagnostic) + " (the S rows are not S)");
    if (s.ablateStates || s.ablateOutput || s.ablateFeatures)
        add("ABLATED states " + std::to_string(s.ablateStates) + ", output " + std::to_string(s.ablateOutput) +
            (s.ablateFeatures ? ", features " + std::to_string(s.ablateFeatures) : std::string()) + " (timing only: the output is wrong)");
    if (s.statesWalk == StatesWalkRequest::On) add("states walk on");
    if (s.statesWalk == StatesWalkRequest::Off) add("states walk off");
    if (s.float32 == Float32Request::On) add("float32 storage on split products");
    if (s.float32 == Float32Request::Off) add("float32 storage on FP32 kernels");
    if (s.fusedQuery == FusedQueryRequest::Off) add("query rows from the feature map (fused query off)");
    if (s.zPacked == ZPackedRequest::On) add("Z operands packed once per block");
    if (s.zPacked == ZPackedRequest::Off) add("Z staged by each output workgroup (Z operands not packed)");
    if (s.faultStages) add("FAULT INJECTED in " + stageList(s.faultStages));
    return d;
}

}  // namespace psk
