#include "forward/coopmat_selection.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/kernel_interface.hpp"
#include "kernels/coop_variants.hpp"
#include "util/storage_type.hpp"
#include "vk/device_caps.hpp"

namespace psk {
namespace {

const char* pathName(CoopMatPath path) {
    switch (path) {
        case CoopMatPath::NV:
            return "GL_NV_cooperative_matrix";
        case CoopMatPath::KHR:
            return "GL_KHR_cooperative_matrix";
        default:
            return "scalar";
    }
}

bool usableDimension(uint32_t d) { return d >= 8 && d <= 64 && d % 8 == 0; }

/**
 * The best enumerated shape with `operand` x `operand` -> float32, subgroup scope, that the
 * kernel's tiling takes; false when there is none. Largest M * N * K first, then the squarest.
 */
bool bestShape(const std::vector<CoopMatProperty>& list, CoopMatComponent operand, CoopMatShapeChoice* out) {
    bool found = false;
    auto volume = [](const CoopMatShapeChoice& s) { return uint64_t(s.m) * s.n * s.k; };
    auto skew = [](const CoopMatShapeChoice& s) { return s.m > s.n ? s.m - s.n : s.n - s.m; };
    for (const CoopMatProperty& p : list) {
        if (p.a != operand || p.b != operand || p.c != CoopMatComponent::Float32 ||
            p.result != CoopMatComponent::Float32 || !p.subgroupScope)
            continue;
        if (!usableDimension(p.m) || !usableDimension(p.n) || !usableDimension(p.k)) continue;
        const CoopMatShapeChoice s{p.m, p.n, p.k};
        if (!found || volume(s) > volume(*out) || (volume(s) == volume(*out) && skew(s) < skew(*out))) *out = s;
        found = true;
    }
    return found;
}

std::string shapeText(const CoopMatShapeChoice& s) {
    return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

/** Tries one extension with float16 operands; on failure says why in `why`. */
bool tryFloat16(const CoopMatCapabilities& caps, CoopMatPath path, CoopMatChoice* choice, std::string* why) {
    const bool nv = path == CoopMatPath::NV;
    if (!(nv ? caps.nvCooperativeMatrix : caps.khrCooperativeMatrix)) {
        *why = nv ? "no VK_NV_cooperative_matrix" : "no VK_KHR_cooperative_matrix";
        return false;
    }
    if (!(nv ? caps.nvShaders : caps.khrShaders)) {
        *why = std::string("this build has no ") + (nv ? "NV" : "KHR") +
               (nv ? " shaders (glslc without GL_NV_cooperative_matrix)"
                   : " shaders (neither glslc nor PSK_GLSLANG_VALIDATOR is glslang >= 13; see tools/install_build_tools.sh)");
        return false;
    }
    if (!caps.shaderFloat16) {
        *why = "no shaderFloat16";
        return false;
    }
    if (!caps.storageBuffer16BitAccess) {
        *why = "no storageBuffer16BitAccess";
        return false;
    }
    if (!caps.vulkanMemoryModel) {
        *why = "no vulkanMemoryModel";
        return false;
    }
    CoopMatShapeChoice shape;
    if (!bestShape(nv ? caps.nvProperties : caps.khrProperties, CoopMatComponent::Float16, &shape)) {
        *why = "no enumerated f16 x f16 -> f32 subgroup shape with M, N, K multiples of 8 up to 64";
        return false;
    }
    choice->path = path;
    choice->operand = CoopMatOperand::Float16;
    choice->shape = shape;
    choice->reason = std::string(pathName(path)) + ", float16 operands, float32 accumulation, " + shapeText(shape);
    return true;
}

CoopMatChoice chooseFloat16(const CoopMatCapabilities& caps) {
    CoopMatChoice choice;
    std::string whyKhr, whyNv;
    // KHR first: the cross-vendor extension, and the one that also takes bfloat16.
    if (tryFloat16(caps, CoopMatPath::KHR, &choice, &whyKhr)) return choice;
    if (tryFloat16(caps, CoopMatPath::NV, &choice, &whyNv)) {
        choice.reason += " (KHR: " + whyKhr + ")";
        return choice;
    }
    choice.reason = "scalar (KHR: " + whyKhr + "; NV: " + whyNv + ")";
    return choice;
}

CoopMatChoice chooseBFloat16(const CoopMatCapabilities& caps, const CoopMatChoice& float16) {
    std::string why;
    CoopMatShapeChoice shape;
    if (!caps.khrCooperativeMatrix)
        why = "no VK_KHR_cooperative_matrix";
    else if (!caps.khrBf16Shaders)
        why = "this build has no KHR bfloat16 shaders (glslc without GL_EXT_bfloat16)";
    else if (!caps.bfloat16CooperativeMatrix)
        why = "no VK_KHR_shader_bfloat16 cooperative matrices";
    else if (!caps.storageBuffer16BitAccess)
        why = "no storageBuffer16BitAccess";
    else if (!caps.vulkanMemoryModel)
        why = "no vulkanMemoryModel";
    else if (!bestShape(caps.khrProperties, CoopMatComponent::BFloat16, &shape))
        why = "no enumerated bf16 x bf16 -> f32 subgroup shape with M, N, K multiples of 8 up to 64";
    if (why.empty()) {
        CoopMatChoice choice;
        choice.path = CoopMatPath::KHR;
        choice.operand = CoopMatOperand::BFloat16;
        choice.shape = shape;
        choice.reason = "GL_KHR_cooperative_matrix, bfloat16 operands, float32 accumulation, " + shapeText(shape);
        return choice;
    }
    CoopMatChoice choice = float16;
    if (float16.path == CoopMatPath::Scalar)
        choice.reason = "scalar (bfloat16: " + why + "; float16: " + float16.reason + ")";
    else
        choice.reason = float16.reason + ", bfloat16 values converted to float16 (bfloat16: " + why + ")";
    return choice;
}

CoopMatComponent component(VkComponentTypeKHR type) {
    if (type == VK_COMPONENT_TYPE_FLOAT16_KHR) return CoopMatComponent::Float16;
    if (type == VK_COMPONENT_TYPE_FLOAT32_KHR) return CoopMatComponent::Float32;
    if (type == VK_COMPONENT_TYPE_BFLOAT16_KHR) return CoopMatComponent::BFloat16;
    return CoopMatComponent::Other;
}

std::vector<CoopMatProperty> properties(const std::vector<CoopMatEntry>& entries) {
    std::vector<CoopMatProperty> list;
    list.reserve(entries.size());
    for (const CoopMatEntry& e : entries) {
        CoopMatProperty p;
        p.m = e.m;
        p.n = e.n;
        p.k = e.k;
        p.a = component(e.a);
        p.b = component(e.b);
        p.c = component(e.c);
        p.result = component(e.result);
        p.subgroupScope = e.scope == VK_SCOPE_SUBGROUP_KHR;
        // A saturating entry is an integer configuration: its types already make it unusable.
        list.push_back(p);
    }
    return list;
}

}  // namespace

bool coopMatDisabledBy(const char* value) {
    if (!value || !*value) return false;
    return !(std::strcmp(value, "0") == 0 || std::strcmp(value, "false") == 0 || std::strcmp(value, "off") == 0 ||
             std::strcmp(value, "no") == 0);
}

CoopMatSelection selectCoopMat(const CoopMatCapabilities& caps, bool disabled) {
    CoopMatSelection selection;
    if (disabled) {
        selection.float16.reason = selection.bfloat16.reason = "scalar (turned off by PSK_DISABLE_COOPMAT)";
        return selection;
    }
    selection.float16 = chooseFloat16(caps);
    selection.bfloat16 = chooseBFloat16(caps, selection.float16);
    if (caps.cpuDevice) {
        for (CoopMatChoice* choice : {&selection.float16, &selection.bfloat16}) {
            if (choice->path == CoopMatPath::Scalar) continue;
            CoopMatChoice scalar;
            scalar.reason = "scalar (CPU device: its driver runs cooperative matrices as plain loops, slower than the "
                            "lane-team kernels; it offers " + choice->reason + ")";
            *choice = scalar;
        }
    }
    return selection;
}

std::string CoopMatSelection::describe() const {
    return "float16 operands: " + float16.reason + "\nbfloat16 operands: " + bfloat16.reason;
}

CoopMatCapabilities coopMatCapabilities(const DeviceCaps& caps) {
    CoopMatCapabilities c;
    c.nvCooperativeMatrix = caps.cooperativeMatrixNV;
    c.khrCooperativeMatrix = caps.cooperativeMatrixKHR;
    c.shaderFloat16 = caps.shaderFloat16;
    c.storageBuffer16BitAccess = caps.storageBuffer16BitAccess;
    c.vulkanMemoryModel = caps.vulkanMemoryModel;
    c.cpuDevice = caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    c.bfloat16CooperativeMatrix = caps.shaderBFloat16Type && caps.shaderBFloat16CooperativeMatrix;
    c.nvProperties = properties(caps.coopMatPropertiesNV);
    c.khrProperties = properties(caps.coopMatPropertiesKHR);
    c.nvShaders = coopBackendBuilt({CoopBackend::NV, CoopOperand::F16});
    c.khrShaders = coopBackendBuilt({CoopBackend::KHR, CoopOperand::F16});
    c.khrBf16Shaders = coopBackendBuilt({CoopBackend::KHR, CoopOperand::BF16});
    return c;
}

CoopMatSelection selectCoopMatForDevice(const DeviceCaps& caps) {
    return selectCoopMat(coopMatCapabilities(caps), coopMatDisabledBy(std::getenv("PSK_DISABLE_COOPMAT")));
}

std::string blockStatesCoopMatShader(const CoopMatChoice& choice, PskDataType storage) {
    if (choice.path == CoopMatPath::Scalar) return {};
    std::string name = "block_states_coopmat.";
    name += choice.path == CoopMatPath::NV ? "nv" : "khr";
    name += choice.operand == CoopMatOperand::BFloat16 ? "_bf16." : "_f16.";
    return name + dataTypeSuffix(storage);
}

namespace {

// The block states' GPU tiling: WM (64 features per workgroup where M <= 32, or SG_M x M where that
// is more) and WN (the value columns over SG_N subgroups, at most 128 columns per workgroup).
uint32_t statesWm(uint32_t m, uint32_t sgM, uint32_t rowGroups) { return rowGroups ? std::max(1u, 64u / (sgM * m)) : std::max(1u, 32u / m); }
uint32_t statesWn(uint32_t n, uint32_t sgN, uint32_t valueDim) {
    return std::max(1u, std::min((valueDim + sgN * n - 1) / (sgN * n), std::max(1u, 128u / (sgN * n))));
}

}  // namespace

uint32_t blockStatesColumnSubgroups(uint32_t m, uint32_t n, uint32_t valueDim, uint32_t rowGroups, uint32_t subgroupSize,
                                    uint32_t maxInvocations) {
    const uint32_t sgM = rowGroups ? rowGroups : 2, wm = statesWm(m, sgM, rowGroups);
    uint32_t sgN = 2;
    while (wm * statesWn(n, sgN, valueDim) > 4 && sgM * 2 * sgN * subgroupSize <= maxInvocations) sgN *= 2;
    return sgN;
}

BlockStatesCoopMatPlan planBlockStatesCoopMat(const CoopMatChoice& choice, uint32_t subgroupSize,
                                              uint32_t sketchLength, uint32_t valueDim, uint32_t maxSharedBytes,
                                              bool emulatedOperands, bool splitV, uint32_t rowGroups, uint32_t maxInvocations) {
    BlockStatesCoopMatPlan plan;
    if (choice.path == CoopMatPath::Scalar) return plan;
    const uint32_t m = choice.shape.m, n = choice.shape.n, k = choice.shape.k;
    const uint32_t sgM = rowGroups ? rowGroups : 2;
    const uint32_t wm = statesWm(m, sgM, rowGroups);
    uint32_t sgN = blockStatesColumnSubgroups(m, n, valueDim, rowGroups, subgroupSize, maxInvocations);
    uint32_t wn = 0, keyTile = 0;
    auto shared = [&](uint32_t kt, uint32_t wnn) {
        const uint32_t tileM = sgM * wm * m, tileN = sgN * wnn * n;
        const uint32_t operand = emulatedOperands ? 4 : 2;
        const uint32_t exchange = emulatedOperands ? 4 * sgM * sgN * (m * k + k * n) : 0;  // coopmat.glsl's cm_scratch
        // A twice (its high and low parts), B once (twice when split).
        return 4 * kt * sketchLength + 2 * operand * kt * (tileM + 8) + (splitV ? 2 : 1) * operand * kt * (tileN + 8) +
               4 * sgM * sgN * m * n + exchange;
    };
    // The tiling with sgN column subgroups, shrunk to the shared memory (keys first, then columns);
    // more subgroups than 2 only where that tiling fits (each subgroup adds a product scratch).
    for (;; sgN /= 2) {
        wn = statesWn(n, sgN, valueDim);
        keyTile = (std::max(32u, k) + k - 1) / k * k;
        while (shared(keyTile, wn) > maxSharedBytes && keyTile > k) keyTile -= k;
        while (shared(keyTile, wn) > maxSharedBytes && wn > 1) --wn;
        if (sgN <= 2 || shared(keyTile, wn) <= maxSharedBytes) break;
    }
    plan.threads = sgM * sgN * subgroupSize;
    plan.tileF = sgM * wm * m;
    plan.tileC = sgN * wn * n;
    plan.keyTile = keyTile;
    plan.sharedBytes = shared(keyTile, wn);
    kernel::BlockStatesCoopMatSpec spec;
    spec.THREADS = plan.threads;
    spec.SKETCH = sketchLength;
    spec.VALUE_DIM = valueDim;
    spec.CM_M = m;
    spec.CM_N = n;
    spec.CM_K = k;
    spec.SG_M = sgM;
    spec.SG_N = sgN;
    spec.WM = wm;
    spec.WN = wn;
    spec.KEY_TILE = keyTile;
    spec.SPLIT_V = splitV ? 1 : 0;
    plan.spec = spec;
    plan.specConstants = kernel::SpecConstants::of(spec).values;
    return plan;
}

}  // namespace psk
