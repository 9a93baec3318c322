// psk bench --peer torch: PyTorch's scaled_dot_product_attention on the CPU at the sweep's shapes,
// timed by tools/torch_peer.py in one process for the whole sweep.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bench.hpp"
#include "json.hpp"

extern char** environ;

#ifndef PSK_DEFAULT_TOOLS_DIR
#define PSK_DEFAULT_TOOLS_DIR "tools"
#endif
#ifndef PSK_DEFAULT_SOURCE_DIR
#define PSK_DEFAULT_SOURCE_DIR "."
#endif

namespace psk::bench {

std::string toolsDir() {
    const char* env = std::getenv("PSK_TOOLS_DIR");
    return env && *env ? env : PSK_DEFAULT_TOOLS_DIR;
}

int runProcess(const std::vector<std::string>& args, std::string& error) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
    if (rc != 0) {
        error = "cannot start " + args[0] + ": " + std::strerror(rc);
        return -1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            error = "waitpid failed: " + std::string(std::strerror(errno));
            return -1;
        }
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    error = args[0] + " was killed by signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return -1;
}

PeerShape peerShapeOf(const Config& c) {
    return PeerShape{c.batch, c.heads, c.kvHeads, c.n, c.headDim, c.valueDim, c.causal};
}

namespace {

std::string tempPath(const char* stem) {
    const char* dir = std::getenv("TMPDIR");
    std::string path = std::string(dir && *dir ? dir : "/tmp") + "/" + stem + "-XXXXXX";
    std::vector<char> buf(path.begin(), path.end());
    buf.push_back('\0');
    const int fd = mkstemp(buf.data());
    if (fd < 0) return "";
    close(fd);
    return buf.data();
}

bool readWhole(const std::string& path, std::string& out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream s;
    s << in.rdbuf();
    out = s.str();
    return true;
}

}  // namespace

void runTorchPeer(std::vector<Result>& results, int runs, int warmup, PeerInfo& info, bool verbose) {
    info = PeerInfo{};
    info.name = "torch";
    const char* envPython = std::getenv("PSK_TORCH_PYTHON");
    const std::string python = envPython && *envPython ? envPython : std::string(PSK_DEFAULT_SOURCE_DIR) + "/.venv-bench/bin/python";
    const std::string script = toolsDir() + "/torch_peer.py";
    if (python.find('/') != std::string::npos && access(python.c_str(), X_OK) != 0) {
        info.reason = "no Python at " + python + " (run tools/install_bench_deps.sh, or set PSK_TORCH_PYTHON)";
        return;
    }
    if (access(script.c_str(), R_OK) != 0) {
        info.reason = "no script " + script + " (set PSK_TOOLS_DIR)";
        return;
    }

    std::vector<PeerShape> shapes;
    for (const Result& r : results) {
        const PeerShape s = peerShapeOf(r.config);
        bool seen = false;
        for (const PeerShape& t : shapes) seen = seen || t == s;
        if (!seen) shapes.push_back(s);
    }
    std::ostringstream in;
    in << "{\"runs\": " << runs << ", \"warmup\": " << warmup << ", \"shapes\": [";
    for (size_t i = 0; i < shapes.size(); ++i) {
        const PeerShape& s = shapes[i];
        in << (i ? ", " : "") << "{\"batch\": " << s.batch << ", \"heads\": " << s.heads << ", \"kv_heads\": " << s.kvHeads
           << ", \"n\": " << s.n << ", \"head_dim\": " << s.headDim << ", \"value_dim\": " << s.valueDim
           << ", \"causal\": " << (s.causal ? "true" : "false") << "}";
    }
    in << "]}\n";

    const std::string inPath = tempPath("psk-peer-in"), outPath = tempPath("psk-peer-out");
    std::string error;
    if (inPath.empty() || outPath.empty() || !writeText(inPath, in.str(), error)) {
        info.reason = "cannot create a temporary file: " + (error.empty() ? std::string(std::strerror(errno)) : error);
        if (!inPath.empty()) std::remove(inPath.c_str());
        if (!outPath.empty()) std::remove(outPath.c_str());
        return;
    }
    std::vector<std::string> args{python, script, "--in", inPath, "--out", outPath};
    if (verbose) args.push_back("--progress");
    const int rc = runProcess(args, error);
    std::string text;
    const bool haveOut = readWhole(outPath, text) && !text.empty();
    std::remove(inPath.c_str());
    std::remove(outPath.c_str());
    if (rc != 0 || !haveOut) {
        info.reason = rc < 0 ? error : "tools/torch_peer.py exited with status " + std::to_string(rc) + " and no results";
        return;
    }
    json::Value doc;
    try {
        doc = json::parse(text);
    } catch (const json::ParseError& e) {
        info.reason = std::string("unreadable peer results: ") + e.what();
        return;
    }
    info.available = doc.flag("available");
    info.reason = doc.str("reason");
    info.version = doc.str("version");
    info.threads = int(doc.num("threads"));
    if (!info.available) {
        if (info.reason.empty()) info.reason = "the peer reported itself unavailable";
        return;
    }
    const json::Value* list = doc.find("results");
    if (!list || list->type != json::Value::Type::Array) {
        info.available = false;
        info.reason = "the peer's results have no 'results' array";
        return;
    }
    for (Result& r : results) {
        const PeerShape s = peerShapeOf(r.config);
        r.peerOk = false;
        r.peerReason = "no peer result for this shape";
        for (const json::Value& e : list->array) {
            const PeerShape t{uint32_t(e.num("batch")), uint32_t(e.num("heads")), uint32_t(e.num("kv_heads")), uint32_t(e.num("n")),
                              uint32_t(e.num("head_dim")), uint32_t(e.num("value_dim")), e.flag("causal")};
            if (!(t == s)) continue;
            if (e.str("status") == "ok") {
                r.peerOk = true;
                r.peerReason.clear();
                r.peer.medianMs = e.num("median_ms");
                r.peer.minMs = e.num("min_ms");
                r.peer.maxMs = e.num("max_ms");
            } else {
                r.peerReason = e.str("reason", "the peer skipped this shape");
            }
            break;
        }
    }
}

}  // namespace psk::bench
