// The kernel table (lib/kernels/kernel_table.hpp) and the kernel interface
// (shaders/interface/*.h, lib/kernels/kernel_interface.hpp) against the SPIR-V this build embeds:
// every variant the table names is built, every built variant belongs to a table row, and in
// every variant each specialization constant (SpecId) has the default of the host struct's field
// of that constant_id, so the host sets the constants the shader declares.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/coop_variants.hpp"
#include "kernels/kernel_table.hpp"
#include "util/error.hpp"
#include "kernels/shader_registry.hpp"

namespace {

using psk::KernelId;

/**
 * SpecId -> the defaults of the constants decorated with it, read from a SPIR-V module (booleans
 * as 0/1). A kernel whose workgroup size is `local_size_x_id = 0` has two: its own constant and
 * the workgroup size's x component (default 1).
 */
std::map<uint32_t, std::set<uint32_t>> specIdDefaults(const psk::ShaderCode& code) {
    const uint32_t* w = code.code;
    const size_t words = code.bytes / 4;
    std::map<uint32_t, uint32_t> values;   // result id -> default
    std::map<uint32_t, uint32_t> specIds;  // result id -> SpecId
    for (size_t i = 5; i < words;) {
        const uint32_t count = w[i] >> 16, op = w[i] & 0xFFFFu;
        if (count == 0) break;
        if (op == 48 /* OpSpecConstantTrue */) values[w[i + 2]] = 1;
        if (op == 49 /* OpSpecConstantFalse */) values[w[i + 2]] = 0;
        if (op == 50 /* OpSpecConstant */) values[w[i + 2]] = w[i + 3];
        if (op == 71 /* OpDecorate */ && w[i + 2] == 1 /* SpecId */) specIds[w[i + 1]] = w[i + 3];
        i += count;
    }
    std::map<uint32_t, std::set<uint32_t>> out;
    for (const auto& [id, spec] : specIds)
        if (values.count(id)) out[spec].insert(values[id]);
    return out;
}

/** The host struct of a kernel, default-constructed (the shader's defaults), by constant_id. */
psk::kernel::SpecConstants hostDefaults(KernelId id) {
    using namespace psk::kernel;
    switch (id) {
        case KernelId::AttentionTiled: return SpecConstants::of(AttentionTiledSpec{});
        case KernelId::AttentionTiledCoopMat: return SpecConstants::of(AttentionTiledCoopMatSpec{});
        case KernelId::SketchFeatures: return SpecConstants::of(SketchFeaturesSpec{});
        case KernelId::SketchFeaturesTeam: return SpecConstants::of(SketchFeaturesTeamSpec{});
        case KernelId::SketchFeaturesCoopMat: return SpecConstants::of(SketchFeaturesCoopMatSpec{});
        case KernelId::BlockStates: return SpecConstants::of(BlockStatesSpec{});
        case KernelId::BlockStatesTeam: return SpecConstants::of(BlockStatesTeamSpec{});
        case KernelId::BlockStatesCoopMat: return SpecConstants::of(BlockStatesCoopMatSpec{});
        case KernelId::BlockScan: return SpecConstants::of(BlockScanSpec{});
        case KernelId::BlockReduce: return SpecConstants::of(BlockReduceSpec{});
        case KernelId::PolysketchOutput: return SpecConstants::of(PolysketchOutputSpec{});
        case KernelId::PolysketchOutputTeam: return SpecConstants::of(PolysketchOutputTeamSpec{});
        case KernelId::PolysketchOutputCoopMat: return SpecConstants::of(PolysketchOutputCoopMatSpec{});
        case KernelId::SelfTensor: return SpecConstants::of(NoSpec{});
        case KernelId::DecodeFold: return SpecConstants::of(DecodeFoldSpec{});
        case KernelId::DecodeOutput: return SpecConstants::of(DecodeOutputSpec{});
        case KernelId::DecodeSoftmaxPartial:
        case KernelId::DecodeSoftmaxCombine: return SpecConstants::of(DecodeSoftmaxSpec{});
        case KernelId::CopyRows:
        case KernelId::CopyRowsConvert: return SpecConstants::of(CopyRowsSpec{});
        case KernelId::CoopMatStrictCheck: return SpecConstants::of(CoopMatStrictCheckSpec{});
        default: return {};
    }
}

std::vector<std::string> tableVariants(KernelId id) {
    static const PskDataType types[] = {PSK_DATA_TYPE_FLOAT32, PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16};
    std::vector<std::string> out;
    std::vector<std::string> axes;
    for (size_t i = 0;; ++i) {
        const std::string a(psk::kernelAxis(id, i));
        if (a.empty()) break;
        axes.push_back(a);
    }
    if (axes.empty()) axes.push_back("");
    for (const std::string& a : axes)
        for (PskDataType t : types) {
            out.push_back(psk::kernelVariant(id, a, t));
            if (!psk::kernelPerStorageType(id)) break;
        }
    return out;
}

}  // namespace

TEST(KernelTable, RowsAreInIdOrderAndNameTheirInterface) {
    for (size_t i = 0; i < size_t(KernelId::Count); ++i) {
        const psk::KernelInfo& k = psk::kernelInfo(KernelId(i));
        EXPECT_EQ(size_t(k.id), i);
        EXPECT_NE(std::string(k.spec), "");
        EXPECT_NE(std::string(k.push), "");
    }
    EXPECT_EQ(psk::kernelVariant(KernelId::SketchFeatures, "learned", PSK_DATA_TYPE_FLOAT16), "sketch_features.learned.f16");
    EXPECT_EQ(psk::kernelVariant(KernelId::BlockScan, "", PSK_DATA_TYPE_BFLOAT16), "block_scan.f32");
    EXPECT_EQ(psk::kernelVariant(KernelId::PolysketchOutputTeam, "", PSK_DATA_TYPE_BFLOAT16), "polysketch_output_team.bf16");
}

