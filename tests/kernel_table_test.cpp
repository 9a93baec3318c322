// The kernel table (lib/kernels/kernel_table.hpp) and the kernel interface
// (shaders/interface/*.h, lib/kernels/kernel_interface.hpp) against the SPIR-V this build embeds:
// every variant the table names is built, every built variant belongs to a table row, and in
// every variant each specialization constant (SpecId) has the default of the host struct's field
// of that constant_id, so the host sets the constants the shader declares; every buffer binding a
// variant declares is in its kernel's binding list, readonly where the list says read and
// writable where it says write, so the accesses the host tracks are the shader's.
#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <set>
#include <type_traits>
#include <string>
#include <vector>

#include "kernels/coop_variants.hpp"
#include "kernels/kernel_dispatch.hpp"
#include "kernels/kernel_table.hpp"
#include "util/error.hpp"
#include "kernels/shader_registry.hpp"
#include "vk/emulated_products.hpp"

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

/** One storage-buffer variable of a SPIR-V module: its binding and whether it is readonly (NonWritable). */
struct BufferBinding {
    uint32_t binding;
    bool readonly;
};

std::vector<BufferBinding> bufferBindings(const psk::ShaderCode& code) {
    const uint32_t* w = code.code;
    const size_t words = code.bytes / 4;
    std::map<uint32_t, uint32_t> binding;      // variable id -> Binding
    std::set<uint32_t> nonWritable;            // ids (variables, or structs with a NonWritable member)
    std::map<uint32_t, uint32_t> pointee;      // pointer type id -> pointee type id
    std::map<uint32_t, uint32_t> variableType; // variable id -> pointer type id
    for (size_t i = 5; i < words;) {
        const uint32_t count = w[i] >> 16, op = w[i] & 0xFFFFu;
        if (count == 0) break;
        if (op == 71 /* OpDecorate */ && w[i + 2] == 33 /* Binding */) binding[w[i + 1]] = w[i + 3];
        if (op == 71 /* OpDecorate */ && w[i + 2] == 24 /* NonWritable */) nonWritable.insert(w[i + 1]);
        if (op == 72 /* OpMemberDecorate */ && w[i + 3] == 24 /* NonWritable */) nonWritable.insert(w[i + 1]);
        if (op == 32 /* OpTypePointer */) pointee[w[i + 1]] = w[i + 3];
        if (op == 59 /* OpVariable */) variableType[w[i + 2]] = w[i + 1];
        i += count;
    }
    std::vector<BufferBinding> out;
    for (const auto& [var, b] : binding) {
        const uint32_t block = pointee[variableType[var]];
        out.push_back({b, nonWritable.count(var) > 0 || nonWritable.count(block) > 0});
    }
    return out;
}

/** The binding list of a kernel with an interface row (PSK_KERNEL_INTERFACES): names and accesses; empty otherwise. */
struct BindingList {
    std::vector<const char*> names;
    std::vector<psk::kernel::BindingAccess> access;
};
BindingList bindingList(KernelId id) {
    BindingList list;
    switch (id) {
#define PSK_TEST_BINDING_LIST(Id, SpecT, PushT, BindingsT)              \
    case KernelId::Id:                                                  \
        list.names.assign(std::begin(psk::kernel::BindingsT::kNames), std::end(psk::kernel::BindingsT::kNames));  \
        list.access.assign(std::begin(psk::kernel::BindingsT::kAccess), std::end(psk::kernel::BindingsT::kAccess)); \
        break;
        PSK_KERNEL_INTERFACES(PSK_TEST_BINDING_LIST)
#undef PSK_TEST_BINDING_LIST
        default:
            break;
    }
    return list;
}

