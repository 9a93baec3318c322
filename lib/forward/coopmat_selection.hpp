// Which matrix-product path the polysketch GEMM kernels take on a device: the scalar/subgroup
// kernels, GL_NV_cooperative_matrix or GL_KHR_cooperative_matrix, and with which M x N x K shape,
// for float16 and for bfloat16 operands. The decision is a pure function of a capability
// description (so that tests can feed it simulated NVIDIA, AMD, Intel and lavapipe devices) and of
// the environment switch PSK_DISABLE_COOPMAT, which the caller reads and passes in.
//
// The forwards call it through forward/coopmat_switches.hpp (selectCoopMatWithSwitches, which adds
// the PSK_COOPMAT_* switches): forward/polysketch_plan.cpp for the cooperative feature-map,
// block-state (shaders/block_states_coopmat.comp, tiled by planBlockStatesCoopMat below) and output
// kernels, forward/tiled_forward.cpp for the baselines' one; see docs/ARCHITECTURE.md,
// "Cooperative-matrix path".
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel_interface.hpp"

namespace psk {

struct DeviceCaps;

enum class CoopMatPath { Scalar, NV, KHR };
enum class CoopMatOperand { Float16, BFloat16 };
enum class CoopMatComponent { Float16, BFloat16, Float32, Other };

/** One enumerated VkCooperativeMatrixProperties{NV,KHR} entry. */
struct CoopMatProperty {
    uint32_t m = 0, n = 0, k = 0;
    CoopMatComponent a = CoopMatComponent::Other, b = CoopMatComponent::Other;
    CoopMatComponent c = CoopMatComponent::Other, result = CoopMatComponent::Other;
    bool subgroupScope = true;
};

/** What the selection looks at: device features (as enabled on the device) and this build's shaders. */
struct CoopMatCapabilities {
    bool nvCooperativeMatrix = false;   // VK_NV_cooperative_matrix, cooperativeMatrix feature
    bool khrCooperativeMatrix = false;  // VK_KHR_cooperative_matrix, cooperativeMatrix feature
    bool shaderFloat16 = false;         // float16 in shared memory and arithmetic
    bool storageBuffer16BitAccess = false;
    bool vulkanMemoryModel = false;      // glslang emits coopmat code under the Vulkan memory model
    bool bfloat16CooperativeMatrix = false;  // VK_KHR_shader_bfloat16: shaderBFloat16Type + ...CooperativeMatrix
    // A CPU driver (VK_PHYSICAL_DEVICE_TYPE_CPU): it lowers cooperative matrices to plain loops,
    // so they are never faster than its lane-team kernels; the selection stays scalar there even
    // where the driver exposes an extension (newer lavapipe exposes VK_KHR_cooperative_matrix).
    bool cpuDevice = false;
    std::vector<CoopMatProperty> nvProperties;
    std::vector<CoopMatProperty> khrProperties;
    // Shader variants this build contains (the glslc probes decide which are compiled).
    bool nvShaders = false, khrShaders = false, khrBf16Shaders = false;
};

struct CoopMatShapeChoice {
    uint32_t m = 0, n = 0, k = 0;
};

/** The decision for one operand type. */
struct CoopMatChoice {
    CoopMatPath path = CoopMatPath::Scalar;
    CoopMatOperand operand = CoopMatOperand::Float16;  // meaningful when path != Scalar
    CoopMatShapeChoice shape;
    std::string reason;  // one line for `psk info` and logs
};

struct CoopMatSelection {
    CoopMatChoice float16;   // data stored as float32 or float16: float16 operands
    CoopMatChoice bfloat16;  // data stored as bfloat16: bfloat16 operands where possible
    /** The choice for data of storage type `type`. */
    const CoopMatChoice& forDataType(PskDataType type) const {
        return type == PSK_DATA_TYPE_BFLOAT16 ? bfloat16 : float16;
    }
    std::string describe() const;  // two lines, "float16 operands: ..." and "bfloat16 operands: ..."
};

/** True when the value of PSK_DISABLE_COOPMAT (null when unset) asks to turn the path off. */
bool coopMatDisabledBy(const char* environmentValue);

/** The pure selection. Shapes must be multiples of 8 in M, N and K, at most 64 (the kernel's tiling). */
CoopMatSelection selectCoopMat(const CoopMatCapabilities& caps, bool disabled);

/**
 * The capabilities of a device as DeviceCaps records them (the features as enabled on the device:
 * both cooperative-matrix extensions, vulkanMemoryModel, VK_KHR_shader_bfloat16, and every
 * enumerated NV and KHR configuration), plus which variants this build's shader registry has. On
 * a GPU with VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix the selection takes that path;
 * on lavapipe (neither extension) and on an app's device (whose Vulkan memory model is not known
 * to be enabled, device_caps.cpp restrictDeviceCaps) it stays scalar, with the reason.
 */
CoopMatCapabilities coopMatCapabilities(const DeviceCaps& caps);

/** selectCoopMat(coopMatCapabilities(caps), coopMatDisabledBy(getenv("PSK_DISABLE_COOPMAT"))). */
CoopMatSelection selectCoopMatForDevice(const DeviceCaps& caps);

/** Shader variant name, e.g. "block_states_coopmat.nv_f16.bf16"; empty for the scalar path. */
std::string blockStatesCoopMatShader(const CoopMatChoice& choice, PskDataType storage);

/**
 * Specialization constants and grid of block_states_coopmat.comp for one choice, in constant_id
 * order: THREADS, SKETCH, VALUE_DIM, CM_M, CM_N, CM_K, SG_M, SG_N, WM, WN, KEY_TILE. An initial
 * tiling (2 x 2 subgroups, 64 features x up to 128 columns per workgroup), not yet tuned on a GPU.
 */
struct BlockStatesCoopMatPlan {
    kernel::BlockStatesCoopMatSpec spec;
    std::vector<uint32_t> specConstants;  // spec's values by constant_id
    uint32_t threads = 0;
    uint32_t tileF = 0, tileC = 0;  // workgroup tile: features x value columns
    uint32_t keyTile = 0;
    uint32_t sharedBytes = 0;
};
/** `emulatedOperands`: size the shared memory as the COOPMAT_EMULATED backend declares it (4-byte
 *  operands plus its per-subgroup exchange region), to run this tiling through the emulation
 *  (PSK_COOPMAT_EMULATION=gpu-tiles). `splitV`: V as hi + lo operands (float32 storage, SPLIT_V).
 *  `rowGroups`: SG_M (a tuning table's states.sg_m), with WM = max(1, 64 / (SG_M CM_M)) so that a
 *  workgroup keeps at least 64 features; 0 for the model's 2 row groups. The column subgroups:
 *  blockStatesColumnSubgroups, within `maxInvocations` (the device's limit). */
BlockStatesCoopMatPlan planBlockStatesCoopMat(const CoopMatChoice& choice, uint32_t subgroupSize,
                                              uint32_t sketchLength, uint32_t valueDim, uint32_t maxSharedBytes,
                                              bool emulatedOperands = false, bool splitV = false, uint32_t rowGroups = 0,
                                              uint32_t maxInvocations = 1024);

/**
 * The column subgroups (SG_N) of block_states_coopmat.comp's GPU tiling with `rowGroups` row groups
 * (0: the model's 2): 2, doubled while a subgroup would hold more than 4 accumulator tiles (WM x WN,
 * the 2 x 2 of h = dv = 64) and the workgroup (SG_M x SG_N subgroups) stays within
 * `maxInvocations`. At dv = 128 the 2 x 4 tiles of SG_N = 2 need 382 VGPRs before scheduling on
 * AMD's compiler, 126 of them spilled (`psk compile`, RADV's null navi31), where SG_N = 4's 2 x 2
 * need 202 and spill none, as dv = 64's 2 x 2 (206); the H200 gave the SG_N = 2 kernel 255 registers
 * at dv = 128 (docs/MODEL.md, "The block states at h = 128").
 */
uint32_t blockStatesColumnSubgroups(uint32_t m, uint32_t n, uint32_t valueDim, uint32_t rowGroups, uint32_t subgroupSize,
                                    uint32_t maxInvocations);

}  // namespace psk