TEST(KernelTable, EveryTableVariantIsBuiltAndEveryBuiltVariantIsInTheTable) {
    std::set<std::string> table;
    for (size_t i = 0; i < size_t(KernelId::Count); ++i) {
        const KernelId id = KernelId(i);
        for (const std::string& v : tableVariants(id)) {
            table.insert(v);
            // Hardware cooperative-matrix variants are built only where the compiler supports the
            // extension; the emulated ones always.
            if (psk::kernelInfo(id).impl != psk::KernelImpl::Cooperative || v.find(".emu_") != std::string::npos)
                EXPECT_NE(psk::findShader(v), nullptr) << v << " is in the kernel table but not built";
        }
    }
    for (size_t i = 0; i < psk::kShaderRegistrySize; ++i)
        EXPECT_TRUE(table.count(psk::kShaderRegistry[i].name)) << psk::kShaderRegistry[i].name << " is built but not in the kernel table";
}

TEST(KernelTable, SpecConstantsOfEveryBuiltVariantAreTheHostStructsFields) {
    size_t checked = 0;
    for (size_t i = 0; i < size_t(KernelId::Count); ++i) {
        const KernelId id = KernelId(i);
        const psk::kernel::SpecConstants host = hostDefaults(id);
        for (size_t k = 0; k < host.names.size(); ++k)
            EXPECT_NE(host.names[k], nullptr) << psk::kernelInfo(id).name << ": constant_ids are not 0..N-1";
        for (const std::string& v : tableVariants(id)) {
            const psk::ShaderCode* code = psk::findShader(v);
            if (!code) continue;
            // A constant the optimizer folded away has no SpecId left; every one that remains
            // must be a field of the host struct, with the same default.
            for (const auto& [cid, values] : specIdDefaults(*code)) {
                ASSERT_LT(cid, host.values.size()) << v << ": SpecId " << cid << " has no field in " << psk::kernelInfo(id).spec;
                EXPECT_TRUE(values.count(host.values[cid]))
                    << v << ": the shader's default of SpecId " << cid << " is not " << host.names[cid] << "'s " << host.values[cid];
                ++checked;
            }
        }
    }
    EXPECT_GT(checked, 100u);  // the check compared something
}

TEST(KernelTable, SpecConstantsAreSetByName) {
    psk::kernel::BlockStatesTeamSpec spec;
    spec.Z_STRIDE = 72;
    spec.C4 = 3;
    const psk::kernel::SpecConstants c = psk::kernel::SpecConstants::of(spec);
    ASSERT_EQ(c.values.size(), 4u);
    EXPECT_EQ(c.values[2], 72u);
    EXPECT_EQ(c.values[3], 3u);
    EXPECT_EQ(c.values[0], 32u);  // the shader's default, SKETCH = 32
    EXPECT_EQ(c.describe(), "SKETCH=32 VALUE_DIM=64 Z_STRIDE=72 C4=3");
}

// The cooperative variants are named from typed parts declared once (shaders/interface/coop_backends.h),
// and every variant the declaration lists for a backend this build has exists.
TEST(KernelTable, CooperativeVariantsAreDeclaredOnceAndComplete) {
    using psk::CoopBackend;
    using psk::CoopOperand;
    EXPECT_EQ(psk::coopVariantName(KernelId::SketchFeaturesCoopMat, {CoopBackend::KHR, CoopOperand::F16}, "random", PSK_DATA_TYPE_FLOAT16),
              "sketch_features_coopmat.khr_f16_random.f16");
    EXPECT_EQ(psk::coopVariantName(KernelId::BlockStatesCoopMat, {CoopBackend::Emulated, CoopOperand::BF16}, "", PSK_DATA_TYPE_FLOAT32),
              "block_states_coopmat.emu_bf16.f32");
    EXPECT_EQ(psk::coopAxis({CoopBackend::NV, CoopOperand::F16}), "nv_f16");
    EXPECT_THROW(psk::coopAxis({CoopBackend::NV, CoopOperand::BF16}), psk::Error);  // NV takes float16 operands only
    EXPECT_THROW(psk::coopVariantName(KernelId::BlockScan, {CoopBackend::KHR, CoopOperand::F16}, "", PSK_DATA_TYPE_FLOAT32), psk::Error);
    EXPECT_NO_THROW(psk::checkCoopVariantsComplete());
    EXPECT_TRUE(psk::coopBackendBuilt({CoopBackend::Emulated, CoopOperand::F16}));
    EXPECT_TRUE(psk::coopBackendBuilt({CoopBackend::Emulated, CoopOperand::BF16}));
    // The kernel table's axes of a cooperative kernel are the declaration's backends x sub-variants.
    EXPECT_EQ(psk::kernelAxis(KernelId::AttentionTiledCoopMat, 0), "nv_f16_softmax");
    EXPECT_EQ(psk::kernelAxis(KernelId::BlockStatesCoopMat, 4), "emu_bf16");
    EXPECT_EQ(psk::kernelAxis(KernelId::BlockStatesCoopMat, 5), "");
    EXPECT_NE(psk::findCoopVariant(KernelId::PolysketchOutputCoopMat, {CoopBackend::Emulated, CoopOperand::F16}, "", PSK_DATA_TYPE_FLOAT16),
              nullptr);
}
