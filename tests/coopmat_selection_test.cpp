// The cooperative-matrix path selection on simulated devices (no GPU): which extension, which shape,
// and why, for float16 and bfloat16 operands; the environment switch; the kernel's tile plan; how
// DeviceCaps (the enumerated NV and KHR lists) becomes CoopMatCapabilities; and, on the real device
// of the machine (lavapipe in CI), that the selection stays scalar and says why.
#include <gtest/gtest.h>

#include <polysketch/polysketch.h>

#include <cstdlib>
#include <string>

#include "kernels/shader_registry.hpp"
#include "vk/context.hpp"
#include "forward/polysketch_plan.hpp"
#include "forward/tiled_forward.hpp"
#include "forward/coopmat_selection.hpp"
#include "vk/device_caps.hpp"
#include "util/error.hpp"
#include "support/scoped_env.hpp"

namespace {

using psk::test::ScopedEnv;

using psk::CoopMatCapabilities;
using psk::CoopMatComponent;
using psk::CoopMatOperand;
using psk::CoopMatPath;
using psk::CoopMatProperty;

// Specialization constants of block_states_coopmat.comp (its interface header decides how many).
const size_t kSpecCount = psk::kernel::SpecConstants::of(psk::kernel::BlockStatesCoopMatSpec{}).values.size();

CoopMatProperty prop(uint32_t m, uint32_t n, uint32_t k, CoopMatComponent ab = CoopMatComponent::Float16,
                     CoopMatComponent cr = CoopMatComponent::Float32, bool subgroup = true) {
    CoopMatProperty p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = p.b = ab;
    p.c = p.result = cr;
    p.subgroupScope = subgroup;
    return p;
}

/** Features every coopmat path needs, and every shader variant built. */
CoopMatCapabilities baseDevice() {
    CoopMatCapabilities c;
    c.shaderFloat16 = true;
    c.storageBuffer16BitAccess = true;
    c.vulkanMemoryModel = true;
    c.nvShaders = c.khrShaders = c.khrBf16Shaders = true;
    return c;
}

// Simulated devices, from enumerated property lists that real drivers report (M x N x K, A/B type,
// C/result type, all at subgroup scope unless said otherwise).

/**
 * An NVIDIA Turing/Ampere driver with both extensions. NV list: 16x8x16 and 16x8x8 with float16
 * operands, float16 or float32 accumulators (TITAN RTX, driver 440.100, in
 * jeffbolznv/vk_cooperative_matrix_perf issue #1). KHR list: 16x8x8, 16x8x16 and 16x16x16 with
 * float16 operands (NVIDIA's list as NVK mirrors it, KhronosGroup/VK-GL-CTS issue #546), plus the
 * int8 shapes with int32 accumulators.
 */
CoopMatCapabilities nvidiaLike() {
    CoopMatCapabilities c = baseDevice();
    c.nvCooperativeMatrix = c.khrCooperativeMatrix = true;
    using C = CoopMatComponent;
    c.nvProperties = {prop(16, 8, 16, C::Float16, C::Float16), prop(16, 8, 8, C::Float16, C::Float16),
                      prop(16, 8, 16), prop(16, 8, 8)};
    c.khrProperties = {prop(16, 8, 8, C::Float16, C::Float16),   prop(16, 8, 16, C::Float16, C::Float16),
                       prop(16, 16, 16, C::Float16, C::Float16), prop(16, 8, 8),
                       prop(16, 8, 16),                          prop(16, 16, 16),
                       prop(16, 8, 32, C::Other, C::Other),      prop(16, 16, 32, C::Other, C::Other)};
    return c;
}

/** An NVIDIA driver from before VK_KHR_cooperative_matrix (NV list as above). */
CoopMatCapabilities nvidiaNvOnly() {
    CoopMatCapabilities c = nvidiaLike();
    c.khrCooperativeMatrix = false;
    c.khrProperties.clear();
    return c;
}

/**
 * RADV on RDNA3 (RX 7900 XTX): KHR only, everything 16x16x16: float16 operands with float32 or
 * float16 accumulators, int8/uint8 with int32 (pytorch/executorch pull request #18726 lists it).
 * Subgroups of 32 or 64 lanes, so the kernel's size gets pinned.
 */
CoopMatCapabilities amdLike() {
    CoopMatCapabilities c = baseDevice();
    c.khrCooperativeMatrix = true;
    using C = CoopMatComponent;
    c.khrProperties = {prop(16, 16, 16), prop(16, 16, 16, C::Float16, C::Float16),
                       prop(16, 16, 16, C::Float16, C::Float16), prop(16, 16, 16, C::Other, C::Other),
                       prop(16, 16, 16, C::Other, C::Other)};
    return c;
}

/**
 * ANV on Arc A-series (DG2, Xe-HPG): KHR only, 8x8x16 float16 with float16 or float32
 * accumulators, 8x8x32 int8/uint8 (Mesa src/intel/dev/intel_device_info.c, XEHP_FEATURES
 * cooperative_matrix_configurations); DPAS runs on subgroups of 8.
 */
CoopMatCapabilities intelLike() {
    CoopMatCapabilities c = baseDevice();
    c.khrCooperativeMatrix = true;
    using C = CoopMatComponent;
    c.khrProperties = {prop(8, 8, 16, C::Float16, C::Float16), prop(8, 8, 16), prop(8, 8, 32, C::Other, C::Other),
                       prop(8, 8, 32, C::Other, C::Other)};
    return c;
}

/** ANV on Arc B-series (Xe2, B570): 8x16x16 float16 -> float32 (kvark/blade pull request #399). */
CoopMatCapabilities intelXe2Like() {
    CoopMatCapabilities c = baseDevice();
    c.khrCooperativeMatrix = true;
    using C = CoopMatComponent;
    c.khrProperties = {prop(8, 16, 16, C::Float16, C::Float16), prop(8, 16, 16), prop(8, 16, 32, C::Other, C::Other)};
    return c;
}

TEST(CoopMatSelection, NvidiaLikePrefersKhrWithTheLargestShape) {
    const auto s = psk::selectCoopMat(nvidiaLike(), false);
    EXPECT_EQ(s.float16.path, CoopMatPath::KHR);
    EXPECT_EQ(s.float16.operand, CoopMatOperand::Float16);
    EXPECT_EQ(s.float16.shape.m, 16u);
    EXPECT_EQ(s.float16.shape.n, 16u);
    EXPECT_EQ(s.float16.shape.k, 16u);
    EXPECT_NE(s.float16.reason.find("16x16x16"), std::string::npos) << s.float16.reason;
    // No bf16 shape: bfloat16 data goes through float16 operands, and says so.
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::KHR);
    EXPECT_EQ(s.bfloat16.operand, CoopMatOperand::Float16);
    EXPECT_NE(s.bfloat16.reason.find("converted to float16"), std::string::npos) << s.bfloat16.reason;
    EXPECT_EQ(psk::blockStatesCoopMatShader(s.bfloat16, PSK_DATA_TYPE_BFLOAT16), "block_states_coopmat.khr_f16.bf16");
}

TEST(CoopMatSelection, NvidiaLikeFallsBackToNvWithoutKhrShaders) {
    auto caps = nvidiaLike();
    caps.khrShaders = caps.khrBf16Shaders = false;  // e.g. Debian's glslc without .venv-build: NV only
    const auto s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::NV);
    EXPECT_EQ(s.float16.shape.m, 16u);  // the NV list's largest: 16x8x16
    EXPECT_EQ(s.float16.shape.n, 8u);
    EXPECT_EQ(s.float16.shape.k, 16u);
    EXPECT_NE(s.float16.reason.find("KHR: this build has no KHR shaders"), std::string::npos) << s.float16.reason;
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::NV);
    EXPECT_EQ(psk::blockStatesCoopMatShader(s.float16, PSK_DATA_TYPE_FLOAT32), "block_states_coopmat.nv_f16.f32");
}

TEST(CoopMatSelection, NvOnlyDriverTakesNv) {
    const auto s = psk::selectCoopMat(nvidiaNvOnly(), false);
    EXPECT_EQ(s.float16.path, CoopMatPath::NV);
    EXPECT_EQ(s.float16.shape.m, 16u);
    EXPECT_EQ(s.float16.shape.n, 8u);
    EXPECT_EQ(s.float16.shape.k, 16u);
    EXPECT_NE(s.float16.reason.find("GL_NV_cooperative_matrix, float16 operands, float32 accumulation, 16x8x16"),
              std::string::npos) << s.float16.reason;
    EXPECT_NE(s.float16.reason.find("KHR: no VK_KHR_cooperative_matrix"), std::string::npos) << s.float16.reason;
    // bfloat16 data: float16 operands on NV.
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::NV);
    EXPECT_EQ(s.bfloat16.operand, CoopMatOperand::Float16);
    EXPECT_EQ(psk::blockStatesCoopMatShader(s.bfloat16, PSK_DATA_TYPE_BFLOAT16), "block_states_coopmat.nv_f16.bf16");
}

