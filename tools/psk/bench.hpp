// psk bench: the configurations it sweeps, what it records, and the helpers split out of
// cmd_bench.cpp (FLOP formulas, statistics, JSON/CSV output, the PyTorch peer).
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace psk::bench {

/** One point of the sweep. Polysketch-only fields are 0 / false for the other kinds. */
struct Config {
    PskAttentionKind kind = PSK_ATTENTION_KIND_SOFTMAX;
    PskDataType dtype = PSK_DATA_TYPE_FLOAT32;
    PskLayout layout = PSK_LAYOUT_BHND;
    uint32_t batch = 1, heads = 1, kvHeads = 1, n = 1, headDim = 64, valueDim = 64;
    bool causal = true;
    uint32_t degree = 0;                  // 0 for softmax
    uint32_t sketchSize = 0, blockSize = 0;
    bool localExact = false;
    bool learned = false;                 // polysketch: a random learned sketch (degree 4), not the seeded random one
    uint32_t chunk = 0;                   // > 0: the forward as calls of `chunk` tokens passing a decode state
    std::vector<uint32_t> varlen;         // non-empty: a packed batch of these lengths (cuSeqlens), n = their sum
};

/** Median, min, max and mean of a set of times. */
struct Timing {
    double medianMs = 0, minMs = 0, maxMs = 0, meanMs = 0;
};

/** The median (mean of the two middle values for an even count), min, max and mean; zeros if empty. */
Timing summarize(std::vector<double> samplesMs);

struct Result {
    Config config;
    bool ok = false;
    std::string reason;  // why it was skipped
    Timing gpu;
    std::vector<double> samplesMs;
    // Per stage (PskForwardStage): the samples of PskForwardStats.stageMilliseconds and their median.
    std::vector<double> stageSamplesMs[PSK_FORWARD_STAGE_COUNT];
    double stageMedianMs[PSK_FORWARD_STAGE_COUNT] = {};
    uint64_t workspaceBytes = 0;
    double flops = 0;
    // Decode mode (psk bench --decode): config.n is the context length L the state was prefilled
    // to; the samples are the GPU times of single steps; the state's bytes (pskGetDecodeStateSize)
    // and the wall time of the state-only prefill. workspaceBytes is the step's scratch.
    uint64_t stateBytes = 0;
    double prefillWallMs = 0;
    // How the times were taken: "host" (pskAttentionForwardHost: each call uploads, checks for
    // NaN / infinity and downloads around the timed dispatches) or "resident" (psk bench
    // --resident: pskCmdAttentionForward on device buffers uploaded once, one recorded command
    // buffer submitted back to back). The warm-up actually done before the timed runs, the wall
    // clock (Unix seconds) around the timed runs (for matching a clock log), and the kernels the
    // timed attention ran ("cooperative x3 + generic x1", from pskGetAttentionPlan).
    std::string timing = "host";
    uint32_t warmupRuns = 0;
    double warmupMs = 0;
    double timedStartUnix = 0, timedEndUnix = 0;
    std::string plan;
    bool fusedQuery = false;  // the plan's cooperative output computes the query side (stageBytes)
    double zOperandBytes = 0;  // the plan packs Z as the cooperative output's operands: the records' bytes (stageBytes)
    bool zWalk = false;        // ... and the call's packing walks the blocks instead of the scan (stageBytes)
    // --resident: the host-form runs that follow the resident ones on the library's own context
    // (the stage times come from them: pskCmdAttentionForward reports none), their kernels, and
    // why they failed when they did.
    bool hostOk = false;
    Timing host;
    std::string hostPlan, hostReason;
    // Filled when a peer ran at this shape.
    bool peerOk = false;
    Timing peer;
    std::string peerReason;
};

/** JSON / CSV names of the stages, in PskForwardStage order. */
inline const char* stageName(uint32_t stage) {
    static const char* names[PSK_FORWARD_STAGE_COUNT] = {"feature_map", "block_states", "prefix", "output"};
    return stage < PSK_FORWARD_STAGE_COUNT ? names[stage] : "?";
}

/** Polysketch's sketch length r of `c` (h for p = 2: the sketch is the identity; the library's default 32 where unset)... */
double sketchLength(const Config&);
/** ... and its blocks per sequence, t = ceil(n / b) (b = 256 where unset). */
uint64_t polysketchBlocks(const Config&);

/** The effective FLOP count of one forward call (formulas in docs/PERFORMANCE.md). */
double flops(const Config&);

/**
 * Polysketch: the bytes each stage must move through HBM at least (its inputs read once, its
 * outputs written once; formulas in bench_stats.cpp), in PskForwardStage order; zeros for the
 * other kinds. Divided by a stage's time: the bandwidth it reached, against the copy ceiling.
 */
struct StageBytes {
    double bytes[PSK_FORWARD_STAGE_COUNT] = {};
};
StageBytes stageBytes(const Config&, bool fusedQuery = false, double zOperandBytes = 0, bool zWalk = false);

/** What the peer run reported as a whole. */
struct PeerInfo {
    std::string name;        // "torch", or empty when no peer was requested
    bool available = false;
    std::string reason;      // why it is unavailable
    std::string version;
    int threads = 0;
};

/** The shape a peer is timed at (one entry per distinct shape of the sweep). */
struct PeerShape {
    uint32_t batch, heads, kvHeads, n, headDim, valueDim;
    bool causal;
    bool operator==(const PeerShape& o) const {
        return batch == o.batch && heads == o.heads && kvHeads == o.kvHeads && n == o.n && headDim == o.headDim &&
               valueDim == o.valueDim && causal == o.causal;
    }
};
PeerShape peerShapeOf(const Config&);

/**
 * Runs tools/torch_peer.py once for all `shapes` (same run and warm-up counts) and fills the peer
 * fields of every result with a matching shape. Never fails: a missing venv, a missing torch or a
 * crashed script make the peer "unavailable" with the reason in `info`.
 */
void runTorchPeer(std::vector<Result>& results, int runs, int warmup, PeerInfo& info, bool verbose);

/** Where the Python scripts live (PSK_TOOLS_DIR, else the source tree's tools/). */
std::string toolsDir();

/**
 * Runs argv[0] (searched in PATH when it has no '/') with the given arguments and waits. Returns
 * the exit status, or -1 with `error` set when it could not be started.
 */
int runProcess(const std::vector<std::string>& argv, std::string& error);

/** Everything the JSON file records besides the results. */
struct RunInfo {
    std::string command;
    std::string deviceName, driverName, driverInfo;
    uint32_t deviceType = 0;
    std::string libraryVersion;
    std::string startedUtc;
    int runs = 0, warmup = 0;
    double warmupMs = 0;      // --warmup-ms: the least warm-up time per configuration
    bool resident = false;    // --resident
    int hostRuns = 0;         // --resident: host-form runs after the resident ones (stage times)
    PeerInfo peer;
    // Decode mode: `runs` is the number of timed steps per context, `warmup` the untimed ones.
    bool decode = false;
};

std::string toJson(const RunInfo&, const std::vector<Result>&);
std::string toCsv(const RunInfo&, const std::vector<Result>&);
/** Writes text to a file; returns false and sets `error` on failure. */
bool writeText(const std::string& path, const std::string& text, std::string& error);

}  // namespace psk::bench
