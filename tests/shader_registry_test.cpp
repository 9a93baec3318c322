// Every SPIR-V module built into the library passes spirv-val, and the registry finds each name.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "kernels/shader_registry.hpp"

TEST(ShaderRegistry, EveryVariantIsValidSpirv) {
    ASSERT_GT(psk::kShaderRegistrySize, 0u);
    if (std::system("spirv-val --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "spirv-val not installed";
    for (size_t i = 0; i < psk::kShaderRegistrySize; ++i) {
        const psk::ShaderCode& s = psk::kShaderRegistry[i];
        EXPECT_EQ(psk::findShader(s.name), &s);
        EXPECT_EQ(s.code[0], 0x07230203u) << s.name << ": not SPIR-V";
        const std::string path = ::testing::TempDir() + "psk_" + s.name + ".spv";
        {
            std::ofstream out(path, std::ios::binary);
            out.write(reinterpret_cast<const char*>(s.code), static_cast<std::streamsize>(s.bytes));
        }
        const std::string cmd = "spirv-val --target-env vulkan1.1 '" + path + "'";
        EXPECT_EQ(std::system(cmd.c_str()), 0) << s.name;
        std::remove(path.c_str());
    }
    EXPECT_EQ(psk::findShader("no.such.variant"), nullptr);
}
