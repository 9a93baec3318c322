// The cooperative-matrix path selection on simulated devices (no GPU): which extension, which shape,
// and why, for float16 and bfloat16 operands; the environment switch; the kernel's tile plan.
#include <gtest/gtest.h>

#include "vk/coopmat_selection.hpp"

namespace {

using psk::CoopMatCapabilities;
using psk::CoopMatComponent;
using psk::CoopMatOperand;
using psk::CoopMatPath;
using psk::CoopMatProperty;

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

/** Like an NVIDIA driver: NV and KHR, f16 shapes with f16 and f32 accumulators, no bf16 extension. */
CoopMatCapabilities nvidiaLike() {
    CoopMatCapabilities c = baseDevice();
    c.nvCooperativeMatrix = c.khrCooperativeMatrix = true;
    for (auto* list : {&c.nvProperties, &c.khrProperties}) {
        *list = {prop(16, 8, 16), prop(16, 8, 8), prop(16, 16, 16), prop(16, 16, 16, CoopMatComponent::Float16,
                                                                          CoopMatComponent::Float16)};
    }
    return c;
}

/** Like RADV / AMDVLK on RDNA3: KHR only, 16x16x16. */
CoopMatCapabilities amdLike() {
    CoopMatCapabilities c = baseDevice();
    c.khrCooperativeMatrix = true;
    c.khrProperties = {prop(16, 16, 16), prop(16, 16, 16, CoopMatComponent::Float16, CoopMatComponent::Float16)};
    return c;
}

/** Like ANV on Arc (DG2): KHR only, 8x8x16. */
CoopMatCapabilities intelLike() {
    CoopMatCapabilities c = baseDevice();
    c.khrCooperativeMatrix = true;
    c.khrProperties = {prop(8, 8, 16), prop(8, 8, 16, CoopMatComponent::Float16, CoopMatComponent::Float16)};
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
    caps.khrShaders = caps.khrBf16Shaders = false;  // e.g. Debian's glslc: NV only
    const auto s = psk::selectCoopMat(caps, false);
    EXPECT_EQ(s.float16.path, CoopMatPath::NV);
    EXPECT_EQ(s.float16.shape.m, 16u);
    EXPECT_EQ(s.float16.shape.n, 16u);
    EXPECT_NE(s.float16.reason.find("KHR: this build has no KHR shaders"), std::string::npos) << s.float16.reason;
    EXPECT_EQ(s.bfloat16.path, CoopMatPath::NV);
    EXPECT_EQ(psk::blockStatesCoopMatShader(s.float16, PSK_DATA_TYPE_FLOAT32), "block_states_coopmat.nv_f16.f32");
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
    EXPECT_EQ(s.float16.shape.k, 16u);
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
    ASSERT_EQ(plan.specConstants.size(), 11u);
    EXPECT_EQ(plan.threads, 32u);  // 2 x 2 subgroups of 8
    EXPECT_EQ(plan.tileF, 64u);
    EXPECT_EQ(plan.tileC % 8, 0u);
    EXPECT_EQ(plan.keyTile % 16, 0u);
    EXPECT_LE(plan.sharedBytes, 32768u);
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
    ASSERT_EQ(plan.specConstants.size(), 11u);
    EXPECT_EQ(plan.specConstants[0], 128u);
    EXPECT_EQ(plan.tileC, 128u);  // the whole value dimension in one column tile
    EXPECT_LE(plan.sharedBytes, 49152u);
    const auto small = psk::planBlockStatesCoopMat(s.float16, 32, 64, 128, 16384);
    EXPECT_LE(small.sharedBytes, 16384u);
    EXPECT_EQ(small.keyTile % 16, 0u);
    EXPECT_TRUE(psk::planBlockStatesCoopMat(psk::CoopMatChoice{}, 32, 64, 128, 49152).specConstants.empty());
}

}  // namespace
