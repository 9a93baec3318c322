// psk conformance: running one conformance case (reference/conformance_cases.hpp) on a device
// through the public C API and comparing it with the float64 reference, on one kernel path.
#pragma once

#include <polysketch/polysketch.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "reference/conformance_cases.hpp"

namespace psk::conformance {

/**
 * A kernel path, chosen through the environment variables the library reads when an attention is
 * created (README): generic (PSK_DISABLE_TEAM_KERNELS=1, PSK_DISABLE_COOPMAT=1), team (the
 * lane-team kernels of CPU drivers), cooperative (the device's cooperative-matrix kernels, 16-bit
 * storage) and emulated (PSK_COOPMAT_EMULATION=1: the cooperative kernels' emulated backend).
 */
enum class Path { Generic, Team, Cooperative, Emulated };

const char* pathName(Path path);
bool parsePath(const std::string& text, Path* path);
/** Sets the three variables for `path` (call while no library call is in flight). */
void selectPath(Path path);
/** Puts the three variables back as they were before the first selectPath. */
void restoreEnvironment();

struct Outcome {
    enum class Status { Pass, Fail, Skip };
    Status status = Status::Skip;
    double error = NAN;      // relativeMaxError; NaN when nothing was measured
    double threshold = NAN;  // the case's threshold times the threshold scale
    std::vector<std::string> kernels;  // "variant (implementation)" per line of the attention's plan
    std::string ran;                   // the implementations that ran, e.g. "team+generic"
    std::string note;                  // why it failed or was skipped
    double seconds = 0;
};

/** One context and its messages; runs cases on it. */
class Runner {
public:
    /** Creates the context (device: index or part of a name, empty for PSK_DEVICE or the best). */
    PskResult open(const std::string& device, bool requireValidation);
    ~Runner();

    double thresholdScale = 1;

    PskContext context() const { return ctx_; }
    bool validationOn();
    uint64_t validationMessages();
    /** "PSK_ERROR_X: the library's last message". */
    std::string describe(PskResult r);

    /** A baseline case; on the cooperative and emulated paths a SKIP when the plan has no such kernel. */
    Outcome run(const BaselineCase& c, Path path = Path::Generic);
    Outcome run(const PolysketchCase& c, Path path);
    /** Two outcomes: the decoded rows against the float64 reference, then against the forward. */
    std::vector<Outcome> run(const DecodeCase& c, Path path);

    /** Whether the device runs `path` at all (after selectPath(path)): empty, or why not. */
    std::string pathUnavailable(Path path);

private:
    static void callback(PskMessageSeverity severity, PskResult result, const char* message, void* user);

    PskContext ctx_ = nullptr;
    std::mutex mutex_;
    std::string lastError_;
    uint64_t validationMessages_ = 0;
    bool validationOn_ = false;
};

}  // namespace psk::conformance
