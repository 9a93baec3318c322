// Every SPIR-V module built into the library passes spirv-val, and the registry finds each name.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "kernels/shader_registry.hpp"
#include "vk/pipelines.hpp"

namespace {

/**
 * The spirv-val command for a module. Every variant targets Vulkan 1.1 (SPIR-V 1.3) and is
 * validated as such; the KHR cooperative-matrix variants need a spirv-val that knows
 * SPV_KHR_cooperative_matrix (SPIRV-Tools 2023.4 or later; Debian 12's 2022.4 rejects them with
 * "Invalid capability operand: 6022"): the one next to the glslangValidator that built them
 * (PSK_SPIRV_VAL_KHR, set by cmake/Shaders.cmake), or $PSK_SPIRV_VAL_KHR, else the one on PATH.
 */
std::string validator(const std::string& name) {
    if (name.find(".khr_") != std::string::npos) {
        if (const char* env = std::getenv("PSK_SPIRV_VAL_KHR"); env && *env) return env;
#ifdef PSK_SPIRV_VAL_KHR
        return PSK_SPIRV_VAL_KHR;
#endif
    }
    return "spirv-val";
}

}  // namespace

TEST(ShaderRegistry, EveryVariantIsValidSpirv) {
    ASSERT_GT(psk::kShaderRegistrySize, 0u);
    if (std::system("spirv-val --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "spirv-val not installed";
    size_t khr = 0;
    for (size_t i = 0; i < psk::kShaderRegistrySize; ++i) {
        const psk::ShaderCode& s = psk::kShaderRegistry[i];
        EXPECT_EQ(psk::findShader(s.name), &s);
        EXPECT_EQ(s.code[0], 0x07230203u) << s.name << ": not SPIR-V";
        const std::string path = ::testing::TempDir() + "psk_" + s.name + ".spv";
        {
            std::ofstream out(path, std::ios::binary);
            out.write(reinterpret_cast<const char*>(s.code), static_cast<std::streamsize>(s.bytes));
        }
        const std::string val = validator(s.name);
        const std::string cmd = val + " --target-env vulkan1.1 '" + path + "'";
        EXPECT_EQ(std::system(cmd.c_str()), 0) << s.name << ": " << cmd;
        if (std::string(s.name).find(".khr_") != std::string::npos) {
            ++khr;
            std::printf("validated %s with %s\n", s.name, val.c_str());
        }
        std::remove(path.c_str());
    }
    std::printf("%zu modules validated, %zu of them KHR cooperative-matrix variants\n", psk::kShaderRegistrySize, khr);
    EXPECT_EQ(psk::findShader("no.such.variant"), nullptr);
}

namespace {

/** Names of a module's function-scope variables of array type (OpVariable, storage class Function). */
std::vector<uint32_t> functionArrays(const psk::ShaderCode& s) {
    const uint32_t* w = s.code;
    const size_t words = s.bytes / 4;
    std::set<uint32_t> arrays, pointers;
    std::vector<uint32_t> found;
    for (size_t i = 5; i < words;) {
        const uint32_t count = w[i] >> 16, op = w[i] & 0xFFFFu;
        if (count == 0 || i + count > words) break;
        if (op == 28 || op == 29) arrays.insert(w[i + 1]);                                          // OpTypeArray, OpTypeRuntimeArray
        if (op == 32 && w[i + 2] == 7 && arrays.count(w[i + 3])) pointers.insert(w[i + 1]);        // OpTypePointer Function
        if (op == 59 && w[i + 3] == 7 && pointers.count(w[i + 1])) found.push_back(w[i + 2]);      // OpVariable Function
        i += count;
    }
    return found;
}

}  // namespace

// The register-tiled generic output (polysketch_output.comp) keeps its tiles in registers: every
// loop that indexes its arrays is an innermost loop over a literal count, which the build's
// optimizer unrolls, so no function-scope array is left for a driver to put in local memory (an
// H200 did, 272 bytes at h = 128, with the loops over specialization constants; the same kernel
// frozen to literals ran 0.26x the time: docs/PERFORMANCE.md, fourth run).
TEST(ShaderRegistry, TheTiledOutputsRegisterTilesAreNoArrays) {
    size_t checked = 0;
    for (size_t i = 0; i < psk::kShaderRegistrySize; ++i) {
        const psk::ShaderCode& s = psk::kShaderRegistry[i];
        if (std::string(s.name).rfind("polysketch_output.", 0) != 0) continue;  // not _rows, _team, _coopmat
        ++checked;
        EXPECT_TRUE(functionArrays(s).empty()) << s.name << ": " << functionArrays(s).size() << " function-scope arrays left";
    }
    EXPECT_EQ(checked, 3u);  // f32, f16, bf16
    // The check itself finds arrays: the row output's modules keep some.
    const psk::ShaderCode* rows = psk::findShader("polysketch_output_rows.f32");
    ASSERT_NE(rows, nullptr);
    EXPECT_FALSE(functionArrays(*rows).empty()) << "the check finds no array anywhere: it would prove nothing";
}

// Pipelines reads a module's workgroup size (for VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_
// SUBGROUPS_BIT when it pins a subgroup size): every module has one, and a local_size_x_id
// specialization constant moves it.
TEST(ShaderRegistry, WorkgroupSizeOfEveryVariant) {
    for (size_t i = 0; i < psk::kShaderRegistrySize; ++i) {
        const psk::ShaderCode& s = psk::kShaderRegistry[i];
        const psk::WorkgroupSize size = psk::shaderWorkgroupSize(s, {});
        EXPECT_GT(size.invocations(), 0u) << s.name;
    }
    // block_scan.comp: layout(local_size_x_id = 0) in; with WORKGROUP (constant_id 0).
    const psk::ShaderCode* scan = psk::findShader("block_scan.f32");
    ASSERT_NE(scan, nullptr);
    for (uint32_t threads : {32u, 64u, 256u}) {
        const psk::WorkgroupSize size = psk::shaderWorkgroupSize(*scan, {threads});
        EXPECT_EQ(size.x, threads);
        EXPECT_EQ(size.y, 1u);
        EXPECT_EQ(size.z, 1u);
    }
    psk::ShaderCode garbage{"garbage", scan->code + 1, scan->bytes - 4};
    EXPECT_EQ(psk::shaderWorkgroupSize(garbage, {}).invocations(), 0u);
}