TEST(CoopMatSelection, BFloat16OperandsNeedKhrAndAnEnumeratedShape) {
    auto caps = nvidiaLike();
    caps.bfloat16CooperativeMatrix = true;
    caps.khrProperties.push_back(prop(16, 16, 16, CoopMatComponent::BFloat16));
    auto s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::KHR);
    EXPECT_EQ(s.bfloat16.operand, CoopMatOperand::BFloat16);
    EXPECT_EQ(psk::blockStatesCoopMatShader(s.bfloat16, PSK_DATA_TYPE_BFLOAT16), "block_states_coopmat.khr_bf16.bf16");
    EXPECT_EQ(&s.forDataType(PSK_DATA_TYPE_BFLOAT16), &s.bfloat16);
    EXPECT_EQ(&s.forDataType(PSK_DATA_TYPE_FLOAT16), &s.float16);

    // A bf16 shape on the NV list alone does not count.
    caps = nvidiaLike();
    caps.bfloat16CooperativeMatrix = true;
    caps.nvProperties.push_back(prop(16, 16, 16, CoopMatComponent::BFloat16));
    s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.bfloat16.operand, CoopMatOperand::Float16);
    EXPECT_NE(s.bfloat16.reason.find("no enumerated bf16"), std::string::npos) << s.bfloat16.reason;

    // Without the feature, the shape alone does not count either.
    caps = nvidiaLike();
    caps.khrProperties.push_back(prop(16, 16, 16, CoopMatComponent::BFloat16));
    s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.bfloat16.operand, CoopMatOperand::Float16);
    EXPECT_NE(s.bfloat16.reason.find("VK_KHR_shader_bfloat16"), std::string::npos) << s.bfloat16.reason;
}

TEST(CoopMatSelection, AmdLikeKhrOnly) {
    const auto s = psk::selectCoopMat(amdLike(), false);
    EXPECT_EQ(s.float16.path, CoopMatPath::KHR);
    EXPECT_EQ(s.float16.shape.m, 16u);
    EXPECT_EQ(s.float16.shape.n, 16u);
    EXPECT_EQ(s.float16.shape.k, 16u);
    // Wave32 and wave64: THREADS follows the (pinned) subgroup size.
    EXPECT_EQ(psk::planBlockStatesCoopMat(s.float16, 32, 32, 64, 65536).threads, 128u);
    EXPECT_EQ(psk::planBlockStatesCoopMat(s.float16, 64, 32, 64, 65536).threads, 256u);
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::KHR);
    EXPECT_EQ(s.bfloat16.operand, CoopMatOperand::Float16);

    // The same device with a build whose glslc has no KHR: scalar, naming both reasons.
    auto caps = amdLike();
    caps.khrShaders = caps.khrBf16Shaders = false;
    const auto t = psk::selectCoopMat(caps, false);
    EXPECT_EQ(t.float16.path, CoopMatPath::Scalar);
    EXPECT_NE(t.float16.reason.find("no VK_NV_cooperative_matrix"), std::string::npos) << t.float16.reason;
    EXPECT_EQ(t.bfloat16.path, CoopMatPath::Scalar);
    EXPECT_TRUE(psk::blockStatesCoopMatShader(t.float16, PSK_DATA_TYPE_FLOAT16).empty());
}

TEST(CoopMatSelection, IntelLike8x8x16) {
    const auto s = psk::selectCoopMat(intelLike(), false);
    EXPECT_EQ(s.float16.path, CoopMatPath::KHR);
    EXPECT_EQ(s.float16.shape.m, 8u);
    EXPECT_EQ(s.float16.shape.n, 8u);
    EXPECT_EQ(s.float16.shape.k, 16u);
    const auto plan = psk::planBlockStatesCoopMat(s.float16, 8, 32, 64, 32768);
    ASSERT_EQ(plan.specConstants.size(), kSpecCount);
    // 2 x 8 subgroups of 8, 4 x 1 accumulator tiles each (at 2 x 2 subgroups each would hold 4 x 4
    // tiles, 128 accumulator registers per lane: blockStatesColumnSubgroups).
    EXPECT_EQ(plan.threads, 128u);
    EXPECT_EQ(plan.spec.SG_N, 8u);
    EXPECT_EQ(plan.spec.WM * plan.spec.WN, 4u);
    EXPECT_EQ(plan.tileF, 64u);
    EXPECT_EQ(plan.tileC % 8, 0u);
    EXPECT_EQ(plan.keyTile % 16, 0u);
    EXPECT_LE(plan.sharedBytes, 32768u);
}

TEST(CoopMatSelection, IntelXe2Like8x16x16) {
    const auto s = psk::selectCoopMat(intelXe2Like(), false);
    EXPECT_EQ(s.float16.path, CoopMatPath::KHR);
    EXPECT_EQ(s.float16.shape.m, 8u);
    EXPECT_EQ(s.float16.shape.n, 16u);
    EXPECT_EQ(s.float16.shape.k, 16u);
    const auto plan = psk::planBlockStatesCoopMat(s.float16, 16, 32, 64, 65536);
    EXPECT_EQ(plan.threads, 128u);  // 2 x 4 subgroups of 16, 4 x 1 accumulator tiles each (4 x 2 at 2 x 2)
    EXPECT_EQ(plan.spec.WM * plan.spec.WN, 4u);
    EXPECT_EQ(plan.tileC % 16, 0u);
}

// The emulated backend's shape (PSK_COOPMAT_EMULATION_SHAPE): 16 x 16 x 16 by default, the shapes
// of other vendors' matrix units when asked, and a clear refusal of what the emulation cannot hold.
TEST(CoopMatEmulationShape, DefaultVendorShapesAndRefusals) {
    {
        ScopedEnv unset("PSK_COOPMAT_EMULATION_SHAPE", nullptr);
        const psk::CoopMatShapeChoice s = psk::coopMatEmulationShape();
        EXPECT_EQ(s.m * 10000 + s.n * 100 + s.k, 161616u);
    }
    for (const char* value : {"8x8x16", "8x16x16", "16x8x16", "16x8x8", "16x16x16"}) {
        ScopedEnv shape("PSK_COOPMAT_EMULATION_SHAPE", value);
        const psk::CoopMatShapeChoice s = psk::coopMatEmulationShape();
        EXPECT_EQ(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k), value);
    }
    for (const char* value : {"16x16", "16x16x16x", "4x16x16", "12x16x16", "32x16x16", "16x16x72", "big", "16x16x16 "}) {
        ScopedEnv shape("PSK_COOPMAT_EMULATION_SHAPE", value);
        try {
            psk::coopMatEmulationShape();
            ADD_FAILURE() << value << " was accepted";
        } catch (const psk::Error& e) {
            EXPECT_EQ(e.code(), PSK_ERROR_INVALID_ARGUMENT) << value;
            EXPECT_NE(std::string(e.what()).find("PSK_COOPMAT_EMULATION_SHAPE"), std::string::npos) << e.what();
        }
    }
}

TEST(CoopMatSelection, LavapipeLikeHasNothing) {
    CoopMatCapabilities caps;  // no extension, no shapes (Mesa 22: vulkanMemoryModel yes, coopmat no)
    caps.shaderFloat16 = caps.storageBuffer16BitAccess = caps.vulkanMemoryModel = true;
    caps.nvShaders = true;
    const auto s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::Scalar);
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::Scalar);
    EXPECT_EQ(s.float16.reason, "scalar (KHR: no VK_KHR_cooperative_matrix; NV: no VK_NV_cooperative_matrix)");
    EXPECT_NE(s.describe().find("bfloat16 operands: scalar"), std::string::npos) << s.describe();
}

TEST(CoopMatSelection, CpuDeviceStaysScalarEvenWithKhr) {
    // A newer lavapipe with VK_KHR_cooperative_matrix (8x8x8 float16 and float32 configurations):
    // a CPU driver lowers them to loops, so the lane-team kernels stay.
    CoopMatCapabilities caps = baseDevice();
    caps.khrCooperativeMatrix = true;
    caps.khrProperties = {prop(8, 8, 8), prop(8, 8, 8, CoopMatComponent::Float16, CoopMatComponent::Float16),
                          prop(8, 8, 8, CoopMatComponent::Float32, CoopMatComponent::Float32)};
    EXPECT_EQ(psk::selectCoopMat(caps, false).float16.path, CoopMatPath::KHR);  // as a GPU it would
    caps.cpuDevice = true;
    const auto s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::Scalar);
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::Scalar);
    EXPECT_NE(s.float16.reason.find("CPU device"), std::string::npos) << s.float16.reason;
    EXPECT_NE(s.float16.reason.find("8x8x8"), std::string::npos) << s.float16.reason;
}

