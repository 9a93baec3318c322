// Shader replacement (lib/vk/shader_replacement.hpp), the diagnostic that lets a GPU run time a
// kernel compiled another way without rebuilding the library: PSK_SHADER_DUMP writes every
// specialization a context compiles (the variant's module and its constants), PSK_SHADER_REPLACE
// reads a module per specialization in place of the built-in one. Checked on a generic float32
// polysketch forward (the kernels a GPU runs):
//   - the dump holds each planned variant's built-in module byte for byte and its constants;
//   - the built-in modules given back as replacements give the same output, bit for bit, and the
//     plan says each kernel was replaced;
//   - a replacement is what runs: the output kernel replaced by an empty shader leaves the output
//     unwritten; a variant-wide file (<variant>.spv) replaces every specialization of the variant,
//     and a specialization's own file wins over it;
//   - a replacement that is not SPIR-V fails with PSK_ERROR_BAD_FILE naming the file, and a
//     variable that names no directory fails pskCreateContext with PSK_ERROR_INVALID_ARGUMENT.
// tools/freeze_shaders.py's frozen modules are checked by the shader_replacement_frozen CTest.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/shader_registry.hpp"
#include "support/host_arrays.hpp"
#include "support/scoped_env.hpp"
#include "support/test_context.hpp"

