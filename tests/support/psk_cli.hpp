// Helpers of the psk tool tests: a temporary directory and running the psk binary (its path comes
// from the build as PSK_BINARY) with captured exit status, stdout and stderr.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace psk::test {

/** A fresh directory under the system temp dir, removed with everything in it on destruction. */
class TempDir {
public:
    TempDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "psk_tool_test-XXXXXX").string();
        std::vector<char> buf(pattern.begin(), pattern.end());
        buf.push_back('\0');
        if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
        path_ = buf.data();
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string operator/(const std::string& name) const { return path_ + "/" + name; }
    /** Names of the files in the directory, sorted. */
    std::vector<std::string> files() const {
        std::vector<std::string> names;
        for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }

private:
    std::string path_;
};

inline std::string readText(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

struct Outcome {
    int code = -1;
    std::string out, err;
};

/**
 * Runs `env` (e.g. "PSK_TORCH_PYTHON=/x", may be empty) psk `args` through the shell. Arguments
 * must not contain single quotes.
 */
inline Outcome runPsk(const std::vector<std::string>& args, const std::string& env = "") {
    TempDir logs;
    std::string cmd = env.empty() ? "" : "env " + env + " ";
    cmd += std::string("'") + PSK_BINARY + "'";
    for (const std::string& a : args) {
        EXPECT_EQ(a.find('\''), std::string::npos) << a;
        cmd += " '" + a + "'";
    }
    cmd += " > '" + (logs / "stdout") + "' 2> '" + (logs / "stderr") + "' < /dev/null";
    const int status = std::system(cmd.c_str());
    Outcome o;
    o.code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    o.out = readText(logs / "stdout");
    o.err = readText(logs / "stderr");
    return o;
}

}  // namespace psk::test