TEST(CoopMatSelection, EnvironmentSwitch) {
    EXPECT_FALSE(psk::coopMatDisabledBy(nullptr));
    EXPECT_FALSE(psk::coopMatDisabledBy(""));
    EXPECT_FALSE(psk::coopMatDisabledBy("0"));
    EXPECT_FALSE(psk::coopMatDisabledBy("false"));
    EXPECT_TRUE(psk::coopMatDisabledBy("1"));
    EXPECT_TRUE(psk::coopMatDisabledBy("yes"));
    const auto s = psk::selectCoopMat(nvidiaLike(), true);
    EXPECT_EQ(s.float16.path, CoopMatPath::Scalar);
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::Scalar);
    EXPECT_NE(s.float16.reason.find("PSK_DISABLE_COOPMAT"), std::string::npos);
}

TEST(CoopMatSelection, MissingFeatures) {
    auto caps = nvidiaLike();
    caps.shaderFloat16 = false;
    auto s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::Scalar);
    EXPECT_NE(s.float16.reason.find("no shaderFloat16"), std::string::npos) << s.float16.reason;

    caps = amdLike();
    caps.vulkanMemoryModel = false;
    s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::Scalar);
    EXPECT_NE(s.float16.reason.find("no vulkanMemoryModel"), std::string::npos) << s.float16.reason;

    // Without the memory model, every vendor stays scalar (NVIDIA: KHR and NV both).
    for (auto device : {nvidiaLike(), nvidiaNvOnly(), intelLike(), intelXe2Like()}) {
        device.vulkanMemoryModel = false;
        s = psk::selectCoopMat(device, false);
        EXPECT_EQ(s.float16.path, CoopMatPath::Scalar) << s.float16.reason;
        EXPECT_EQ(s.bfloat16.path, CoopMatPath::Scalar) << s.bfloat16.reason;
        EXPECT_NE(s.float16.reason.find("no vulkanMemoryModel"), std::string::npos) << s.float16.reason;
    }

    caps = amdLike();
    caps.storageBuffer16BitAccess = false;
    s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::Scalar);
}

TEST(CoopMatSelection, NoUsableFloat16Shape) {
    auto caps = amdLike();
    caps.khrProperties = {
        prop(16, 16, 16, CoopMatComponent::Float16, CoopMatComponent::Float16),  // f16 accumulator only
        prop(16, 16, 16, CoopMatComponent::Other, CoopMatComponent::Float32),    // int8 and the like
        prop(16, 16, 16, CoopMatComponent::Float16, CoopMatComponent::Float32, false),  // workgroup scope
        prop(4, 4, 4),                                                                  // too small
        prop(128, 16, 16)};                                                             // too large
    const auto s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::Scalar);
    EXPECT_NE(s.float16.reason.find("no enumerated f16"), std::string::npos) << s.float16.reason;
}

TEST(CoopMatSelection, ShapeOrder) {
    auto caps = amdLike();
    caps.khrProperties = {prop(8, 8, 16), prop(32, 8, 16), prop(16, 16, 16), prop(16, 8, 16)};
    const auto s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.float16.shape.m, 16u);  // 16x16x16 over 32x8x16: same volume, squarer
    EXPECT_EQ(s.float16.shape.n, 16u);
}

TEST(CoopMatSelection, PlanFitsSharedMemory) {
    const auto s = psk::selectCoopMat(nvidiaLike(), false);
    const auto plan = psk::planBlockStatesCoopMat(s.float16, 32, 64, 128, 49152);
    ASSERT_EQ(plan.specConstants.size(), kSpecCount);
    // dv = 128: 4 column subgroups of 2 x 2 accumulator tiles (2 x 4 at SG_N = 2 spill on AMD's
    // compiler: blockStatesColumnSubgroups), 256 invocations.
    EXPECT_EQ(plan.specConstants[0], 256u);
    EXPECT_EQ(plan.spec.SG_N, 4u);
    EXPECT_EQ(plan.spec.WM * plan.spec.WN, 4u);
    EXPECT_EQ(plan.tileC, 128u);  // the whole value dimension in one column tile
    // ... but never more invocations than the device has: at 128, SG_N stays 2 (2 x 4 tiles).
    const auto narrow = psk::planBlockStatesCoopMat(s.float16, 32, 64, 128, 49152, false, false, 0, 128);
    EXPECT_EQ(narrow.spec.SG_N, 2u);
    EXPECT_EQ(narrow.threads, 128u);
    // dv = 64 keeps the model's 2 x 2 subgroups.
    EXPECT_EQ(psk::planBlockStatesCoopMat(s.float16, 32, 64, 64, 49152).spec.SG_N, 2u);
    EXPECT_LE(plan.sharedBytes, 49152u);
    const auto small = psk::planBlockStatesCoopMat(s.float16, 32, 64, 128, 16384);
    EXPECT_LE(small.sharedBytes, 16384u);
    EXPECT_EQ(small.keyTile % 16, 0u);
    EXPECT_TRUE(psk::planBlockStatesCoopMat(psk::CoopMatChoice{}, 32, 64, 128, 49152).specConstants.empty());
}

psk::CoopMatEntry entry(uint32_t m, uint32_t n, uint32_t k, VkComponentTypeKHR ab, VkComponentTypeKHR cr,
                       VkScopeKHR scope = VK_SCOPE_SUBGROUP_KHR) {
    psk::CoopMatEntry e;
    e.m = m;
    e.n = n;
    e.k = k;
    e.a = e.b = ab;
    e.c = e.result = cr;
    e.scope = scope;
    return e;
}

/** DeviceCaps as queryDeviceCaps fills them on an NVIDIA GPU (lists as in nvidiaLike()). */
psk::DeviceCaps nvidiaDeviceCaps() {
    psk::DeviceCaps caps;
    caps.properties.deviceType = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    caps.subgroupSize = caps.minSubgroupSize = caps.maxSubgroupSize = 32;
    caps.shaderFloat16 = caps.storageBuffer16BitAccess = true;
    caps.cooperativeMatrixNV = caps.cooperativeMatrixKHR = true;
    caps.vulkanMemoryModel = caps.vulkanMemoryModelDeviceScope = true;
    const VkComponentTypeKHR f16 = VK_COMPONENT_TYPE_FLOAT16_KHR, f32 = VK_COMPONENT_TYPE_FLOAT32_KHR;
    caps.coopMatPropertiesNV = {entry(16, 8, 16, f16, f16), entry(16, 8, 8, f16, f16), entry(16, 8, 16, f16, f32),
                                entry(16, 8, 8, f16, f32)};
    caps.coopMatPropertiesKHR = {entry(16, 8, 16, f16, f16), entry(16, 16, 16, f16, f16), entry(16, 8, 16, f16, f32),
                                 entry(16, 16, 16, f16, f32),
                                 entry(16, 8, 32, VK_COMPONENT_TYPE_SINT8_KHR, VK_COMPONENT_TYPE_SINT32_KHR)};
    return caps;
}

void setGpuLimits(psk::DeviceCaps& caps) {
    caps.properties.limits.maxComputeSharedMemorySize = 49152;
    caps.properties.limits.maxComputeWorkGroupInvocations = 1024;
    caps.properties.limits.maxStorageBufferRange = 1u << 30;
    caps.properties.limits.minStorageBufferOffsetAlignment = 64;
    for (int i = 0; i < 3; ++i) caps.properties.limits.maxComputeWorkGroupCount[i] = 65535;
}

