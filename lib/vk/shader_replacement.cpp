#include "vk/shader_replacement.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include "util/bounded_file.hpp"
#include "util/error.hpp"

namespace psk {
namespace {

constexpr uint32_t kSpirvMagic = 0x07230203u;
constexpr size_t kSpirvHeaderWords = 5;

std::string environmentDirectory(const char* variable) {
    const char* value = std::getenv(variable);
    if (!value || !value[0]) return {};
    std::error_code ec;
    const std::filesystem::file_status status = std::filesystem::status(value, ec);
    if (ec || !std::filesystem::exists(status))
        fail(PSK_ERROR_INVALID_ARGUMENT, variable, "=", value, ": not an existing directory (", ec ? ec.message() : "no such file", ")");
    if (!std::filesystem::is_directory(status)) fail(PSK_ERROR_INVALID_ARGUMENT, variable, "=", value, ": not a directory");
    return value;
}

bool fileExists(const std::string& path) {
    std::error_code ec;
    return std::filesystem::exists(path, ec);
}

struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

void writeFile(const std::string& path, const void* data, size_t bytes) {
    File f(std::fopen(path.c_str(), "wb"));
    if (!f) fail(PSK_ERROR_BAD_FILE, "PSK_SHADER_DUMP: cannot write ", path, ": ", std::strerror(errno));
    if (bytes && std::fwrite(data, 1, bytes, f.get()) != bytes)
        fail(PSK_ERROR_BAD_FILE, "PSK_SHADER_DUMP: cannot write ", path, ": ", std::strerror(errno));
    if (std::fclose(f.release()) != 0) fail(PSK_ERROR_BAD_FILE, "PSK_SHADER_DUMP: cannot write ", path, ": ", std::strerror(errno));
}

}  // namespace

ShaderReplacement ShaderReplacement::fromEnvironment() {
    ShaderReplacement r;
    r.dumpDir = environmentDirectory("PSK_SHADER_DUMP");
    r.replaceDir = environmentDirectory("PSK_SHADER_REPLACE");
    return r;
}

std::string specializationStem(const ShaderCode& code, const std::vector<uint32_t>& specConstants) {
    std::string stem = std::string(code.name) + "@";
    for (size_t i = 0; i < specConstants.size(); ++i) {
        if (i) stem += "_";
        stem += std::to_string(specConstants[i]);
    }
    return stem;
}

void dumpSpecialization(const std::string& dir, const ShaderCode& code, const std::vector<uint32_t>& specConstants) {
    const std::string module = dir + "/" + code.name + ".spv";
    if (!fileExists(module)) writeFile(module, code.code, code.bytes);
    std::string spec;
    for (size_t i = 0; i < specConstants.size(); ++i) spec += (i ? " " : "") + std::to_string(i) + ":" + std::to_string(specConstants[i]);
    spec += "\n";
    writeFile(dir + "/" + specializationStem(code, specConstants) + ".spec", spec.data(), spec.size());
}

std::optional<std::vector<uint32_t>> loadReplacement(const std::string& dir, const std::string& stem, std::string* path) {
    std::string file = dir + "/" + stem + ".spv";
    if (path) *path = file;
    if (!fileExists(file)) {
        const size_t at = stem.find('@');
        if (at == std::string::npos) return std::nullopt;
        file = dir + "/" + stem.substr(0, at) + ".spv";  // every specialization of the variant
        if (!fileExists(file)) return std::nullopt;
        if (path) *path = file;
    }
    const std::string bytes = readBoundedFile(file, kMaxReplacementBytes, "PSK_SHADER_REPLACE: " + file);
    if (bytes.size() % 4 != 0)
        fail(PSK_ERROR_BAD_FILE, "PSK_SHADER_REPLACE: ", file, " is not a whole number of 32-bit words (", bytes.size(), " bytes)");
    std::vector<uint32_t> words(bytes.size() / 4);
    if (!words.empty()) std::memcpy(words.data(), bytes.data(), bytes.size());
    if (words.size() <= kSpirvHeaderWords || words[0] != kSpirvMagic)
        fail(PSK_ERROR_BAD_FILE, "PSK_SHADER_REPLACE: ", file, " is not a SPIR-V module (no magic number and header)");
    return words;
}

}  // namespace psk