/** The host struct of a kernel, default-constructed (the shader's defaults), by constant_id. */
psk::kernel::SpecConstants hostDefaults(KernelId id) {
    using namespace psk::kernel;
    switch (id) {
        case KernelId::AttentionTiled: return SpecConstants::of(AttentionTiledSpec{});
        case KernelId::AttentionTiledCoopMat: return SpecConstants::of(AttentionTiledCoopMatSpec{});
        case KernelId::AttentionFlashCoopMat: return SpecConstants::of(AttentionFlashCoopMatSpec{});
        case KernelId::AttentionFlashFp32: return SpecConstants::of(AttentionFlashFp32Spec{});
        case KernelId::AttentionCombine: return SpecConstants::of(AttentionCombineSpec{});
        case KernelId::SketchFeatures: return SpecConstants::of(SketchFeaturesSpec{});
        case KernelId::SketchFeaturesTeam: return SpecConstants::of(SketchFeaturesTeamSpec{});
        case KernelId::SketchFeaturesCoopMat: return SpecConstants::of(SketchFeaturesCoopMatSpec{});
        case KernelId::BlockStates: return SpecConstants::of(BlockStatesSpec{});
        case KernelId::BlockStatesTeam: return SpecConstants::of(BlockStatesTeamSpec{});
        case KernelId::BlockStatesCoopMat: return SpecConstants::of(BlockStatesCoopMatSpec{});
        case KernelId::BlockScan: return SpecConstants::of(BlockScanSpec{});
        case KernelId::BlockReduce: return SpecConstants::of(BlockReduceSpec{});
        case KernelId::ZOperands: return SpecConstants::of(ZOperandsSpec{});
        case KernelId::PolysketchOutput: return SpecConstants::of(PolysketchOutputSpec{});
        case KernelId::PolysketchOutputRows: return SpecConstants::of(PolysketchOutputRowsSpec{});
        case KernelId::PolysketchOutputTeam: return SpecConstants::of(PolysketchOutputTeamSpec{});
        case KernelId::PolysketchOutputCoopMat: return SpecConstants::of(PolysketchOutputCoopMatSpec{});
        case KernelId::SelfTensor: return SpecConstants::of(NoSpec{});
        case KernelId::DecodeOutput: return SpecConstants::of(DecodeOutputSpec{});
        case KernelId::DecodeSoftmax: return SpecConstants::of(DecodeSoftmaxSpec{});
        case KernelId::CopyRows:
        case KernelId::CopyRowsConvert: return SpecConstants::of(CopyRowsSpec{});
        case KernelId::CoopMatStrictCheck: return SpecConstants::of(CoopMatStrictCheckSpec{});
        case KernelId::MicroBarrier: return SpecConstants::of(MicroBarrierSpec{});
        case KernelId::MicroChase: return SpecConstants::of(NoSpec{});
        case KernelId::MicroSharedStore: return SpecConstants::of(MicroSharedStoreSpec{});
        case KernelId::MicroCoopMat: return SpecConstants::of(MicroCoopMatSpec{});
        case KernelId::MicroInflight: return SpecConstants::of(MicroInflightSpec{});
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
    size_t checked = 0, emulatedProducts = 0;
    for (size_t i = 0; i < size_t(KernelId::Count); ++i) {
        const KernelId id = KernelId(i);
        const psk::kernel::SpecConstants host = hostDefaults(id);
        for (size_t k = 0; k < host.names.size(); ++k)
            EXPECT_NE(host.names[k], nullptr) << psk::kernelInfo(id).name << ": constant_ids are not 0..N-1";
        for (const std::string& v : tableVariants(id)) {
            const psk::ShaderCode* code = psk::findShader(v);
            if (!code) continue;
            // A constant the optimizer folded away has no SpecId left; every one that remains
            // must be a field of the host struct, with the same default, but the emulated
            // backend's own (interface/emulated_products.h), which vk/pipelines.cpp sets on the
            // emulated variants whatever the kernel.
            for (const auto& [cid, values] : specIdDefaults(*code)) {
                if (cid == PSK_EMULATED_PRODUCTS_ID && psk::isEmulatedVariant(v.c_str())) {
                    EXPECT_TRUE(values.count(PSK_EMULATED_PRODUCTS_IEEE)) << v << ": the emulated products' default is not ieee";
                    ++emulatedProducts;
                    continue;
                }
                ASSERT_LT(cid, host.values.size()) << v << ": SpecId " << cid << " has no field in " << psk::kernelInfo(id).spec;
                EXPECT_TRUE(values.count(host.values[cid]))
                    << v << ": the shader's default of SpecId " << cid << " is not " << host.names[cid] << "'s " << host.values[cid];
                ++checked;
            }
        }
    }
    EXPECT_GT(checked, 100u);  // the check compared something
    EXPECT_GT(emulatedProducts, 10u);  // the emulated variants carry the products' constant
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

// The interface rows (PSK_KERNEL_INTERFACES) and the kernel table name the same structs.
TEST(KernelTable, InterfaceRowsNameTheTablesStructs) {
    size_t rows = 0;
    for (size_t i = 0; i < size_t(KernelId::Count); ++i) {
        const psk::KernelInterfaceNames names = psk::kernelInterfaceNames(KernelId(i));
        if (!names.spec) continue;
        ++rows;
        EXPECT_EQ(std::string(names.spec), psk::kernelInfo(KernelId(i)).spec) << psk::kernelInfo(KernelId(i)).name;
        EXPECT_EQ(std::string(names.push), psk::kernelInfo(KernelId(i)).push) << psk::kernelInfo(KernelId(i)).name;
    }
    EXPECT_GE(rows, 16u);  // every forward kernel and the row copies
}

// Every buffer a built variant declares is a binding of its kernel's list, with the list's access:
// readonly for read, writable for write (read_write: either; a variant may leave a binding out).
TEST(KernelTable, BindingsOfEveryBuiltVariantAreItsBindingList) {
    size_t checked = 0;
    for (size_t i = 0; i < size_t(KernelId::Count); ++i) {
        const KernelId id = KernelId(i);
        const BindingList list = bindingList(id);
        if (list.names.empty()) continue;
        for (const std::string& v : tableVariants(id)) {
            const psk::ShaderCode* code = psk::findShader(v);
            if (!code) continue;
            for (const BufferBinding& b : bufferBindings(*code)) {
                ASSERT_LT(b.binding, list.names.size()) << v << ": binding " << b.binding << " is not in "
                                                        << psk::kernelInterfaceNames(id).bindings;
                const psk::kernel::BindingAccess a = list.access[b.binding];
                if (a == psk::kernel::BindingAccess::read)
                    EXPECT_TRUE(b.readonly) << v << ": " << list.names[b.binding] << " is declared read but the shader may write it";
                if (a == psk::kernel::BindingAccess::write)
                    EXPECT_FALSE(b.readonly) << v << ": " << list.names[b.binding] << " is declared write but the shader's is readonly";
                ++checked;
            }
        }
    }
    EXPECT_GT(checked, 300u);  // the check compared something
}

// A bindings struct gives the recorder one access per binding, in binding order, with the list's
// access (a stand-in marked unwritten is a read); a binding left unset is an error that names it.
TEST(KernelTable, BindingsStructsGiveTheDeclaredAccesses) {
    using namespace psk::kernel;
    static_assert(BlockScanBindings::kCount == 4 && BlockReduceBindings::kCount == 1, "block_scan.h's lists");
    static_assert(std::is_same<PolysketchOutputBindings::Push, PolysketchOutputPush>::value, "tied to its push block");
    static_assert(std::is_same<psk::KernelInterface<KernelId::BlockStatesCoopMat>::Bindings, BlockStatesBindings>::value,
                  "a variant shares its kernel's bindings");
    auto range = [](uintptr_t handle) {
        psk::BufferRange r;
        r.buffer = reinterpret_cast<VkBuffer>(handle);
        return r;
    };
    BlockScanBindings b;
    b.STATES = range(1);
    b.INIT_Z = range(2);
    b.INIT_H = range(3);
    b.TAIL = unwritten(range(4));
    psk::Access a[BlockScanBindings::kCount];
    psk::bindingAccesses(b, KernelId::BlockScan, a);
    EXPECT_EQ(a[0].range.buffer, range(1).buffer);
    EXPECT_TRUE(a[0].write);   // read_write
    EXPECT_FALSE(a[1].write);  // read
    EXPECT_FALSE(a[2].write);
    EXPECT_EQ(a[3].range.buffer, range(4).buffer);
    EXPECT_FALSE(a[3].write);  // write, but unwritten in this call
    b.TAIL = range(4);
    psk::bindingAccesses(b, KernelId::BlockScan, a);
    EXPECT_TRUE(a[3].write);
    b.INIT_H = psk::BufferRange{};
    try {
        psk::bindingAccesses(b, KernelId::BlockScan, a);
        ADD_FAILURE() << "an unset binding was accepted";
    } catch (const psk::Error& e) {
        EXPECT_NE(std::string(e.what()).find("INIT_H"), std::string::npos) << e.what();
    }
}