TEST(CoopMatCapabilitiesFromDeviceCaps, KeepsBothListsAndTheFeatures) {
    psk::DeviceCaps caps = nvidiaDeviceCaps();
    caps.shaderBFloat16Type = caps.shaderBFloat16CooperativeMatrix = true;
    caps.coopMatPropertiesKHR.push_back(entry(16, 16, 16, VK_COMPONENT_TYPE_BFLOAT16_KHR, VK_COMPONENT_TYPE_FLOAT32_KHR));
    caps.coopMatPropertiesKHR.push_back(
        entry(16, 16, 16, VK_COMPONENT_TYPE_FLOAT16_KHR, VK_COMPONENT_TYPE_FLOAT32_KHR, VK_SCOPE_WORKGROUP_KHR));
    const CoopMatCapabilities c = psk::coopMatCapabilities(caps);
    EXPECT_TRUE(c.nvCooperativeMatrix);
    EXPECT_TRUE(c.khrCooperativeMatrix);
    EXPECT_TRUE(c.vulkanMemoryModel);
    EXPECT_TRUE(c.bfloat16CooperativeMatrix);
    EXPECT_FALSE(c.cpuDevice);
    ASSERT_EQ(c.nvProperties.size(), 4u);
    ASSERT_EQ(c.khrProperties.size(), 7u);
    EXPECT_EQ(c.nvProperties[0].a, CoopMatComponent::Float16);
    EXPECT_EQ(c.nvProperties[0].result, CoopMatComponent::Float16);  // DType
    EXPECT_EQ(c.nvProperties[2].c, CoopMatComponent::Float32);
    EXPECT_EQ(c.khrProperties[4].a, CoopMatComponent::Other);  // int8
    EXPECT_EQ(c.khrProperties[5].a, CoopMatComponent::BFloat16);
    EXPECT_TRUE(c.khrProperties[5].subgroupScope);
    EXPECT_FALSE(c.khrProperties[6].subgroupScope);
    EXPECT_EQ(c.nvShaders, psk::findShader("block_states_coopmat.nv_f16.f32") != nullptr);
    EXPECT_EQ(c.khrShaders, psk::findShader("block_states_coopmat.khr_f16.f32") != nullptr);

    // With every variant built, this device takes KHR 16x16x16 and bfloat16 operands.
    CoopMatCapabilities all = c;
    all.nvShaders = all.khrShaders = all.khrBf16Shaders = true;
    const auto s = psk::selectCoopMat(all, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::KHR);
    EXPECT_EQ(s.float16.shape.n, 16u);
    EXPECT_EQ(s.bfloat16.operand, CoopMatOperand::BFloat16);

    // Without the bfloat16 matrix feature the bf16 entries are not usable.
    caps.shaderBFloat16CooperativeMatrix = false;
    EXPECT_FALSE(psk::coopMatCapabilities(caps).bfloat16CooperativeMatrix);
    caps.properties.deviceType = VK_PHYSICAL_DEVICE_TYPE_CPU;
    EXPECT_TRUE(psk::coopMatCapabilities(caps).cpuDevice);
}

TEST(CoopMatCapabilitiesFromDeviceCaps, SelectForDeviceFollowsTheBuildAndTheSwitch) {
    const psk::DeviceCaps caps = nvidiaDeviceCaps();
    {
        ScopedEnv env("PSK_DISABLE_COOPMAT", nullptr);
        const auto s = psk::selectCoopMatForDevice(caps);
        if (psk::findShader("block_states_coopmat.khr_f16.f32")) {
            EXPECT_EQ(s.float16.path, CoopMatPath::KHR) << s.float16.reason;
            EXPECT_EQ(s.float16.shape.m, 16u);
            EXPECT_EQ(s.float16.shape.n, 16u);
        } else if (psk::findShader("block_states_coopmat.nv_f16.f32")) {
            EXPECT_EQ(s.float16.path, CoopMatPath::NV) << s.float16.reason;
            EXPECT_EQ(s.float16.shape.n, 8u);
            EXPECT_NE(s.float16.reason.find("this build has no KHR shaders"), std::string::npos) << s.float16.reason;
        } else {
            EXPECT_EQ(s.float16.path, CoopMatPath::Scalar) << s.float16.reason;
        }
    }
    {
        ScopedEnv env("PSK_DISABLE_COOPMAT", "1");
        const auto s = psk::selectCoopMatForDevice(caps);
        EXPECT_EQ(s.float16.path, CoopMatPath::Scalar);
        EXPECT_NE(s.float16.reason.find("PSK_DISABLE_COOPMAT"), std::string::npos) << s.float16.reason;
    }
    {
        // An app's device that enabled the cooperative-matrix capability enabled what the
        // requirements name with it (the Vulkan memory model): the same kernels as the library's
        // own device. Without the capability: the scalar kernels.
        ScopedEnv env("PSK_DISABLE_COOPMAT", nullptr);
        const uint32_t common = PSK_DEVICE_CAPABILITY_ALL & ~uint32_t(PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT) &
                                ~uint32_t(PSK_DEVICE_CAPABILITY_INT64_BIT) & ~uint32_t(PSK_DEVICE_CAPABILITY_SUBGROUP_SIZE_CONTROL_BIT);
        const psk::DeviceCaps app = psk::restrictDeviceCaps(caps, common, "test");
        EXPECT_EQ(app.vulkanMemoryModel, caps.vulkanMemoryModel);
        EXPECT_TRUE(app.coopMatPropertiesNV.empty());  // KHR is the one the requirements name
        EXPECT_EQ(psk::selectCoopMatForDevice(app).float16.path, psk::selectCoopMatForDevice(caps).float16.path);
        const psk::DeviceCaps plain =
            psk::restrictDeviceCaps(caps, common & ~uint32_t(PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT), "test");
        EXPECT_FALSE(plain.vulkanMemoryModel);
        EXPECT_EQ(psk::selectCoopMatForDevice(plain).float16.path, CoopMatPath::Scalar);
    }
}

// What an app must enable for the cooperative kernels: the extension and its feature, the Vulkan
// memory model they are compiled under (its extension before 1.2), nothing of it without the bit.
TEST(CoopMatCapabilitiesFromDeviceCaps, RequirementsNameTheMemoryModelWithCooperativeMatrices) {
    psk::DeviceCaps caps = nvidiaDeviceCaps();
    caps.properties.apiVersion = VK_API_VERSION_1_3;
    ASSERT_TRUE(caps.vulkanMemoryModel);
    auto names = [](const PskVulkanDeviceRequirements& r) {
        std::string all;
        for (uint32_t i = 0; i < r.extensionCount; ++i) all += std::string(r.extensionNames[i]) + " ";
        return all;
    };
    PskVulkanDeviceRequirements r{};
    psk::fillDeviceRequirements(caps, VK_API_VERSION_1_3, PSK_DEVICE_CAPABILITY_ALL, &r);
    EXPECT_TRUE(r.supportedCapabilities & PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT);
    EXPECT_TRUE(r.cooperativeMatrixKHR || r.cooperativeMatrixNV);
    EXPECT_EQ(r.vulkanMemoryModel, VK_TRUE);
    EXPECT_EQ(r.vulkanMemoryModelDeviceScope, caps.vulkanMemoryModelDeviceScope ? VK_TRUE : VK_FALSE);
    EXPECT_EQ(names(r).find(VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME), std::string::npos) << names(r);  // core in 1.2
    psk::fillDeviceRequirements(caps, VK_API_VERSION_1_1, PSK_DEVICE_CAPABILITY_ALL, &r);
    EXPECT_NE(names(r).find(VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME), std::string::npos) << names(r);
    psk::fillDeviceRequirements(caps, VK_API_VERSION_1_3, PSK_DEVICE_CAPABILITY_ALL & ~uint32_t(PSK_DEVICE_CAPABILITY_COOPERATIVE_MATRIX_BIT), &r);
    EXPECT_EQ(r.vulkanMemoryModel, VK_FALSE);
    EXPECT_EQ(r.cooperativeMatrixKHR | r.cooperativeMatrixNV | r.shaderBFloat16Type, VK_FALSE);
}

// The FP32 baseline on a GPU with 48 KiB of shared memory: the FlashAttention-2 FP32 kernel with
// 8 x 8 register tiles up to h = 64 (its tiling table's entry 0), 4 x 4 at h = 128 (entry 3), 16
// rows of 4 x 1 score tiles at h = 256 (entry 8); under PSK_FP32_BASELINE=rows the one-row kernel.
void expectFp32Baseline(const psk::TiledAttentionPlan& plan, uint32_t h) {
    const std::string what = plan.kernel.describe();
    ASSERT_EQ(plan.kernel.kernel, psk::KernelId::AttentionFlashFp32) << what;
    EXPECT_EQ(plan.rows, h == 256 ? 16u : 32u) << what;
    EXPECT_NE(plan.kernel.describe().find(h <= 64 ? " ROWS_PER_INVOCATION=8" : " ROWS_PER_INVOCATION=4"), std::string::npos) << what;
    const char* entry = h <= 64 ? "tunable: baselines.fp32_tile=0" : h == 128 ? "tunable: baselines.fp32_tile=3" : "tunable: baselines.fp32_tile=8";
    EXPECT_NE(plan.kernel.reason.find(entry), std::string::npos) << what;
}

/** Causal softmax in float32 storage at h = dv = `headDim`: the FP32 baseline's configuration. */
psk::AttentionConfig causalSoftmaxFp32(uint32_t headDim) {
    psk::AttentionConfig c;
    c.kind = PSK_ATTENTION_KIND_SOFTMAX;
    c.causal = true;
    c.headDim = c.valueDim = headDim;
    c.dataType = PSK_DATA_TYPE_FLOAT32;
    return c;
}

