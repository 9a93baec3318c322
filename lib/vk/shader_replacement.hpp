// Shader replacement, a diagnostic: the SPIR-V of each specialization the library compiles can be
// written out (PSK_SHADER_DUMP=dir) and read back in place of the built-in module
// (PSK_SHADER_REPLACE=dir). What it is for: timing and checking a kernel compiled some other way
// without rebuilding the library, above all the same kernel with its specialization constants
// frozen, its loops unrolled and its arrays split into registers by spirv-opt before the driver
// sees it (tools/freeze_shaders.py; docs/GPU_RUN.md, "Frozen specializations"). A driver that
// handles specialization constants as well as literals times both alike.
//
// Files are named by the specialization: "<variant>@<v0>_<v1>_..._<vn>" with the constants'
// values by constant_id (the values Pipelines::get passes), so one file replaces exactly one
// specialization of one variant. The dump writes "<variant>.spv" (the built-in module, once) and
// "<stem>.spec" (one line "id:value ..." of the specialization's constants, for spirv-opt's
// --set-spec-const-default-value); a replacement is "<stem>.spv" in the replace directory, or else
// "<variant>.spv" for every specialization of the variant (a module compiled from an edited source
// keeps the variant's specialization constants, which the pipeline still sets), and is used only
// where one exists. Read once, when the context is created.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vk/shader_code.hpp"

namespace psk {

struct ShaderReplacement {
    std::string dumpDir;     // PSK_SHADER_DUMP: where every specialization compiled is written ("" none)
    std::string replaceDir;  // PSK_SHADER_REPLACE: where replacements are looked for ("" none)

    /**
     * The two directories from the environment. Throws PSK_ERROR_INVALID_ARGUMENT naming the
     * variable when one is set to something that is not an existing directory.
     */
    static ShaderReplacement fromEnvironment();
    bool active() const { return !dumpDir.empty() || !replaceDir.empty(); }
};

/** "<variant>@<v0>_<v1>_..." for the code's name and the constants by constant_id. */
std::string specializationStem(const ShaderCode& code, const std::vector<uint32_t>& specConstants);

/**
 * Writes `dir`/<variant>.spv (unless it exists) and `dir`/<stem>.spec. Throws PSK_ERROR_BAD_FILE
 * naming the file that could not be written.
 */
void dumpSpecialization(const std::string& dir, const ShaderCode& code, const std::vector<uint32_t>& specConstants);

/**
 * The words of `dir`/<stem>.spv, else of `dir`/<variant>.spv (the stem's part before '@'), or
 * nothing when there is neither; `path` is set to the file read (or the first looked for). Throws
 * PSK_ERROR_BAD_FILE when the file cannot be read or is not a SPIR-V module (magic number, a
 * whole number of words, a header, at most kMaxReplacementBytes); what the words do is the
 * file's author's: the driver compiles them with the variant's bindings and push constants.
 */
std::optional<std::vector<uint32_t>> loadReplacement(const std::string& dir, const std::string& stem, std::string* path);
constexpr size_t kMaxReplacementBytes = 64u << 20;

}  // namespace psk