namespace {

namespace fs = std::filesystem;
using psk::test::ScopedEnv;

constexpr uint32_t kN = 70, kHeads = 2, kHeadDim = 16, kValueDim = 24;

/** A fresh directory under the system's temporary one, removed with the object. */
struct TempDir {
    fs::path path;
    explicit TempDir(const char* tag) {
        path = fs::temp_directory_path() / ("psk_shader_replacement_" + std::string(tag) + "_" + std::to_string(std::random_device{}()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(path, ignored);
    }
    std::string str() const { return path.string(); }
};

std::vector<char> readBytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void writeBytes(const fs::path& p, const void* data, size_t bytes) {
    std::ofstream f(p, std::ios::binary);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

struct ForwardRun {
    PskResult context = PSK_ERROR_VULKAN, attention = PSK_ERROR_VULKAN, forward = PSK_ERROR_VULKAN;
    std::vector<float> out;
    std::string plan;
    std::vector<std::string> errors, validation;
};

/**
 * A context of its own (the variables are read at its creation), a causal polysketch attention in
 * float32 storage on the generic kernels, and one forward of seeded inputs; the output starts as
 * NaN, so that rows no kernel wrote stay NaN.
 */
ForwardRun runForward() {
    ForwardRun r;
    psk::test::MessageLog log;
    PskContextCreateInfo ci{};
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    ci.flags = require && std::strcmp(require, "1") == 0 ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    ci.messageCallback = &psk::test::MessageLog::callback;
    ci.messageUserData = &log;
    PskContext ctx = nullptr;
    r.context = pskCreateContext(&ci, &ctx);
    if (ctx) {
        PskAttentionCreateInfo info{};
        info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
        info.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
        info.degree = 4;
        info.numQueryHeads = kHeads;
        info.numKeyValueHeads = kHeads;
        info.headDim = kHeadDim;
        info.valueDim = kValueDim;
        info.scale = 1.0f / std::sqrt(float(kHeadDim));
        info.dataType = PSK_DATA_TYPE_FLOAT32;
        info.sketchSize = 16;
        info.blockSize = 32;
        info.seed = 20261127;
        PskAttention attn = nullptr;
        r.attention = pskCreateAttention(ctx, &info, &attn);
        if (attn) {
            std::mt19937 rng(7);
            std::normal_distribution<float> dist(0.0f, 1.0f);
            std::vector<float> q(size_t(kHeads) * kN * kHeadDim), k(q.size()), v(size_t(kHeads) * kN * kValueDim);
            for (float* a : {q.data(), k.data()})
                for (size_t i = 0; i < q.size(); ++i) a[i] = dist(rng);
            for (float& x : v) x = dist(rng);
            r.out.assign(v.size(), std::nanf(""));
            PskForwardHostInfo fw{};
            fw.seqLen = kN;
            psk::test::setHostArrays(fw, q, k, v, &r.out);
            r.forward = pskAttentionForwardHost(attn, &fw);
            size_t size = 0;
            if (pskGetAttentionPlan(attn, nullptr, &size) == PSK_SUCCESS) {
                std::string text(size, '\0');
                if (pskGetAttentionPlan(attn, text.data(), &size) == PSK_SUCCESS) r.plan = text.c_str();
            }
            pskDestroyAttention(attn);
        }
        pskDestroyContext(ctx);
    }
    std::lock_guard<std::mutex> lock(log.mutex);
    r.errors = log.errors;
    r.validation = log.validation;
    return r;
}

/** runForward with `variable` set to `dir` for the context's creation. */
ForwardRun runForwardWith(const char* variable, const fs::path& dir) {
    ScopedEnv env(variable, dir.string().c_str());
    return runForward();
}

/** The plan's kernel lines' variants ("<variant> (generic) ..."), in order, without repeats. */
std::vector<std::string> plannedVariants(const std::string& plan) {
    std::vector<std::string> out;
    size_t begin = 0;
    while (begin < plan.size()) {
        size_t end = plan.find('\n', begin);
        if (end == std::string::npos) end = plan.size();
        const std::string line = plan.substr(begin, end - begin);
        if (!line.empty() && line[0] != '#') {
            const std::string variant = line.substr(0, line.find(' '));
            bool seen = false;
            for (const std::string& v : out) seen = seen || v == variant;
            if (!seen) out.push_back(variant);
        }
        begin = end + 1;
    }
    return out;
}

/** The dumped specializations' stems ("<variant>@<values>"). */
std::vector<std::string> dumpedStems(const fs::path& dir) {
    std::vector<std::string> stems;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".spec") stems.push_back(e.path().stem().string());
    return stems;
}

/** The dumped stem of the output kernel (the one "polysketch_output..." specialization), or "". */
std::string outputStemOf(const fs::path& dump) {
    std::string stem;
    for (const std::string& s : dumpedStems(dump))
        if (s.rfind("polysketch_output", 0) == 0) stem = s;
    return stem;
}

class ShaderReplacement : public ::testing::Test {
protected:
    // The generic kernels, as a GPU without cooperative matrices runs them; no tuning table.
    ScopedEnv team_{"PSK_DISABLE_TEAM_KERNELS", "1"};
    ScopedEnv table_{"PSK_TUNING_TABLE", "none"};
    ScopedEnv dump_{"PSK_SHADER_DUMP", nullptr};
    ScopedEnv replace_{"PSK_SHADER_REPLACE", nullptr};

    static void expectClean(const ForwardRun& r) {
        for (const std::string& m : r.validation) ADD_FAILURE() << "validation message: " << m;
        for (const std::string& m : r.errors) ADD_FAILURE() << "error message: " << m;
    }
};

TEST_F(ShaderReplacement, DumpHoldsEachPlannedVariantAndItsConstants) {
    TempDir dump("dump");
    const ForwardRun r = runForwardWith("PSK_SHADER_DUMP", dump.path);
    ASSERT_EQ(r.forward, PSK_SUCCESS);
    expectClean(r);
    const std::vector<std::string> variants = plannedVariants(r.plan);
    ASSERT_GE(variants.size(), 3u) << r.plan;
    for (const std::string& variant : variants) {
        const psk::ShaderCode* code = psk::findShader(variant);
        ASSERT_NE(code, nullptr) << variant;
        const std::vector<char> bytes = readBytes(dump.path / (variant + ".spv"));
        ASSERT_EQ(bytes.size(), code->bytes) << variant;
        EXPECT_EQ(std::memcmp(bytes.data(), code->code, code->bytes), 0) << variant;
    }
    // Each specialization: "<variant>@v0_v1_..." and a .spec of "0:v0 1:v1 ..." with the same values.
    const std::vector<std::string> stems = dumpedStems(dump.path);
    ASSERT_GE(stems.size(), variants.size());
    for (const std::string& stem : stems) {
        const size_t at = stem.find('@');
        ASSERT_NE(at, std::string::npos) << stem;
        EXPECT_TRUE(fs::exists(dump.path / (stem.substr(0, at) + ".spv"))) << stem;
        const std::vector<char> spec = readBytes(dump.path / (stem + ".spec"));
        std::string expected, values = stem.substr(at + 1);
        size_t id = 0, pos = 0;
        while (pos <= values.size()) {
            const size_t end = std::min(values.find('_', pos), values.size());
            expected += (id ? " " : "") + std::to_string(id) + ":" + values.substr(pos, end - pos);
            ++id;
            pos = end + 1;
        }
        EXPECT_EQ(std::string(spec.begin(), spec.end()), expected + "\n") << stem;
    }
}

TEST_F(ShaderReplacement, TheBuiltInModulesAsReplacementsGiveTheSameOutput) {
    TempDir dump("dump"), replace("replace");
    const ForwardRun before = runForwardWith("PSK_SHADER_DUMP", dump.path);
    ASSERT_EQ(before.forward, PSK_SUCCESS);
    const std::vector<std::string> stems = dumpedStems(dump.path);
    for (const std::string& stem : stems)
        fs::copy_file(dump.path / (stem.substr(0, stem.find('@')) + ".spv"), replace.path / (stem + ".spv"));
    const ForwardRun after = runForwardWith("PSK_SHADER_REPLACE", replace.path);
    ASSERT_EQ(after.forward, PSK_SUCCESS);
    expectClean(after);
    ASSERT_EQ(after.out.size(), before.out.size());
    EXPECT_EQ(std::memcmp(after.out.data(), before.out.data(), after.out.size() * sizeof(float)), 0);
    for (const std::string& variant : plannedVariants(after.plan))
        EXPECT_NE(after.plan.find("# stats: " + variant + " SPIR-V replaced by " + replace.str() + "/" + variant + "@"), std::string::npos)
            << variant << " not replaced:\n"
            << after.plan;
}

// An empty compute shader (SPIR-V 1.0: OpCapability Shader, OpMemoryModel Logical GLSL450, an entry
// point "main" with LocalSize 1 1 1 that returns at once).
const uint32_t kEmptyShader[] = {0x07230203u, 0x00010000u, 0u,          5u,          0u,          0x00020011u, 1u,
                                 0x0003000Eu, 0u,          1u,          0x0005000Fu, 5u,          1u,          0x6E69616Du,
                                 0u,          0x00060010u, 1u,          17u,         1u,          1u,          1u,
                                 0x00020013u, 2u,          0x00030021u, 3u,          2u,          0x00050036u, 2u,
                                 1u,          0u,          3u,          0x000200F8u, 4u,          0x000100FDu, 0x00010038u};

TEST_F(ShaderReplacement, AReplacementIsWhatRuns) {
    TempDir dump("dump"), replace("replace");
    const ForwardRun before = runForwardWith("PSK_SHADER_DUMP", dump.path);
    ASSERT_EQ(before.forward, PSK_SUCCESS);
    for (float x : before.out) ASSERT_TRUE(std::isfinite(x));
    const std::string outputStem = outputStemOf(dump.path);
    ASSERT_FALSE(outputStem.empty()) << before.plan;
    writeBytes(replace.path / (outputStem + ".spv"), kEmptyShader, sizeof(kEmptyShader));
    const ForwardRun after = runForwardWith("PSK_SHADER_REPLACE", replace.path);
    ASSERT_EQ(after.forward, PSK_SUCCESS);
    expectClean(after);
    // The output kernel wrote nothing: not one value of the output is the one it computes.
    size_t same = 0;
    for (size_t i = 0; i < after.out.size(); ++i) same += after.out[i] == before.out[i];
    EXPECT_EQ(same, 0u);
    EXPECT_NE(after.plan.find("SPIR-V replaced by " + (replace.path / (outputStem + ".spv")).string()), std::string::npos) << after.plan;
}

TEST_F(ShaderReplacement, AVariantWideFileReplacesEverySpecializationButAStemsOwnFileWins) {
    TempDir dump("dump");
    const ForwardRun before = runForwardWith("PSK_SHADER_DUMP", dump.path);
    ASSERT_EQ(before.forward, PSK_SUCCESS);
    const std::string outputStem = outputStemOf(dump.path);
    ASSERT_FALSE(outputStem.empty()) << before.plan;
    const std::string variant = outputStem.substr(0, outputStem.find('@'));
    for (bool stemFileToo : {false, true}) {
        TempDir replace("variant");
        // <variant>.spv: the empty shader, for every specialization of the output kernel.
        writeBytes(replace.path / (variant + ".spv"), kEmptyShader, sizeof(kEmptyShader));
        // <stem>.spv: the built-in module for the one specialization the forward runs.
        if (stemFileToo) fs::copy_file(dump.path / (variant + ".spv"), replace.path / (outputStem + ".spv"));
        const ForwardRun after = runForwardWith("PSK_SHADER_REPLACE", replace.path);
        ASSERT_EQ(after.forward, PSK_SUCCESS);
        expectClean(after);
        size_t same = 0;
        for (size_t i = 0; i < after.out.size(); ++i) same += after.out[i] == before.out[i];
        const std::string file = (replace.path / (stemFileToo ? outputStem + ".spv" : variant + ".spv")).string();
        if (stemFileToo) {
            EXPECT_EQ(same, after.out.size()) << "the stem's own file must win over the variant-wide one";
        } else {
            EXPECT_EQ(same, 0u) << "the variant-wide file was not used";
        }
        EXPECT_NE(after.plan.find("# stats: " + variant + " SPIR-V replaced by " + file), std::string::npos) << after.plan;
    }
}

TEST_F(ShaderReplacement, AFileThatIsNotSpirvFailsNamingIt) {
    TempDir dump("dump");
    ASSERT_EQ(runForwardWith("PSK_SHADER_DUMP", dump.path).forward, PSK_SUCCESS);
    const std::vector<std::string> stems = dumpedStems(dump.path);
    ASSERT_FALSE(stems.empty());
    const uint32_t notSpirv[8] = {0x12345678u, 1, 2, 3, 4, 5, 6, 7};
    const char sevenBytes[7] = {3, 2, 0x23, 7, 0, 0, 1};
    for (int which = 0; which < 3; ++which) {
        TempDir replace("bad");
        const fs::path file = replace.path / (stems[0] + ".spv");
        if (which == 0) writeBytes(file, notSpirv, sizeof(notSpirv));
        if (which == 1) writeBytes(file, sevenBytes, sizeof(sevenBytes));
        if (which == 2) writeBytes(file, kEmptyShader, 8);  // a magic number and nothing else
        ScopedEnv env("PSK_SHADER_REPLACE", replace.str().c_str());
        const ForwardRun r = runForward();
        ASSERT_EQ(r.context, PSK_SUCCESS);
        // Pipelines are made when the attention is created or at its first forward: one of them fails.
        const PskResult failed = r.attention != PSK_SUCCESS ? r.attention : r.forward;
        EXPECT_EQ(failed, PSK_ERROR_BAD_FILE) << "case " << which;
        bool named = false;
        for (const std::string& m : r.errors) named = named || m.find(file.string()) != std::string::npos;
        EXPECT_TRUE(named) << "case " << which << ": no error message names " << file;
        for (const std::string& m : r.validation) ADD_FAILURE() << "validation message: " << m;
    }
}

TEST_F(ShaderReplacement, AVariableThatNamesNoDirectoryFailsTheContext) {
    TempDir dir("file");
    const fs::path file = dir.path / "plain_file";
    writeBytes(file, "x", 1);
    for (const char* variable : {"PSK_SHADER_DUMP", "PSK_SHADER_REPLACE"}) {
        for (const std::string& value : {(dir.path / "missing").string(), file.string()}) {
            ScopedEnv env(variable, value.c_str());
            const ForwardRun r = runForward();
            EXPECT_EQ(r.context, PSK_ERROR_INVALID_ARGUMENT) << variable << "=" << value;
            bool named = false;
            for (const std::string& m : r.errors) named = named || m.find(std::string(variable) + "=" + value) != std::string::npos;
            EXPECT_TRUE(named) << variable << "=" << value;
        }
    }
}

}  // namespace