// PSK_FP32_BASELINE=rows keeps the one-row kernel (side-by-side timings); another value fails.
TEST(CoopMatCapabilitiesFromDeviceCaps, Fp32BaselineSwitch) {
    psk::DeviceCaps caps = nvidiaDeviceCaps();
    setGpuLimits(caps);
    psk::AttentionConfig c = causalSoftmaxFp32(64);
    {
        ScopedEnv rows("PSK_FP32_BASELINE", "rows");
        const psk::TiledAttentionPlan plan = psk::planTiledAttention(c, caps);
        EXPECT_EQ(plan.kernel.kernel, psk::KernelId::AttentionTiled) << plan.kernel.describe();
        EXPECT_NE(plan.kernel.reason.find("PSK_FP32_BASELINE=rows"), std::string::npos) << plan.kernel.reason;
    }
    {
        ScopedEnv flash("PSK_FP32_BASELINE", "flash");
        EXPECT_EQ(psk::planTiledAttention(c, caps).kernel.kernel, psk::KernelId::AttentionFlashFp32);
    }
    ScopedEnv bad("PSK_FP32_BASELINE", "row");
    EXPECT_THROW(psk::planTiledAttention(c, caps), psk::Error);
}

// A device's table may keep the one-row FP32 kernel (baselines.fp32_rows 1), for the shapes its
// entry names; 0, another shape, or no table leaves the FlashAttention-2 FP32 kernel, which names
// the parameter as tunable (psk tune tries the other value).
TEST(CoopMatCapabilitiesFromDeviceCaps, Fp32BaselineRowsFromATable) {
    psk::DeviceCaps caps = nvidiaDeviceCaps();
    setGpuLimits(caps);
    psk::AttentionConfig c = causalSoftmaxFp32(64);
    ScopedEnv unset("PSK_FP32_BASELINE", nullptr);
    const psk::TiledAttentionPlan model = psk::planTiledAttention(c, caps);
    EXPECT_EQ(model.kernel.kernel, psk::KernelId::AttentionFlashFp32) << model.kernel.describe();
    EXPECT_NE(model.kernel.reason.find("tunable: baselines.fp32_tile=0 baselines.fp32_rows=0"), std::string::npos) << model.kernel.reason;
    const psk::TuningTable rows = psk::parseTuningTable("psk-tuning 1\ndevice any\nbaselines.fp32_rows 1 h=64 type=f32\n", "rows");
    const psk::TiledAttentionPlan tabled = psk::planTiledAttention(c, caps, &rows);
    EXPECT_EQ(tabled.kernel.kernel, psk::KernelId::AttentionTiled) << tabled.kernel.describe();
    EXPECT_NE(tabled.kernel.reason.find("; baselines.fp32_rows=1 from tuning table rows line 3"), std::string::npos) << tabled.kernel.reason;
    EXPECT_NE(tabled.kernel.reason.find("tunable: baselines.fp32_rows=1"), std::string::npos) << tabled.kernel.reason;
    c.headDim = c.valueDim = 128;  // a shape the entry does not name
    EXPECT_EQ(psk::planTiledAttention(c, caps, &rows).kernel.kernel, psk::KernelId::AttentionFlashFp32);
    c.headDim = c.valueDim = 64;
    const psk::TuningTable flash = psk::parseTuningTable("psk-tuning 1\ndevice any\nbaselines.fp32_rows 0\n", "flash");
    EXPECT_EQ(psk::planTiledAttention(c, caps, &flash).kernel.kernel, psk::KernelId::AttentionFlashFp32);
    EXPECT_THROW(psk::parseTuningTable("psk-tuning 1\ndevice any\nbaselines.fp32_rows 2\n", "past"), psk::Error);
}

// The baselines' plan (lib/forward/tiled_forward.cpp) on an NVIDIA GPU: the cooperative kernel for
// 16-bit storage, with a tiling whose shared memory fits 48 KiB and whose key tile suits the shape;
// the FP32 kernel for float32 storage and under PSK_DISABLE_COOPMAT, each with its reason.
TEST(CoopMatCapabilitiesFromDeviceCaps, BaselinesTakeTheCooperativeKernelFor16BitStorage) {
    psk::DeviceCaps caps = nvidiaDeviceCaps();
    setGpuLimits(caps);
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", nullptr);
    const bool khr = psk::findShader("block_states_coopmat.khr_f16.f32") != nullptr;
    const bool nv = psk::findShader("block_states_coopmat.nv_f16.f32") != nullptr;
    for (PskAttentionKind kind : {PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_KIND_POLYNOMIAL}) {
        for (uint32_t h : {16u, 64u, 128u, 256u}) {
            for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16, PSK_DATA_TYPE_FLOAT32}) {
                psk::AttentionConfig c;
                c.kind = kind;
                c.causal = true;
                c.headDim = h;
                c.valueDim = h == 16 ? 40 : h;
                c.dataType = type;
                {
                    ScopedEnv env("PSK_DISABLE_COOPMAT", nullptr);
                    const psk::TiledAttentionPlan plan = psk::planTiledAttention(c, caps);
                    const std::string what = plan.kernel.describe();
                    if (type == PSK_DATA_TYPE_FLOAT32 || (!khr && !nv)) {
                        expectFp32Baseline(plan, h);
                        continue;
                    }
                    const psk::kernel::SpecConstants& k = plan.kernel.constants;
                    auto get = [&](const char* name) {
                        for (size_t i = 0; i < k.names.size(); ++i)
                            if (std::string(k.names[i]) == name) return k.values[i];
                        ADD_FAILURE() << name;
                        return 0u;
                    };
                    // float16 data (and bfloat16 data where the backend has bfloat16 operands): the
                    // FlashAttention-2 kernel, its operands as stored; bfloat16 data on float16
                    // operands: attention_tiled_coopmat, which scales them into float16's range.
                    const bool bf16Operands = plan.kernel.variant.find("_bf16_") != std::string::npos;
                    if (type == PSK_DATA_TYPE_FLOAT16 || bf16Operands) {
                        ASSERT_EQ(plan.kernel.kernel, psk::KernelId::AttentionFlashCoopMat) << what;
                        EXPECT_EQ(plan.kernel.variant.rfind(std::string("attention_flash_coopmat.") + (khr ? "khr_" : "nv_f16_"), 0), 0u)
                            << what;
                        psk::kernel::AttentionFlashCoopMatSpec spec;
                        spec.THREADS = get("THREADS"), spec.HEAD_DIM = get("HEAD_DIM"), spec.VALUE_DIM = get("VALUE_DIM");
                        spec.KEY_TILE = get("KEY_TILE"), spec.CM_M = get("CM_M"), spec.CM_N = get("CM_N"), spec.CM_K = get("CM_K");
                        spec.SG_M = get("SG_M");
                        EXPECT_LE(psk::attentionFlashCoopMatSharedBytes(spec, false), 49152u) << what;
                        EXPECT_EQ(spec.THREADS, spec.SG_M * 32) << what;
                        EXPECT_EQ(spec.KEY_TILE % spec.CM_N, 0u) << what;
                        EXPECT_EQ(spec.KEY_TILE % spec.CM_K, 0u) << what;
                        // 64 query rows up to h = 64 and 128 within 48 KiB; 16 or more at h = 256.
                        EXPECT_GE(plan.rows, h <= 128 ? 64u : 16u) << what;
                        spec.ROW_TILES = get("ROW_TILES");
                        EXPECT_EQ(spec.ROW_TILES, 1u) << what;  // the model's choices: one row tile per subgroup
                        EXPECT_EQ(plan.rows, spec.SG_M * spec.CM_M) << what;
                        EXPECT_EQ(plan.keysPerDispatch, 8192u) << what;  // no loop budget on a GPU
                        continue;
                    }
                    ASSERT_EQ(plan.kernel.kernel, psk::KernelId::AttentionTiledCoopMat) << what;
                    EXPECT_EQ(plan.kernel.variant.rfind(std::string("attention_tiled_coopmat.") + (khr ? "khr_f16_" : "nv_f16_"), 0), 0u)
                        << what;
                    psk::kernel::AttentionTiledCoopMatSpec spec;
                    spec.THREADS = get("THREADS"), spec.HEAD_DIM = get("HEAD_DIM"), spec.VALUE_DIM = get("VALUE_DIM");
                    spec.KEY_TILE = get("KEY_TILE"), spec.CM_M = get("CM_M"), spec.CM_N = get("CM_N"), spec.CM_K = get("CM_K");
                    spec.SG_M = get("SG_M"), spec.SG_N = get("SG_N"), spec.WN = get("WN"), spec.WIDTH_CHUNK = get("WIDTH_CHUNK");
                    EXPECT_LE(psk::attentionTiledCoopMatSharedBytes(spec, false), 49152u) << what;
                    EXPECT_EQ(spec.THREADS, spec.SG_M * spec.SG_N * 32) << what;
                    EXPECT_EQ(spec.KEY_TILE % spec.CM_N, 0u) << what;
                    EXPECT_EQ(spec.KEY_TILE % spec.CM_K, 0u) << what;
                    EXPECT_EQ(spec.WIDTH_CHUNK % spec.CM_K, 0u) << what;
                    EXPECT_GE(spec.SG_N * spec.WN * spec.CM_N, spec.VALUE_DIM) << what;
                    EXPECT_EQ(plan.rows, spec.SG_M * spec.CM_M) << what;
                    EXPECT_EQ(plan.keysPerDispatch, 8192u) << what;  // no loop budget on a GPU
                }
                {
                    ScopedEnv env("PSK_DISABLE_COOPMAT", "1");
                    const psk::TiledAttentionPlan plan = psk::planTiledAttention(c, caps);
                    expectFp32Baseline(plan, h);
                    if (type != PSK_DATA_TYPE_FLOAT32)
                        EXPECT_NE(plan.kernel.reason.find("PSK_DISABLE_COOPMAT"), std::string::npos) << plan.kernel.reason;
                }
            }
        }
    }
}

