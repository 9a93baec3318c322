// The kernel paths a CPU driver (lavapipe) can run, forced from inside one test: the library reads
// PSK_DISABLE_TEAM_KERNELS and PSK_COOPMAT_EMULATION when an attention or decode state is created
// (lib/forward/coopmat_switches.hpp), so a test that creates one object per path under a scoped
// setting runs every path in one process and computes its float64 reference once. The ctest runs
// with a prefix (generic_kernels., coopmat_emulated., ...) do the same per process.
#pragma once

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/scoped_env.hpp"

namespace psk::test {

enum class KernelPath {
    Default,   // what the library picks: lane-team kernels where a CPU driver takes them, else generic
    Generic,   // PSK_DISABLE_TEAM_KERNELS=1: the kernels a GPU runs (without cooperative matrices)
    Emulated,  // PSK_COOPMAT_EMULATION=1: 16-bit storage through the strict emulated cooperative backend
    GpuTiles,  // PSK_COOPMAT_EMULATION=gpu-tiles: the same backend with the tilings a GPU plans
};

inline const char* kernelPathName(KernelPath path) {
    switch (path) {
        case KernelPath::Default: return "default";
        case KernelPath::Generic: return "generic";
        case KernelPath::Emulated: return "emulated";
        case KernelPath::GpuTiles: return "gpu-tiles";
    }
    return "?";
}

/** Sets the environment of one kernel path for its lifetime and restores the previous values. */
class KernelPathScope {
public:
    explicit KernelPathScope(KernelPath path)
        : team_("PSK_DISABLE_TEAM_KERNELS", path == KernelPath::Generic ? "1" : nullptr),
          emulation_("PSK_COOPMAT_EMULATION", path == KernelPath::Emulated ? "1" : path == KernelPath::GpuTiles ? "gpu-tiles" : nullptr) {}

private:
    ScopedEnv team_, emulation_;
};

/** The kernel lines of a plan (pskGetAttentionPlan) without their reasons and without the comment
 *  lines: equal for two paths that run the same kernels with the same constants. */
inline std::string planKernels(const std::string& plan) {
    std::istringstream in(plan);
    std::string line, out;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        out += line.substr(0, line.find(": ")) + "\n";
    }
    return out;
}

/** The implementations a plan runs, e.g. "team+generic", "cooperative+generic" (sorted, '+'-joined). */
inline std::string planImplementations(const std::string& plan) {
    std::set<std::string> kinds;
    for (const char* kind : {"generic", "team", "cooperative"})
        if (plan.find(std::string(" (") + kind + ")") != std::string::npos) kinds.insert(kind);
    std::string out;
    for (const std::string& k : kinds) out += (out.empty() ? "" : "+") + k;
    return out;
}

}  // namespace psk::test