// A tuning table's baselines.tile entry picks the FlashAttention-2 kernel's tiling (on an NVIDIA
// GPU's caps): applied where it fits, with the entry named in the reason; an entry past the
// tiling table or one that does not fit is ignored, saying why; the plan names the tunable.
TEST(CoopMatCapabilitiesFromDeviceCaps, BaselinesTileFromATuningTable) {
    psk::DeviceCaps caps = nvidiaDeviceCaps();
    setGpuLimits(caps);
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", nullptr);
    ScopedEnv disable("PSK_DISABLE_COOPMAT", nullptr);
    psk::AttentionConfig c;
    c.kind = PSK_ATTENTION_KIND_SOFTMAX;
    c.causal = true;
    c.headDim = c.valueDim = 64;
    c.dataType = PSK_DATA_TYPE_FLOAT16;
    const psk::TiledAttentionPlan model = psk::planTiledAttention(c, caps);
    if (model.kernel.kernel != psk::KernelId::AttentionFlashCoopMat) GTEST_SKIP() << "this build has no FlashAttention-2 KHR/NV variant";
    EXPECT_NE(model.kernel.reason.find("; tunable: baselines.tile="), std::string::npos) << model.kernel.reason;
    auto spec = [](const psk::TiledAttentionPlan& p, const char* name) {
        for (size_t i = 0; i < p.kernel.constants.names.size(); ++i)
            if (std::string(p.kernel.constants.names[i]) == name) return p.kernel.constants.values[i];
        return ~0u;
    };
    // Entry 5 of the GPU table: 2 row groups of 16 keys.
    const psk::TuningTable table = psk::parseTuningTable("psk-tuning 1\ndevice any\nbaselines.tile 5 h=64 type=f16 causal=1\n", "test");
    const psk::TiledAttentionPlan tuned = psk::planTiledAttention(c, caps, &table);
    EXPECT_EQ(spec(tuned, "SG_M"), 2u) << tuned.kernel.describe();
    EXPECT_EQ(spec(tuned, "KEY_TILE"), 16u) << tuned.kernel.describe();
    EXPECT_EQ(tuned.rows, 2u * spec(tuned, "CM_M"));
    EXPECT_NE(tuned.kernel.reason.find("baselines.tile=5 from tuning table test line 3"), std::string::npos) << tuned.kernel.reason;
    // Entry 11: two row groups of two row tiles each (64 rows), 32 keys.
    const psk::TuningTable rowTiles = psk::parseTuningTable("psk-tuning 1\ndevice any\nbaselines.tile 11\n", "rows");
    const psk::TiledAttentionPlan twoTiles = psk::planTiledAttention(c, caps, &rowTiles);
    EXPECT_EQ(spec(twoTiles, "SG_M"), 2u) << twoTiles.kernel.describe();
    EXPECT_EQ(spec(twoTiles, "ROW_TILES"), 2u) << twoTiles.kernel.describe();
    EXPECT_EQ(spec(twoTiles, "KEY_TILE"), 32u) << twoTiles.kernel.describe();
    EXPECT_EQ(twoTiles.rows, 4u * spec(twoTiles, "CM_M"));
    EXPECT_EQ(spec(model, "ROW_TILES"), 1u) << model.kernel.describe();  // the model's choice keeps one row tile
    // Another shape class is not matched; a polysketch entry is not read.
    psk::AttentionConfig other = c;
    other.headDim = other.valueDim = 128;
    EXPECT_EQ(psk::planTiledAttention(other, caps, &table).kernel.reason.find("from tuning table"), std::string::npos);
    const psk::TuningTable past = psk::parseTuningTable("psk-tuning 1\ndevice any\nbaselines.tile 15\n", "past");
    const psk::TiledAttentionPlan ignored = psk::planTiledAttention(c, caps, &past);
    EXPECT_EQ(spec(ignored, "SG_M"), spec(model, "SG_M"));
    EXPECT_NE(ignored.kernel.reason.find("(baselines.tile 15) ignored: the tiling table has 14 entries"), std::string::npos)
        << ignored.kernel.reason;
}

/** DeviceCaps of an AMD RDNA3 GPU (RADV: KHR only, 16x16x16, wave32 / wave64) or an Intel Arc
 *  (ANV: KHR only, 8x8x16, subgroups of 8 to 32), with the lists of amdLike() / intelLike(). */
psk::DeviceCaps khrOnlyDeviceCaps(bool amd) {
    psk::DeviceCaps caps;
    caps.properties.deviceType = amd ? VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU : VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
    caps.subgroupSize = amd ? 64 : 32;
    caps.minSubgroupSize = amd ? 32 : 8;
    caps.maxSubgroupSize = amd ? 64 : 32;
    caps.shaderFloat16 = caps.storageBuffer16BitAccess = true;
    caps.cooperativeMatrixKHR = true;
    caps.vulkanMemoryModel = caps.vulkanMemoryModelDeviceScope = true;
    const VkComponentTypeKHR f16 = VK_COMPONENT_TYPE_FLOAT16_KHR, f32 = VK_COMPONENT_TYPE_FLOAT32_KHR;
    if (amd)
        caps.coopMatPropertiesKHR = {entry(16, 16, 16, f16, f32), entry(16, 16, 16, f16, f16)};
    else
        caps.coopMatPropertiesKHR = {entry(8, 8, 16, f16, f16), entry(8, 8, 16, f16, f32)};
    return caps;
}


/** A packed sketch as the plan sees it (shape and weight range; the values are not read otherwise). */
psk::PackedSketch packedSketch(bool learned, uint32_t degree, uint32_t h, uint32_t r, float weight = 1.5f) {
    psk::PackedSketch p;
    p.learned = learned;
    p.degree = degree;
    p.levels = learned ? 0 : degree == 2 ? 0 : degree == 4 ? 1 : 2;
    p.sketchLength = !learned && degree == 2 ? h : r;
    p.hidden = learned ? 8 * r : 8;
    p.data.assign(64, weight);
    return p;
}

// The polysketch plan (lib/forward/polysketch_plan.cpp) on simulated NVIDIA, AMD and Intel GPUs:
// the feature map takes the cooperative kernel for 16-bit storage with p = 4 sketches (random and
// learned), with a tiling that fits the device; the FP32 kernel for float32 storage, for degrees
// 2 and 8, for a weight float16 operands cannot hold, and under PSK_DISABLE_COOPMAT.
TEST(CoopMatCapabilitiesFromDeviceCaps, FeatureMapTakesTheCooperativeKernelFor16BitStorage) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", nullptr);
    const bool khr = psk::findShader("sketch_features_coopmat.khr_f16_random.f32") != nullptr;
    const bool nv = psk::findShader("sketch_features_coopmat.nv_f16_random.f32") != nullptr;
    struct Device {
        const char* name;
        psk::DeviceCaps caps;
        bool coop;  // this build has a variant the device takes
        const char* prefix;
    };
    std::vector<Device> devices{{"nvidia", nvidiaDeviceCaps(), khr || nv, khr ? "khr_f16_" : "nv_f16_"},
                                {"amd", khrOnlyDeviceCaps(true), khr, "khr_f16_"},
                                {"intel", khrOnlyDeviceCaps(false), khr, "khr_f16_"}};
    for (Device& device : devices) {
        setGpuLimits(device.caps);
        for (bool learned : {false, true}) {
            for (uint32_t h : {16u, 64u, 128u}) {
                for (uint32_t r : {8u, 32u, 64u}) {
                    for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16, PSK_DATA_TYPE_FLOAT32}) {
                        psk::AttentionConfig c;
                        c.kind = PSK_ATTENTION_KIND_POLYSKETCH;
                        c.causal = true;
                        c.headDim = h;
                        c.valueDim = 64;
                        c.sketchSize = r;
                        c.blockSize = 64;
                        c.dataType = type;
                        const psk::PackedSketch sketch = packedSketch(learned, 4, h, r);
                        const std::string where = std::string(device.name) + (learned ? " learned" : " random") +
                                                  " h" + std::to_string(h) + " r" + std::to_string(r) + " " +
                                                  std::to_string(int(type));
                        ScopedEnv env("PSK_DISABLE_COOPMAT", nullptr);
                        const psk::PolysketchPlan plan = psk::planPolysketch(c, sketch, device.caps);
                        const psk::KernelChoice& k = plan.featureKernel;
                        if (type == PSK_DATA_TYPE_FLOAT32 || !device.coop) {
                            EXPECT_EQ(k.kernel, psk::KernelId::SketchFeatures) << where << ": " << k.describe();
                            continue;
                        }
                        ASSERT_EQ(k.kernel, psk::KernelId::SketchFeaturesCoopMat) << where << ": " << k.describe();
                        EXPECT_EQ(k.variant, std::string("sketch_features_coopmat.") + device.prefix + (learned ? "learned" : "random") +
                                                 (type == PSK_DATA_TYPE_FLOAT16 ? ".f16" : ".bf16"))
                            << where;
                        psk::kernel::SketchFeaturesCoopMatSpec spec;
                        const psk::kernel::SpecConstants& sc = k.constants;
                        auto get = [&](const char* name) {
                            for (size_t i = 0; i < sc.names.size(); ++i)
                                if (std::string(sc.names[i]) == name) return sc.values[i];
                            ADD_FAILURE() << name;
                            return 0u;
                        };
                        spec.THREADS = get("THREADS"), spec.HEAD_DIM = get("HEAD_DIM"), spec.SKETCH = get("SKETCH");
                        spec.HIDDEN = get("HIDDEN"), spec.CM_M = get("CM_M"), spec.CM_N = get("CM_N"), spec.CM_K = get("CM_K");
                        spec.SG_M = get("SG_M"), spec.SG_N = get("SG_N"), spec.N_CHUNK = get("N_CHUNK"), spec.K_CHUNK = get("K_CHUNK");
                        // Up to the device's shared memory, at most 48 KiB (PolysketchTiles::coopSharedBytesCap).
                        const uint32_t cap = std::min<uint32_t>(device.caps.limits().maxComputeSharedMemorySize, 49152u);
                        EXPECT_LE(psk::sketchFeaturesCoopMatSharedBytes(spec, learned, false), cap) << where;
                        // The case the 48 KiB are for: two row groups per workgroup (32 rows of 16 x 16
                        // shapes) for the learned sketch at h = 64, r = 32 (one under 32 KiB: its weights
                        // are split once per workgroup).
                        if (learned && h == 64 && r == 32 && cap >= 49152u) EXPECT_GE(spec.SG_M, 2u) << where;
                        EXPECT_EQ(spec.THREADS, spec.SG_M * spec.SG_N * device.caps.subgroupSize) << where;
                        EXPECT_EQ(spec.N_CHUNK % spec.CM_N, 0u) << where;
                        EXPECT_EQ(spec.N_CHUNK % spec.CM_K, 0u) << where;
                        EXPECT_EQ(spec.K_CHUNK % spec.CM_K, 0u) << where;
                        EXPECT_EQ(spec.HIDDEN, learned ? 8 * r : 8u) << where;
                        EXPECT_EQ(plan.featureRows, spec.SG_M * spec.CM_M) << where;
                        // Where the subgroup size varies (AMD, Intel), the kernel pins it.
                        const bool varies = device.caps.minSubgroupSize != device.caps.maxSubgroupSize;
                        EXPECT_EQ(k.requiredSubgroupSize, varies ? device.caps.subgroupSize : 0u) << where;
                    }
                }
            }
        }
        // Degrees 2 and 8, and a weight float16 cannot hold: the FP32 kernel, with the reason.
        psk::AttentionConfig c;
        c.kind = PSK_ATTENTION_KIND_POLYSKETCH;
        c.causal = true;
        c.headDim = 64;
        c.valueDim = 64;
        c.dataType = PSK_DATA_TYPE_FLOAT16;
        for (uint32_t degree : {2u, 8u}) {
            c.degree = degree;
            const psk::PolysketchPlan plan = psk::planPolysketch(c, packedSketch(false, degree, 64, 32), device.caps);
            EXPECT_EQ(plan.featureKernel.kernel, psk::KernelId::SketchFeatures) << plan.featureKernel.describe();
            if (device.coop) EXPECT_NE(plan.featureKernel.reason.find("p = 4 sketches only"), std::string::npos) << plan.featureKernel.reason;
        }
        c.degree = 4;
        const psk::PolysketchPlan big = psk::planPolysketch(c, packedSketch(true, 4, 64, 32, 40000.0f), device.caps);
        EXPECT_EQ(big.featureKernel.kernel, psk::KernelId::SketchFeatures) << big.featureKernel.describe();
        if (device.coop) EXPECT_NE(big.featureKernel.reason.find("float16 operands"), std::string::npos) << big.featureKernel.reason;
        {
            ScopedEnv env("PSK_DISABLE_COOPMAT", "1");
            const psk::PolysketchPlan off = psk::planPolysketch(c, packedSketch(true, 4, 64, 32), device.caps);
            EXPECT_EQ(off.featureKernel.kernel, psk::KernelId::SketchFeatures) << off.featureKernel.describe();
        }
    }
}

// On a CPU driver (lavapipe's capabilities, even one exposing VK_KHR_cooperative_matrix) the
// feature map keeps its team / generic kernel unless emulation is asked for; emulated, it takes
// the emulated variant for 16-bit storage and stays within llvmpipe's loop budget.
TEST(CoopMatCapabilitiesFromDeviceCaps, FeatureMapOnACpuDevice) {
    psk::DeviceCaps caps = khrOnlyDeviceCaps(true);
    caps.properties.deviceType = VK_PHYSICAL_DEVICE_TYPE_CPU;
    caps.subgroupSize = caps.minSubgroupSize = caps.maxSubgroupSize = 8;
    setGpuLimits(caps);
    ScopedEnv disable("PSK_DISABLE_COOPMAT", nullptr);
    psk::AttentionConfig c;
    c.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    c.causal = true;
    c.headDim = 32;
    c.valueDim = 32;
    c.sketchSize = 16;
    c.blockSize = 32;
    for (bool learned : {false, true}) {
        for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16, PSK_DATA_TYPE_FLOAT32}) {
            c.dataType = type;
            const psk::PackedSketch sketch = packedSketch(learned, 4, 32, 16);
            {
                ScopedEnv emulation("PSK_COOPMAT_EMULATION", nullptr);
                const psk::PolysketchPlan plan = psk::planPolysketch(c, sketch, caps);
                EXPECT_NE(plan.featureKernel.kernel, psk::KernelId::SketchFeaturesCoopMat) << plan.featureKernel.describe();
            }
            ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
            const psk::PolysketchPlan plan = psk::planPolysketch(c, sketch, caps);
            if (type == PSK_DATA_TYPE_FLOAT32) {
                EXPECT_NE(plan.featureKernel.kernel, psk::KernelId::SketchFeaturesCoopMat) << plan.featureKernel.describe();
                continue;
            }
            ASSERT_EQ(plan.featureKernel.kernel, psk::KernelId::SketchFeaturesCoopMat) << plan.featureKernel.describe();
            EXPECT_EQ(plan.featureKernel.variant.rfind(std::string("sketch_features_coopmat.") +
                                                           (type == PSK_DATA_TYPE_FLOAT16 ? "emu_f16_" : "emu_bf16_") +
                                                           (learned ? "learned" : "random"),
                                                       0),
                      0u)
                << plan.featureKernel.variant;
            EXPECT_NE(plan.featureKernel.reason.find("loop iterations per invocation"), std::string::npos) << plan.featureKernel.reason;
        }
    }
    // A learned sketch too long for llvmpipe's loop budget (r = 32: 256 hidden units) keeps the
    // generic kernel, and says why.
    c.dataType = PSK_DATA_TYPE_FLOAT16;
    c.sketchSize = 32;
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    const psk::PolysketchPlan plan = psk::planPolysketch(c, packedSketch(true, 4, 32, 32), caps);
    EXPECT_EQ(plan.featureKernel.kernel, psk::KernelId::SketchFeatures) << plan.featureKernel.describe();
    EXPECT_NE(plan.featureKernel.reason.find("llvmpipe"), std::string::npos) << plan.featureKernel.reason;
}

// The plans an H200's psk tune tries first (docs/MODEL.md, "Row groups and the register bound"),
// planned for an NVIDIA GPU's capabilities and limits (48 KiB of shared memory, subgroups of 32) at
// the headline shape: the model's cooperative output (SG_M 2: 128 invocations, the query side in
// the kernel, 64-feature chunks), output.sg_m 8 (512 invocations; the query side's pool leaves no
// room, so the feature map's q rows; chunks of 32), and states.sg_m 8 (512 invocations, 128
// features). None of them runs on lavapipe (its 32 KiB); this pins what the GPU will run.
TEST(CoopMatCapabilitiesFromDeviceCaps, RowGroupsPlannedForAnH200) {
    if (!psk::findShader("polysketch_output_coopmat.khr_f16.f16") || !psk::findShader("block_states_coopmat.khr_f16.f16"))
        GTEST_SKIP() << "this build has no KHR cooperative-matrix shaders";
    psk::DeviceCaps caps = nvidiaDeviceCaps();
    setGpuLimits(caps);
    caps.subgroupOperations = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", nullptr);
    ScopedEnv stages("PSK_COOPMAT_STAGES", nullptr);
    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    info.degree = 4;
    info.numQueryHeads = info.numKeyValueHeads = 16;
    info.headDim = info.valueDim = 64;
    info.sketchSize = 32;
    info.blockSize = 256;
    info.dataType = PSK_DATA_TYPE_FLOAT16;
    info.seed = 1;
    const psk::ResolvedAttention resolved = psk::resolveAttention(info, caps);
    auto plan = [&](const char* entry) {
        psk::TuningSelection tuning;
        tuning.table = std::make_shared<const psk::TuningTable>(
            psk::parseTuningTable(std::string("psk-tuning 1\ndevice any\n") + entry + "\n", "h200"));
        return psk::planPolysketch(resolved.config, *resolved.sketch, caps, entry[0] ? &tuning : nullptr);
    };
    auto constants = [](const psk::KernelChoice& k) { return k.variant + " " + k.constants.describe() + ": " + k.reason; };

    const psk::PolysketchPlan model = plan("");
    const std::string out = constants(model.outputKernel);
    EXPECT_NE(out.find("polysketch_output_coopmat.khr_f16.f16"), std::string::npos) << out;
    EXPECT_NE(out.find("THREADS=128 "), std::string::npos) << out;
    EXPECT_NE(out.find(" SG_M=2 SG_N=2 WN=3 FEAT_CHUNK=64 KEY_TILE=64 WIDTH_CHUNK=64 "), std::string::npos) << out;
    EXPECT_NE(out.find(" FUSED_QUERY=2 "), std::string::npos) << out;
    EXPECT_TRUE(model.fusedQuery);
    // Z as operands packed once per block (the model's choice): records of 64 features x 80
    // columns, hi + lo; output.z_packed 0 stages Z in the output again with the same tiling (the
    // fourth H200 run's kernel).
    EXPECT_NE(out.find(" Z_PACKED=1: "), std::string::npos) << out;
    EXPECT_EQ(model.zOperands.kernel.variant, "z_operands.f16.f32");
    EXPECT_EQ(model.zOperands.chunk, 64u);
    EXPECT_EQ(model.zOperands.record, 1u + 2u * 64u * 80u / 8u);
    const psk::PolysketchPlan staged = plan("output.z_packed 0");
    const std::string outStaged = constants(staged.outputKernel);
    EXPECT_NE(outStaged.find(" SG_M=2 SG_N=2 WN=3 FEAT_CHUNK=64 KEY_TILE=64 WIDTH_CHUNK=64 "), std::string::npos) << outStaged;
    EXPECT_NE(outStaged.find(" Z_PACKED=0: "), std::string::npos) << outStaged;
    EXPECT_TRUE(staged.zOperands.kernel.empty());
    // 4 row groups: without B in shared memory the chunks of 64 features stay (32 when staged).
    const psk::PolysketchPlan rows4 = plan("output.sg_m 4");
    const std::string out4 = constants(rows4.outputKernel);
    EXPECT_NE(out4.find("THREADS=256 "), std::string::npos) << out4;
    EXPECT_NE(out4.find(" SG_M=4 SG_N=2 WN=3 FEAT_CHUNK=64 KEY_TILE=32 WIDTH_CHUNK=32 "), std::string::npos) << out4;
    EXPECT_NE(out4.find(" FUSED_QUERY=2 "), std::string::npos) << out4;
    const std::string states = constants(model.statesKernel);
    EXPECT_NE(states.find("THREADS=128 "), std::string::npos) << states;
    EXPECT_NE(states.find(" SG_M=2 SG_N=2 WM=2 WN=2 KEY_TILE=32 "), std::string::npos) << states;
    EXPECT_NE(states.find("tunable: states.sg_m=2"), std::string::npos) << states;

    const psk::PolysketchPlan rows8 = plan("output.sg_m 8");
    const std::string out8 = constants(rows8.outputKernel);
    EXPECT_NE(out8.find("THREADS=512 "), std::string::npos) << out8;
    EXPECT_NE(out8.find(" SG_M=8 SG_N=2 WN=3 FEAT_CHUNK=32 KEY_TILE=32 WIDTH_CHUNK=32 "), std::string::npos) << out8;
    EXPECT_NE(out8.find(" FUSED_QUERY=0 "), std::string::npos) << out8;
    EXPECT_NE(out8.find("8 row groups leave no room for the query side's pool"), std::string::npos) << out8;
    EXPECT_FALSE(rows8.fusedQuery);

    const psk::PolysketchPlan states8 = plan("states.sg_m 8");
    const std::string st8 = constants(states8.statesKernel);
    EXPECT_NE(st8.find("THREADS=512 "), std::string::npos) << st8;
    EXPECT_NE(st8.find(" SG_M=8 SG_N=2 WM=1 WN=2 KEY_TILE=32 "), std::string::npos) << st8;
    EXPECT_NE(st8.find("states.sg_m=8 from tuning table h200 line 3"), std::string::npos) << st8;
    EXPECT_TRUE(states8.fusedQuery);  // the output keeps the model's tiling
}

// The machine's own device (lavapipe in CI, which has neither extension): scalar, with a reason,
// and the context creation with the extended feature chain raises no validation message.
TEST(CoopMatSelectionOnThisDevice, LavapipeStaysScalar) {
    PskContextCreateInfo info{};
    info.device = "llvmpipe";
    info.flags = PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    PskContext context = nullptr;
    if (pskCreateContext(&info, &context) != PSK_SUCCESS) GTEST_SKIP() << "no lavapipe device";
    const psk::DeviceCaps& caps = context->caps();
    const CoopMatCapabilities c = psk::coopMatCapabilities(caps);
    EXPECT_TRUE(c.cpuDevice);
    EXPECT_EQ(c.nvCooperativeMatrix, caps.cooperativeMatrixNV);
    EXPECT_EQ(c.khrCooperativeMatrix, caps.cooperativeMatrixKHR);
    EXPECT_EQ(c.nvProperties.size(), caps.coopMatPropertiesNV.size());
    EXPECT_EQ(c.khrProperties.size(), caps.coopMatPropertiesKHR.size());
    if (!caps.cooperativeMatrixNV && !caps.cooperativeMatrixKHR) {
        EXPECT_FALSE(caps.vulkanMemoryModel);  // enabled only with a cooperative-matrix extension
        EXPECT_TRUE(caps.coopMatPropertiesNV.empty());
        EXPECT_TRUE(caps.coopMatPropertiesKHR.empty());
    }
    const auto s = psk::selectCoopMat(c, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::Scalar);
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::Scalar);
    EXPECT_EQ(s.float16.reason.rfind("scalar (", 0), 0u) << s.float16.reason;
    if (!caps.cooperativeMatrixKHR)
        EXPECT_NE(s.float16.reason.find("no VK_KHR_cooperative_matrix"), std::string::npos) << s.float16.reason;
    std::printf("%s: %s\n", caps.properties.deviceName, s.describe().c_str());
    EXPECT_EQ(context->validationMessageCount(), 0u);
    pskDestroyContext(context);
}

}  // namespace

// block_states_coopmat.comp decodes each invocation's pair entries once per workgroup: round `it`
// of its expansion gives invocation lid feature (it THREADS + lid) % TILE_M, which is its feature
// it % ONES_PER_THREAD only where one of THREADS and TILE_M divides the other. Every tiling the
// planner makes, on the shapes and subgroup sizes devices report and with every row-group count a
// tuning table may ask for, keeps that.
TEST(CoopMatSelection, StatesTilingsKeepEachInvocationsFeatures) {
    psk::CoopMatChoice choice;
    choice.path = psk::CoopMatPath::KHR;
    for (uint32_t m : {8u, 16u, 32u})
        for (uint32_t n : {8u, 16u})
            for (uint32_t k : {16u, 32u})
                for (uint32_t subgroup : {8u, 16u, 32u, 64u})
                    for (uint32_t rowGroups : {0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u})
                        for (uint32_t dv : {16u, 40u, 64u, 128u, 256u}) {
                            choice.shape.m = m;
                            choice.shape.n = n;
                            choice.shape.k = k;
                            const auto plan = psk::planBlockStatesCoopMat(choice, subgroup, 32, dv, 1u << 20, false, false, rowGroups, 4096);
                            ASSERT_GT(plan.threads, 0u);
                            EXPECT_TRUE(plan.threads % plan.tileF == 0 || plan.tileF % plan.threads == 0)
                                << "m " << m << " n " << n << " k " << k << " subgroup " << subgroup << " row groups " << rowGroups
                                << " dv " << dv << ": THREADS " << plan.threads << ", TILE_M " << plan.tileF;
                        }
}
