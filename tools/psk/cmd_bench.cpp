// psk bench: sweeps context lengths, kinds, storage types and shapes, and records per configuration
// the median, min and max GPU time of N runs after warm-up (Vulkan timestamp queries around the
// attention dispatches), the effective TFLOP/s and the workspace. A configuration that fails is
// recorded as skipped with its reason and the sweep goes on. Output: a table on stdout, JSON, CSV,
// a plot (tools/bench_plot.py) and an optional PyTorch CPU peer (tools/torch_peer.py).
// --decode times incremental decoding instead: per context length, a state-only prefill, then
// single steps (median, mean, min, max GPU time per step) and the state's bytes.
// --resident times device-resident calls instead of host-form ones: psk opens the device itself
// (the Vulkan loader through dlopen), hands it to the library as an app's (PskExternalVulkan),
// uploads q, k, v once and submits one command buffer recorded with pskCmdAttentionForward back to
// back, timestamps around it; the stage times then come from host-form calls right after.
#include <polysketch/polysketch.h>
#include <polysketch/polysketch_vulkan.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "bench.hpp"
#include "cli_util.hpp"
#include "resident_device.hpp"
#include "commands.hpp"
#include "reference/storage_types.hpp"
#include "vk/vulkan_functions.hpp"  // the feature structs of extensions newer than the installed Vulkan headers
#include "sketch/sketch_weights.hpp"
#include "reference/sketch_fixtures.hpp"

namespace {

using namespace psk::bench;
using psk::cli::MessageSink;

void benchUsage(FILE* out) {
    std::fprintf(out,
        "usage: psk bench [--kinds LIST] [--n LIST] [--dtype LIST] [--batch LIST] [--heads LIST]\n"
        "                 [--head-dim LIST] [--degree LIST] [--sketch-size LIST] [--block-size LIST]\n"
        "                 [--local-exact] [--full] [--layout bhnd|bnhd] [--runs N] [--warmup N]\n"
        "                 [--warmup-ms MS] [--resident [--host-runs N]]\n"
        "                 [--json FILE] [--csv FILE] [--plot FILE.png] [--peer torch] [--device SEL]\n"
        "       psk bench --decode [--kinds softmax,polysketch] [--context LIST] [--steps N] [--warmup N]\n"
        "                 [shape options as above] [--json FILE] [--csv FILE] [--plot FILE.png]\n"
        "\n"
        "Times every combination of the lists (comma-separated; 'k' multiplies by 1024: --n 1k,2k).\n"
        "Per configuration: median, min and max GPU time of N runs after the warm-up runs (timestamp\n"
        "queries around the attention dispatches; uploads and downloads excluded), ms per token,\n"
        "effective TFLOP/s (formulas in docs/PERFORMANCE.md), device workspace bytes, and the median\n"
        "time of each stage (feature map, block states, prefix, output: timestamps between the\n"
        "stages' dispatches; softmax and polynomial are all output). A\n"
        "configuration that fails (unsupported, too large, out of memory) is recorded as skipped\n"
        "with its reason; the sweep goes on. Random inputs are generated once per shape.\n"
        "\n"
        "  --kinds LIST        softmax, poly, polysketch (default: all three)\n"
        "  --n LIST            context lengths (default 1024,2048,4096)\n"
        "  --dtype LIST        f32, f16, bf16: storage type on the device (default f32)\n"
        "  --batch LIST        batch sizes B (default 1)\n"
        "  --heads LIST        query heads H = key/value heads (default 4)\n"
        "  --head-dim LIST     head dim h = value dim (default 64)\n"
        "  --degree LIST       p for poly and polysketch: 2, 4, 8 (default 4)\n"
        "  --sketch-size LIST  polysketch r (default 32)\n"
        "  --block-size LIST   polysketch b (default 256)\n"
        "  --local-exact       polysketch: exact polynomial weights inside blocks\n"
        "  --learned-sketch    polysketch: a learned sketch (degree 4, random weights from --seed, the\n"
        "                      shapes of docs/MATH.md section 4) instead of the random one: the cost\n"
        "                      of a model's feature map (FLOPs counted with its 32hr + 96r^2 per row)\n"
        "  --varlen LIST       a packed batch of sequences of these lengths (cuSeqlens, no padding),\n"
        "                      timed against the same sequences padded to the longest (B = count);\n"
        "                      replaces --n and --batch\n"
        "  --chunk LIST        causal polysketch or softmax: also time the forward as calls of that many tokens,\n"
        "                      each continuing a decode state (state passing; 0 = one call, the\n"
        "                      default); times are the sums over the calls\n"
        "  --full              non-causal attention (default: causal)\n"
        "  --layout L          device layout (default bhnd)\n"
        "  --runs N            timed runs per configuration (default 5)\n"
        "  --warmup N          untimed runs before them (default 1)\n"
        "  --warmup-ms MS      and keep running untimed until MS milliseconds of them have passed\n"
        "                      (default 0): a GPU that idled needs about a second of load before\n"
        "                      its clocks are up\n"
        "  --resident          device-resident timing: q, k, v uploaded once into device buffers,\n"
        "                      one command buffer (timestamps around pskCmdAttentionForward)\n"
        "                      submitted back to back, so no upload, NaN check or download runs\n"
        "                      between the timed runs (the host form does all three around every\n"
        "                      call). psk creates the Vulkan device itself and gives it to the\n"
        "                      library as an app's (PskExternalVulkan): the library keeps its\n"
        "                      cooperative-matrix kernels off on an app's device, so the kernels\n"
        "                      may differ from the host form's; the 'plan' and 'host_plan' fields\n"
        "                      say which ran. Not with --chunk. With --decode: the timed steps\n"
        "                      recorded back to back in one command buffer (pskCmdDecodeStep,\n"
        "                      a timestamp after each) after at least --warmup steps and\n"
        "                      --warmup-ms of steps on a second state, so that the clocks are up\n"
        "  --host-runs N       --resident: then N host-form calls on the library's own device\n"
        "                      (default 3; 0: none), which give the stage times and host_median_ms\n"
        "  --seed N            seed of the polysketch sketches (default 0)\n"
        "  --json FILE         all results as JSON\n"
        "  --csv FILE          one CSV row per configuration\n"
        "  --plot FILE.png     ms/token vs n, log-log, every kind and the peer (needs matplotlib:\n"
        "                      tools/install_bench_deps.sh); runs tools/bench_plot.py on the JSON\n"
        "  --peer torch        also time torch.nn.functional.scaled_dot_product_attention on the CPU\n"
        "                      (float32, all cores) at the same shapes, once for the whole sweep\n"
        "                      (needs .venv-bench from tools/install_bench_deps.sh; otherwise the\n"
        "                      peer is recorded as unavailable)\n"
        "  --device SEL        device index or part of its name (default PSK_DEVICE or the best)\n"
        "  --quiet             no table on stdout\n"
        "\n"
        "Decode mode (--decode): incremental decoding (pskDecodeStepHost), one token per step.\n"
        "For each context length L: a decode state is prefilled with L random tokens (state only:\n"
        "out = NULL, so softmax fills its KV cache without the quadratic forward), then N steps are\n"
        "timed after the warm-up steps, each by GPU timestamps around the step's commands\n"
        "(PskForwardStats.gpuMilliseconds; the host copies of the token in and the row out\n"
        "excluded). Recorded: median, mean, min and max step time, the state's bytes\n"
        "(pskGetDecodeStateSize), the step scratch and the prefill's wall time. The sweep is\n"
        "causal; --full, --runs, --peer and the kind poly do not apply.\n"
        "  --decode            decode mode (kinds default to polysketch,softmax)\n"
        "  --context LIST      context lengths L (the same list as --n; default 1k,4k,16k)\n"
        "  --steps N           timed steps per context (default 0: one block cycle, the largest\n"
        "                      --block-size, so the block folds at block boundaries are included)\n"
        "  --warmup N          untimed steps before them (default 1)\n"
        "  --plot FILE.png     decode: median step time vs L (log x) for every kind, and the state\n"
        "                      bytes vs L in a second panel\n"
        "\n"
        "Environment: PSK_BENCH_PYTHON (Python for the plot; default /usr/bin/python3),\n"
        "PSK_TORCH_PYTHON (Python for the peer; default .venv-bench/bin/python of the source tree),\n"
        "PSK_TOOLS_DIR (where bench_plot.py and torch_peer.py are).\n");
}

struct BenchOptions {
    std::vector<PskAttentionKind> kinds{PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_KIND_POLYNOMIAL, PSK_ATTENTION_KIND_POLYSKETCH};
    std::vector<uint32_t> n{1024, 2048, 4096}, batch{1}, heads{4}, headDim{64}, degree{4}, sketchSize{32}, blockSize{256};
    std::vector<uint32_t> chunk{0};  // 0: one call; else calls of that many tokens passing a decode state
    std::vector<uint32_t> varlen;    // --varlen: sequence lengths of a packed batch, against the padded batch
    std::vector<PskDataType> dtypes{PSK_DATA_TYPE_FLOAT32};
    PskLayout layout = PSK_LAYOUT_BHND;
    bool localExact = false, causal = true, quiet = false, learned = false;
    uint32_t runs = 5, warmup = 1;
    double warmupMs = 0;
    bool resident = false;
    uint32_t hostRuns = 3;
    uint64_t seed = 0;
    std::string json, csv, plot, peer, device;
    bool decode = false;
    uint32_t steps = 0;  // decode: timed steps per context; 0 = one block cycle
};

using psk::cli::UsageError;
using psk::cli::utcNow;

std::vector<uint32_t> uintList(const std::string& opt, const std::string& s, uint32_t lo, uint32_t hi) {
    std::vector<uint32_t> out;
    for (const std::string& item : psk::cli::splitList(s)) {
        uint32_t v = 0;
        if (!psk::cli::parseUint32(item, lo, hi, &v))
            throw UsageError{opt + " takes integers from " + std::to_string(lo) + " to " + std::to_string(hi) + " (got '" + item + "')"};
        out.push_back(v);
    }
    return out;
}

BenchOptions parseOptions(int argc, char** argv, bool* help) {
    BenchOptions o;
    *help = false;
    bool kindsGiven = false, nGiven = false, runsGiven = false, fullGiven = false;
    psk::cli::ArgReader args(argc, argv);
    while (args.next()) {
        const std::string& a = args.name();
        auto next = [&] { return args.value(); };
        auto flag = [&] { args.flag(); };
        if (a == "--help" || a == "-h") {
            *help = true;
            return o;
        } else if (a == "--kinds" || a == "--kind") {
            kindsGiven = true;
            o.kinds.clear();
            for (const std::string& item : psk::cli::splitList(next())) {
                PskAttentionKind k;
                if (!psk::cli::parseKind(item, &k)) throw UsageError{"--kinds takes softmax, poly, polysketch (got '" + item + "')"};
                o.kinds.push_back(k);
            }
        } else if (a == "--n" || a == "--context") {
            nGiven = true;
            o.n = uintList(a, next(), 1, 1u << 24);
        } else if (a == "--decode") {
            flag();
            o.decode = true;
        } else if (a == "--steps") {
            o.steps = uintList(a, next(), 0, 1000000).at(0);
        } else if (a == "--dtype") {
            o.dtypes.clear();
            for (const std::string& item : psk::cli::splitList(next())) {
                PskDataType t;
                if (!psk::cli::parseDataType(item, &t)) throw UsageError{"--dtype takes f32, f16, bf16 (got '" + item + "')"};
                o.dtypes.push_back(t);
            }
        } else if (a == "--batch") {
            o.batch = uintList(a, next(), 1, 1u << 16);
        } else if (a == "--heads") {
            o.heads = uintList(a, next(), 1, 1u << 16);
        } else if (a == "--head-dim") {
            o.headDim = uintList(a, next(), 1, 1u << 16);
        } else if (a == "--degree") {
            o.degree = uintList(a, next(), 2, 8);
            for (uint32_t p : o.degree)
                if (p != 2 && p != 4 && p != 8) throw UsageError{"--degree takes 2, 4, 8 (got " + std::to_string(p) + ")"};
        } else if (a == "--sketch-size") {
            o.sketchSize = uintList(a, next(), 1, 1u << 16);
        } else if (a == "--block-size") {
            o.blockSize = uintList(a, next(), 1, 1u << 16);
        } else if (a == "--varlen") {
            o.varlen = uintList(a, next(), 0, 1u << 24);  // empty sequences are allowed
        } else if (a == "--chunk") {
            o.chunk = uintList(a, next(), 0, 1u << 30);
        } else if (a == "--local-exact") {
            flag();
            o.localExact = true;
        } else if (a == "--learned-sketch") {
            flag();
            o.learned = true;
        } else if (a == "--full") {
            flag();
            fullGiven = true;
            o.causal = false;
        } else if (a == "--causal") {
            flag();
            o.causal = true;
        } else if (a == "--layout") {
            const std::string s = next();
            if (!psk::cli::parseLayout(s, &o.layout)) throw UsageError{"--layout takes bhnd or bnhd (got '" + s + "')"};
        } else if (a == "--runs") {
            runsGiven = true;
            o.runs = uintList(a, next(), 1, 100000).at(0);
        } else if (a == "--warmup") {
            o.warmup = uintList(a, next(), 0, 100000).at(0);
        } else if (a == "--warmup-ms") {
            o.warmupMs = uintList(a, next(), 0, 3600000).at(0);
        } else if (a == "--resident") {
            flag();
            o.resident = true;
        } else if (a == "--host-runs") {
            o.hostRuns = uintList(a, next(), 0, 100000).at(0);
        } else if (a == "--seed") {
            const std::string s = next();
            if (!psk::cli::parseUint(s, 0, ~0ull, &o.seed)) throw UsageError{"--seed needs a non-negative integer (got '" + s + "')"};
        } else if (a == "--json") {
            o.json = next();
        } else if (a == "--csv") {
            o.csv = next();
        } else if (a == "--plot") {
            o.plot = next();
        } else if (a == "--peer") {
            o.peer = next();
            if (o.peer != "torch") throw UsageError{"--peer takes torch (got '" + o.peer + "')"};
        } else if (a == "--device") {
            o.device = next();
        } else if (a == "--quiet") {
            flag();
            o.quiet = true;
        } else {
            throw UsageError{"unknown option '" + args.raw() + "'"};
        }
    }
    if (o.kinds.empty()) throw UsageError{"--kinds is empty"};
    if (o.decode) {
        if (!kindsGiven) o.kinds = {PSK_ATTENTION_KIND_POLYSKETCH, PSK_ATTENTION_KIND_SOFTMAX};
        if (!nGiven) o.n = {1024, 4096, 16384};
        for (PskAttentionKind k : o.kinds)
            if (k == PSK_ATTENTION_KIND_POLYNOMIAL) throw UsageError{"--decode takes the kinds softmax and polysketch (not poly)"};
        if (fullGiven) throw UsageError{"--decode is causal (drop --full)"};
        if (runsGiven) throw UsageError{"--runs does not apply to --decode (use --steps)"};
        if (!o.peer.empty()) throw UsageError{"--peer does not apply to --decode"};
        if (o.steps == 0) {
            o.steps = 0;
            for (uint32_t b : o.blockSize) o.steps = std::max(o.steps, b);
        }
    } else if (o.steps) {
        throw UsageError{"--steps needs --decode"};
    }
    if (o.localExact && !o.causal) throw UsageError{"--local-exact needs causal attention (drop --full)"};
    if (o.resident)
        for (uint32_t ch : o.chunk)
            if (ch) throw UsageError{"--resident does not take --chunk (state passing runs host-form calls)"};
    if (o.learned && (o.degree.size() != 1 || o.degree[0] != 4))
        throw UsageError{"--learned-sketch sketches have degree 4 (give --degree 4 or leave it out)"};
    return o;
}

std::vector<Config> makeShapeConfigs(const BenchOptions& o);

// The sweep. --varlen: every configuration twice, as the packed batch (B = 1, n = the total, the
// lengths in Config::varlen) and as the padded batch (B = the count, n = the longest).
std::vector<Config> makeConfigs(const BenchOptions& o) {
    if (o.varlen.empty()) return makeShapeConfigs(o);
    BenchOptions one = o;
    uint64_t total = 0;
    uint32_t longest = 0;
    for (uint32_t l : o.varlen) total += l, longest = std::max(longest, l);
    if (total == 0) throw UsageError{"--varlen: the lengths add up to 0 tokens"};
    if (total > (1u << 24)) throw UsageError{"--varlen: the lengths add up to more than 2^24 tokens"};
    one.n = {uint32_t(total)};
    one.batch = {1};
    std::vector<Config> out;
    for (Config c : makeShapeConfigs(one)) {
        c.varlen = o.varlen;
        out.push_back(c);
        Config padded = c;
        padded.varlen.clear();
        padded.batch = uint32_t(o.varlen.size());
        padded.n = longest;
        out.push_back(padded);
    }
    return out;
}

// The sweep, shape-major so that one shape's random inputs are generated once and reused.
std::vector<Config> makeShapeConfigs(const BenchOptions& o) {
    std::vector<Config> out;
    for (uint32_t n : o.n)
        for (uint32_t B : o.batch)
            for (uint32_t H : o.heads)
                for (uint32_t h : o.headDim)
                    for (PskDataType t : o.dtypes)
                        for (PskAttentionKind kind : o.kinds) {
                            Config c;
                            c.kind = kind;
                            c.dtype = t;
                            c.layout = o.layout;
                            c.batch = B;
                            c.heads = c.kvHeads = H;
                            c.n = n;
                            c.headDim = c.valueDim = h;
                            c.causal = o.causal;
                            if (kind == PSK_ATTENTION_KIND_SOFTMAX) {
                                // State passing: the KV cache continued by calls of c.chunk tokens (causal).
                                for (uint32_t ch : o.chunk) {
                                    if (ch && !o.causal) continue;
                                    c.chunk = ch;
                                    out.push_back(c);
                                }
                                c.chunk = 0;
                                continue;
                            }
                            const bool chunked = kind == PSK_ATTENTION_KIND_POLYSKETCH && o.causal;
                            for (uint32_t p : o.degree) {
                                c.degree = p;
                                if (kind == PSK_ATTENTION_KIND_POLYNOMIAL) {
                                    out.push_back(c);
                                    continue;
                                }
                                c.localExact = o.localExact;
                                c.learned = o.learned;
                                for (uint32_t r : o.sketchSize)
                                    for (uint32_t b : o.blockSize)
                                        for (uint32_t ch : o.chunk) {
                                            if (ch && !chunked) continue;  // state passing: causal polysketch
                                            c.sketchSize = r;
                                            c.blockSize = b;
                                            c.chunk = ch;
                                            out.push_back(c);
                                        }
                            }
                        }
    return out;
}

// Random inputs of one shape: uniform on [-sqrt(3), sqrt(3)) (unit variance), from a cheap
// generator; the timing does not depend on the values.
struct Inputs {
    uint32_t batch = 0, heads = 0, n = 0, headDim = 0;
    std::vector<float> q, k, v;
    PskDataType encodedAs = PSK_DATA_TYPE_FLOAT32;
    bool encoded = false;
    std::vector<uint8_t> qb, kb, vb, ob;
};

void fillRandom(std::vector<float>& x, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (float& f : x) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        f = float((double(s >> 11) * (1.0 / 9007199254740992.0) * 2 - 1) * 1.7320508075688772);
    }
}

bool prepare(Inputs& in, const Config& c, std::string& error) {
    try {
        if (in.batch != c.batch || in.heads != c.heads || in.n != c.n || in.headDim != c.headDim) {
            in = Inputs{};
            const size_t count = size_t(c.batch) * c.heads * c.n * c.headDim;
            in.q.resize(count);
            in.k.resize(count);
            in.v.resize(count);
            fillRandom(in.q, 1);
            fillRandom(in.k, 2);
            fillRandom(in.v, 3);
            in.batch = c.batch;
            in.heads = c.heads;
            in.n = c.n;
            in.headDim = c.headDim;
        }
        if (!in.encoded || in.encodedAs != c.dtype) {
            in.qb = psk::storage::encode(in.q, c.dtype);
            in.kb = psk::storage::encode(in.k, c.dtype);
            in.vb = psk::storage::encode(in.v, c.dtype);
            in.ob.assign(in.qb.size(), 0);
            in.encodedAs = c.dtype;
            in.encoded = true;
        }
    } catch (const std::bad_alloc&) {
        in = Inputs{};
        error = "host memory: cannot allocate the inputs";
        return false;
    }
    return true;
}

bool stderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

std::string describe(const Config& c) {
    std::string s = psk::cli::kindName(c.kind);
    if (c.degree) s += " p=" + std::to_string(c.degree);
    if (c.kind == PSK_ATTENTION_KIND_POLYSKETCH) {
        s += " r=" + std::to_string(c.sketchSize) + " b=" + std::to_string(c.blockSize);
        if (c.localExact) s += " local";
        if (c.learned) s += " learned";
        if (c.chunk) s += " chunk=" + std::to_string(c.chunk);
    }
    if (!c.varlen.empty()) s += " varlen(" + std::to_string(c.varlen.size()) + " seqs)";
    s += std::string(" ") + psk::cli::dataTypeName(c.dtype) + " n=" + std::to_string(c.n) + " B=" + std::to_string(c.batch) +
         " H=" + std::to_string(c.heads) + " h=" + std::to_string(c.headDim);
    return s;
}

double msSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/** The wall clock in Unix seconds (for matching a clock log such as nvidia-smi's). */
double unixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

/**
 * The kernels of an attention's plan (pskGetAttentionPlan), counted by implementation in order
 * of appearance, cooperative ones by backend: "cooperative/khr x3 + generic x2"; then how many
 * pipelines took their SPIR-V from PSK_SHADER_REPLACE, where any did: "generic x5, 5 replaced".
 */
std::string planText(PskAttention attn) {
    size_t size = 0;
    if (pskGetAttentionPlan(attn, nullptr, &size) != PSK_SUCCESS || size == 0) return "";
    std::string text(size, '\0');
    if (pskGetAttentionPlan(attn, text.data(), &size) != PSK_SUCCESS) return "";
    text.resize(std::strlen(text.c_str()));
    return text;
}

/** Whether the plan's cooperative output computes S(q) and q' itself (its FUSED_QUERY; no query rows in HBM). */
bool planFusesQuery(const std::string& text) {
    return text.find("FUSED_QUERY=1") != std::string::npos || text.find("FUSED_QUERY=2") != std::string::npos;
}

/**
 * Whether a call of `c` packs Z by the walk (z_operands.comp WALK = 1) rather than after the scan:
 * the plan names the walk, the call is causal and continues no decode state (no --chunk), and its
 * packing workgroups (B Hkv ceil(F / FEAT_CHUNK); one sequence per call for --varlen) reach the
 * threshold the walk's line names ("with at least N workgroups"). What recordPolysketch decides.
 */
bool planZWalks(const std::string& text, const Config& c) {
    const size_t line = text.find(" WALK=1: the prefix and the packing in one pass");
    if (line == std::string::npos || !c.causal || c.chunk > 0) return false;
    const size_t start = text.rfind('\n', line), chunkAt = text.find(" FEAT_CHUNK=", start == std::string::npos ? 0 : start);
    const size_t least = text.find("with at least ", line);
    if (chunkAt == std::string::npos || chunkAt > line || least == std::string::npos) return false;
    const double chunk = std::strtod(text.c_str() + chunkAt + 12, nullptr);
    const double minGroups = std::strtod(text.c_str() + least + 14, nullptr);
    if (chunk <= 0) return false;
    const double r = sketchLength(c), F = r * (r + 1) / 2;
    const double sequences = double(c.varlen.empty() ? c.batch : 1) * c.kvHeads;
    return sequences * std::ceil(F / chunk) >= minGroups;
}

/**
 * The bytes of the records z_operands.comp writes for one call of `c` (0 when the plan stages Z in
 * the output itself): B Hkv (t causal, 1 full) ceil(F / FEAT_CHUNK) records of
 * 16 (1 + 2 FEAT_CHUNK NC / 8) bytes, FEAT_CHUNK and NC from the plan's z_operands line.
 */
double planZOperandBytes(const std::string& text, const Config& c) {
    const size_t line = text.find("z_operands.");
    if (line == std::string::npos || c.kind != PSK_ATTENTION_KIND_POLYSKETCH) return 0;
    auto value = [&](const char* name) -> double {
        const size_t at = text.find(name, line);
        return at == std::string::npos ? 0 : std::strtod(text.c_str() + at + std::strlen(name), nullptr);
    };
    const double chunk = value(" FEAT_CHUNK="), columns = value(" NC=");
    if (chunk <= 0 || columns <= 0) return 0;
    const double r = sketchLength(c), F = r * (r + 1) / 2;
    const double blocks = c.causal ? double(polysketchBlocks(c)) : 1;
    return double(c.batch) * c.kvHeads * blocks * std::ceil(F / chunk) * 16 * (1 + 2 * chunk * columns / 8);
}

std::string planSummary(const std::string& text) {
    std::vector<std::pair<std::string, int>> counts;
    int replaced = 0;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const std::string line = text.substr(start, end - start);
        start = end + 1;
        if (line.rfind("# stats: ", 0) == 0 && line.find(" SPIR-V replaced by ") != std::string::npos) ++replaced;
        if (line.empty() || line[0] == '#') continue;  // the plan's comments (switches, self-test verdicts)
        const size_t open = line.find(" ("), close = line.find(')', open == std::string::npos ? 0 : open);
        if (open == std::string::npos || close == std::string::npos) continue;
        std::string impl = line.substr(open + 2, close - open - 2);
        const std::string variant = line.substr(0, open);
        if (impl == "cooperative")
            impl += variant.find(".emu_") != std::string::npos   ? "/emulated"
                    : variant.find(".khr_") != std::string::npos ? "/khr"
                    : variant.find(".nv_") != std::string::npos  ? "/nv"
                                                                 : "";
        auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == impl; });
        if (it == counts.end()) counts.emplace_back(impl, 1);
        else ++it->second;
    }
    std::string out;
    for (const auto& [impl, n] : counts) out += (out.empty() ? "" : " + ") + impl + " x" + std::to_string(n);
    if (replaced) out += ", " + std::to_string(replaced) + " replaced";
    return out;
}

class Progress {
public:
    Progress(bool enabled, size_t total) : enabled_(enabled), total_(total), start_(std::chrono::steady_clock::now()) {}
    void show(size_t done, const std::string& what, uint32_t run, uint32_t runs) {
        if (!enabled_) return;
        const int width = 24;
        const int filled = total_ ? int(width * done / total_) : width;
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        std::string bar(size_t(filled), '#');
        bar.append(size_t(width - filled), '.');
        std::fprintf(stderr, "\r\033[K[%s] %zu/%zu %6.0fs  %s  run %u/%u", bar.c_str(), done, total_, elapsed, what.c_str(), run, runs);
        std::fflush(stderr);
    }
    void clear() {
        if (!enabled_) return;
        std::fprintf(stderr, "\r\033[K");
        std::fflush(stderr);
    }

private:
    bool enabled_;
    size_t total_;
    std::chrono::steady_clock::time_point start_;
};

void printHeader() {
    std::printf("%-34s %6s %10s %10s %10s %11s %9s %12s | %9s %9s %9s %9s\n", "configuration", "n", "median ms", "min ms", "max ms",
                "ms/token", "TFLOP/s", "workspace B", "features", "states", "prefix", "output");
}

void printRow(const Result& r) {
    std::string what = describe(r.config);
    what = what.substr(0, what.find(" n="));
    if (!r.ok) {
        std::printf("%-34s %6u skipped: %s\n", what.c_str(), r.config.n, r.reason.c_str());
    } else {
        std::printf("%-34s %6u %10.3f %10.3f %10.3f %11.3e %9.4f %12llu | %9.3f %9.3f %9.3f %9.3f\n", what.c_str(), r.config.n,
                    r.gpu.medianMs, r.gpu.minMs, r.gpu.maxMs, r.gpu.medianMs / (double(r.config.batch) * r.config.n),
                    r.gpu.medianMs > 0 ? r.flops / (r.gpu.medianMs * 1e-3) / 1e12 : 0.0,
                    static_cast<unsigned long long>(r.workspaceBytes), r.stageMedianMs[0], r.stageMedianMs[1], r.stageMedianMs[2],
                    r.stageMedianMs[3]);
        std::printf("    %s: %u warm-up run(s) in %.0f ms; kernels: %s", r.timing.c_str(), r.warmupRuns, r.warmupMs,
                    r.plan.empty() ? "?" : r.plan.c_str());
        if (r.timing == "resident") {
            if (r.hostOk) std::printf("; host form after it: %.3f ms, kernels: %s", r.host.medianMs, r.hostPlan.c_str());
            else if (!r.hostReason.empty()) std::printf("; host form after it failed: %s", r.hostReason.c_str());
        }
        std::printf("\n");
        // The bytes each stage must move, and the bandwidth that makes at its time.
        const StageBytes sb = stageBytes(r.config, r.fusedQuery, r.zOperandBytes, r.zWalk);
        if (sb.bytes[PSK_FORWARD_STAGE_OUTPUT] > 0) {
            std::printf("    compulsory HBM bytes per stage (GB/s at its time):");
            for (uint32_t st = 0; st < PSK_FORWARD_STAGE_COUNT; ++st)
                std::printf(" %s %.1f MB (%.0f)", stageName(st), sb.bytes[st] / 1e6,
                            r.stageMedianMs[st] > 0 ? sb.bytes[st] / (r.stageMedianMs[st] * 1e-3) / 1e9 : 0.0);
            std::printf("\n");
        }
    }
    std::fflush(stdout);
}

/**
 * A configuration's learned sketch (--learned-sketch) as a .safetensors file for the attention to
 * load: random weights of the shapes docs/MATH.md section 4 gives, from the seed; removed with
 * the object. Nothing for the seeded random sketch.
 */
class LearnedSketchFile {
public:
    LearnedSketchFile(const Config& c, uint64_t seed) {
        if (!c.learned) return;
        file_ = std::make_unique<psk::test::TempFile>("psk_bench_learned");
        psk::writeSafeTensors(file_->path(), psk::learnedSketchToSafeTensors(psk::test::randomLearnedSketch(c.headDim, c.sketchSize, seed)));
    }
    const char* path() const { return file_ ? file_->path().c_str() : nullptr; }

private:
    std::unique_ptr<psk::test::TempFile> file_;
};

/** The attention object of one configuration (`causal` overrides the configuration's flag). */
PskAttentionCreateInfo attentionInfo(const Config& c, uint64_t seed, bool causal, const LearnedSketchFile& learned) {
    PskAttentionCreateInfo ai{};
    ai.kind = c.kind;
    ai.flags = (causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (c.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    ai.degree = c.degree;
    ai.numQueryHeads = c.heads;
    ai.numKeyValueHeads = c.kvHeads;
    ai.headDim = c.headDim;
    ai.valueDim = c.valueDim;
    ai.dataType = c.dtype;
    ai.layout = c.layout;
    ai.sketchSize = c.sketchSize;
    ai.blockSize = c.blockSize;
    ai.sketchSource = learned.path() ? PSK_SKETCH_SOURCE_LEARNED_FILE : PSK_SKETCH_SOURCE_SEED;
    ai.sketchFile = learned.path();
    ai.seed = seed;
    return ai;
}

Result runOne(PskContext ctx, MessageSink& sink, const Config& c, Inputs& in, const BenchOptions& o, Progress& progress,
              size_t index) {
    Result res;
    res.config = c;
    res.flops = flops(c);
    std::string error;
    if (!prepare(in, c, error)) {
        res.reason = error;
        return res;
    }
    const LearnedSketchFile learned(c, o.seed);
    const PskAttentionCreateInfo ai = attentionInfo(c, o.seed, c.causal, learned);
    PskAttention attn = nullptr;
    PskResult r = pskCreateAttention(ctx, &ai, &attn);
    if (r != PSK_SUCCESS) {
        res.reason = sink.describe(r);
        return res;
    }
    PskForwardStats stats{};
    PskForwardHostInfo f{};
    f.batchSize = c.batch;
    f.seqLen = c.n;
    f.q = in.qb.data();
    f.k = in.kb.data();
    f.v = in.vb.data();
    f.out = in.ob.data();
    f.qBytes = in.qb.size();
    f.kBytes = in.kb.size();
    f.vBytes = in.vb.size();
    f.outBytes = in.ob.size();
    f.stats = &stats;
    std::vector<uint32_t> cu{0};
    if (!c.varlen.empty()) {
        for (uint32_t l : c.varlen) cu.push_back(cu.back() + l);
        f.batchSize = uint32_t(c.varlen.size());
        f.cuSeqlens = cu.data();
    }
    const std::string what = describe(c);
    const uint32_t total = o.warmup + o.runs;
    // --chunk: the same forward as calls of c.chunk tokens, each continuing a decode state (state
    // passing); the times are the sums over the calls, the workspace the largest call's.
    PskDecodeState state = nullptr;
    if (c.chunk) {
        PskDecodeStateCreateInfo si{};
        si.batchSize = c.batch;
        si.capacity = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? c.n : 0;  // the KV cache holds the whole sequence
        r = pskCreateDecodeState(attn, &si, &state);
        if (r != PSK_SUCCESS) {
            res.reason = sink.describe(r);
            pskDestroyAttention(attn);
            return res;
        }
    }
    auto forward = [&]() -> PskResult {
        if (!c.chunk) return pskAttentionForwardHost(attn, &f);
        for (uint32_t b = 0; b < c.batch; ++b)
            if (PskResult rr = pskResetDecodeSequence(state, b); rr != PSK_SUCCESS) return rr;
        const size_t e = c.dtype == PSK_DATA_TYPE_FLOAT32 ? 4 : 2;
        const bool bnhd = c.layout == PSK_LAYOUT_BNHD;
        const uint64_t H = c.heads, n = c.n;
        const PskTensorStrides qs = bnhd ? PskTensorStrides{n * H * c.headDim, c.headDim, H * c.headDim}
                                         : PskTensorStrides{H * n * c.headDim, n * c.headDim, c.headDim};
        const PskTensorStrides os = bnhd ? PskTensorStrides{n * H * c.valueDim, c.valueDim, H * c.valueDim}
                                         : PskTensorStrides{H * n * c.valueDim, n * c.valueDim, c.valueDim};
        PskForwardStats sum{};
        for (uint64_t t0 = 0; t0 < n; t0 += c.chunk) {
            PskForwardHostInfo g = f;
            g.seqLen = uint32_t(std::min<uint64_t>(c.chunk, n - t0));
            g.q = in.qb.data() + t0 * qs.token * e;
            g.k = in.kb.data() + t0 * qs.token * e;
            g.v = in.vb.data() + t0 * os.token * e;
            g.out = in.ob.data() + t0 * os.token * e;
            g.qBytes = in.qb.size() - t0 * qs.token * e;
            g.kBytes = in.kb.size() - t0 * qs.token * e;
            g.vBytes = in.vb.size() - t0 * os.token * e;
            g.outBytes = in.ob.size() - t0 * os.token * e;
            g.qStrides = g.kStrides = &qs;
            g.vStrides = g.outStrides = &os;
            g.state = state;
            if (PskResult rr = pskAttentionForwardHost(attn, &g); rr != PSK_SUCCESS) return rr;
            sum.gpuMilliseconds += stats.gpuMilliseconds;
            sum.workspaceBytes = std::max(sum.workspaceBytes, stats.workspaceBytes);
            for (uint32_t st = 0; st < PSK_FORWARD_STAGE_COUNT; ++st) sum.stageMilliseconds[st] += stats.stageMilliseconds[st];
        }
        stats = sum;
        return PSK_SUCCESS;
    };
    const std::string plan = planText(attn);
    res.plan = planSummary(plan);
    res.fusedQuery = planFusesQuery(plan);
    res.zOperandBytes = planZOperandBytes(plan, c);
    res.zWalk = planZWalks(plan, c);
    // Warm-up: at least o.warmup runs and o.warmupMs of them; then the timed runs.
    const auto w0 = std::chrono::steady_clock::now();
    for (uint32_t run = 0; r == PSK_SUCCESS && (run < o.warmup || msSince(w0) < o.warmupMs); ++run) {
        progress.show(index, what + " warm-up", run + 1, std::max(o.warmup, run + 1));
        r = forward();
        res.warmupRuns = run + 1;
    }
    res.warmupMs = msSince(w0);
    res.timedStartUnix = unixNow();
    for (uint32_t run = 0; r == PSK_SUCCESS && run < o.runs; ++run) {
        progress.show(index, what, o.warmup + run + 1, total);
        r = forward();
        if (r != PSK_SUCCESS) break;
        res.samplesMs.push_back(stats.gpuMilliseconds);
        for (uint32_t st = 0; st < PSK_FORWARD_STAGE_COUNT; ++st) res.stageSamplesMs[st].push_back(stats.stageMilliseconds[st]);
        res.workspaceBytes = stats.workspaceBytes;
    }
    res.timedEndUnix = unixNow();
    if (r != PSK_SUCCESS) {
        res.reason = sink.describe(r);
        res.samplesMs.clear();
    }
    pskDestroyDecodeState(state);
    pskDestroyAttention(attn);
    if (res.reason.empty()) {
        res.ok = true;
        res.gpu = summarize(res.samplesMs);
        for (uint32_t st = 0; st < PSK_FORWARD_STAGE_COUNT; ++st) res.stageMedianMs[st] = summarize(res.stageSamplesMs[st]).medianMs;
    }
    return res;
}

// ---- Device-resident timing (--resident) ---------------------------------------------------------

/**
 * One configuration timed device-resident: q, k, v uploaded once, one command buffer (a barrier,
 * timestamps around pskCmdAttentionForward) submitted back to back, first for at least o.warmup
 * runs and o.warmupMs, then o.runs timed ones. The stage times come from o.hostRuns host-form
 * calls on the library's own context right after (runOne), which also give host_median_ms.
 */
Result runResident(ResidentDevice& dev, PskContext hostCtx, MessageSink& sink, const Config& c, Inputs& in, const BenchOptions& o,
                   Progress& progress, size_t index) {
    Result res;
    res.config = c;
    res.flops = flops(c);
    res.timing = "resident";
    std::string error;
    if (!prepare(in, c, error)) {
        res.reason = error;
        return res;
    }
    const LearnedSketchFile learned(c, o.seed);
    const PskAttentionCreateInfo ai = attentionInfo(c, o.seed, c.causal, learned);
    PskAttention attn = nullptr;
    PskResult r = pskCreateAttention(dev.context(), &ai, &attn);
    if (r != PSK_SUCCESS) {
        res.reason = sink.describe(r);
        return res;
    }
    const std::string plan = planText(attn);
    res.plan = planSummary(plan);
    res.fusedQuery = planFusesQuery(plan);
    res.zOperandBytes = planZOperandBytes(plan, c);
    res.zWalk = planZWalks(plan, c);
    std::vector<uint32_t> cu{0};
    for (uint32_t l : c.varlen) cu.push_back(cu.back() + l);
    // A packed batch (--varlen): batchSize sequences whose offsets cuSeqlens gives, tensors of
    // batch 1; its workspace is that of batch 1 at the total length.
    const uint32_t batch = c.varlen.empty() ? c.batch : uint32_t(c.varlen.size());
    PskWorkspaceLayoutInfo li{};
    li.batchSize = c.varlen.empty() ? c.batch : 1;
    li.seqLen = c.n;
    uint32_t wsCount = 0;
    std::vector<uint64_t> wsSizes;
    r = pskGetWorkspaceLayout(attn, &li, &wsCount, nullptr);
    if (r == PSK_SUCCESS) {
        wsSizes.resize(wsCount);
        r = pskGetWorkspaceLayout(attn, &li, &wsCount, wsSizes.data());
    }
    if (r != PSK_SUCCESS) {
        res.reason = sink.describe(r);
        pskDestroyAttention(attn);
        return res;
    }
    ResidentDevice::Buffer q, k, v, out;
    std::vector<ResidentDevice::Buffer> ws(wsCount);
    VkCommandBuffer cb = VK_NULL_HANDLE;
    auto cleanup = [&] {
        dev.waitIdle();
        if (cb) dev.freeCommandBuffer(cb);
        for (auto* b : {&q, &k, &v, &out}) dev.destroy(*b);
        for (auto& b : ws) dev.destroy(b);
        pskDestroyAttention(attn);
    };
    const std::vector<uint8_t>* host[3] = {&in.qb, &in.kb, &in.vb};
    ResidentDevice::Buffer* device[3] = {&q, &k, &v};
    for (int i = 0; i < 3 && error.empty(); ++i) error = dev.create(*device[i], host[i]->size(), false);
    if (error.empty()) error = dev.create(out, in.ob.size(), false);
    for (uint32_t i = 0; i < wsCount && error.empty(); ++i) error = dev.create(ws[i], wsSizes[i], false);
    // The upload, once: through one host-visible staging buffer, tensor by tensor.
    if (error.empty()) error = dev.upload({{host[0], device[0]}, {host[1], device[1]}, {host[2], device[2]}});
    // The command buffer every run submits.
    if (error.empty()) error = dev.begin(cb);
    if (error.empty()) {
        dev.fullBarrier(cb);  // orders this run after the previous one (and after the upload)
        dev.timestamps(cb, true);
        PskCmdForwardInfo fi{};
        fi.batchSize = batch;
        fi.seqLen = c.n;
        fi.q = {q.buffer, 0, q.size, nullptr};
        fi.k = {k.buffer, 0, k.size, nullptr};
        fi.v = {v.buffer, 0, v.size, nullptr};
        fi.out = {out.buffer, 0, out.size, nullptr};
        std::vector<PskWorkspaceRange> ranges;
        ResidentDevice::bindWorkspaces(fi, ws, ranges);
        if (!c.varlen.empty()) fi.cuSeqlens = cu.data();
        r = pskCmdAttentionForward(attn, cb, &fi);
        if (r != PSK_SUCCESS) error = "pskCmdAttentionForward: " + sink.describe(r);
        dev.timestamps(cb, false);
        if (!dev.end(cb) && error.empty()) error = "vkEndCommandBuffer failed";
    }
    const std::string what = describe(c) + " resident";
    if (error.empty()) {
        const auto w0 = std::chrono::steady_clock::now();
        for (uint32_t run = 0; error.empty() && (run < o.warmup || msSince(w0) < o.warmupMs); ++run) {
            progress.show(index, what + " warm-up", run + 1, std::max(o.warmup, run + 1));
            error = dev.submitWait(cb);
            res.warmupRuns = run + 1;
        }
        res.warmupMs = msSince(w0);
    }
    res.timedStartUnix = unixNow();
    for (uint32_t run = 0; error.empty() && run < o.runs; ++run) {
        progress.show(index, what, run + 1, o.runs);
        error = dev.submitWait(cb);
        if (!error.empty()) break;
        const double ms = dev.elapsedMs();
        if (ms < 0) error = "vkGetQueryPoolResults failed";
        else res.samplesMs.push_back(ms);
    }
    res.timedEndUnix = unixNow();
    uint64_t wsBytes = 0;
    for (uint64_t b : wsSizes) wsBytes += b;
    cleanup();
    if (!error.empty()) {
        res.reason = error;
        res.samplesMs.clear();
        return res;
    }
    res.ok = true;
    res.gpu = summarize(res.samplesMs);
    res.workspaceBytes = wsBytes;
    // The host-form calls right after (the GPU is warm): stage times and the host form's median.
    if (o.hostRuns > 0 && hostCtx) {
        BenchOptions ho = o;
        ho.warmup = 0;
        ho.warmupMs = 0;
        ho.runs = o.hostRuns;
        const Result h = runOne(hostCtx, sink, c, in, ho, progress, index);
        res.hostOk = h.ok;
        res.hostPlan = h.plan;
        if (h.ok) {
            res.host = h.gpu;
            for (uint32_t st = 0; st < PSK_FORWARD_STAGE_COUNT; ++st) {
                res.stageSamplesMs[st] = h.stageSamplesMs[st];
                res.stageMedianMs[st] = h.stageMedianMs[st];
            }
        } else {
            res.hostReason = h.reason;
        }
    }
    return res;
}

/** Prefills `state` with the configuration's L random tokens, state only (out = NULL): its wall
 * time and the state's bytes into `res`. */
PskResult prefillStateOnly(PskDecodeState state, const Config& c, const Inputs& in, Result& res) {
    PskDecodePrefillInfo pi{};
    pi.batchSize = c.batch;
    pi.seqLen = c.n;
    pi.q = in.qb.data();
    pi.k = in.kb.data();
    pi.v = in.vb.data();
    pi.out = nullptr;  // state only
    pi.qBytes = in.qb.size();
    pi.kBytes = in.kb.size();
    pi.vBytes = in.vb.size();
    const auto t0 = std::chrono::steady_clock::now();
    PskResult r = pskDecodePrefillHost(state, &pi);
    res.prefillWallMs = msSince(t0);
    if (r == PSK_SUCCESS) r = pskGetDecodeStateSize(state, &res.stateBytes);
    return r;
}

/** `count` random tokens of a decode step in the attention's storage type (uint16_t bit patterns
 * for f16 and bf16), back to back; the byte sizes are one token's (q, k, v and the output row). */
struct DecodeTokens {
    std::vector<uint8_t> q, k, v;
    size_t qBytes = 0, kBytes = 0, vBytes = 0, outBytes = 0;
};
DecodeTokens decodeTokens(const Config& c, uint32_t count) {
    const size_t qn = size_t(c.batch) * c.heads * c.headDim, kn = size_t(c.batch) * c.kvHeads * c.headDim,
                 vn = size_t(c.batch) * c.kvHeads * c.valueDim, on = size_t(c.batch) * c.heads * c.valueDim;
    std::vector<float> q(qn * count), k(kn * count), v(vn * count);
    fillRandom(q, 11);
    fillRandom(k, 12);
    fillRandom(v, 13);
    const size_t e = c.dtype == PSK_DATA_TYPE_FLOAT32 ? 4 : 2;
    return {psk::storage::encode(q, c.dtype), psk::storage::encode(k, c.dtype), psk::storage::encode(v, c.dtype), qn * e, kn * e, vn * e,
            on * e};
}

// Decode mode: prefill a state to L tokens (state only), then time single steps.
Result runDecodeOne(PskContext ctx, MessageSink& sink, const Config& c, Inputs& in, const BenchOptions& o, Progress& progress,
                    size_t index) {
    Result res;
    res.config = c;
    std::string error;
    if (!prepare(in, c, error)) {
        res.reason = error;
        return res;
    }
    const LearnedSketchFile learned(c, o.seed);
    const PskAttentionCreateInfo ai = attentionInfo(c, o.seed, true, learned);  // decoding is causal
    PskAttention attn = nullptr;
    PskResult r = pskCreateAttention(ctx, &ai, &attn);
    if (r != PSK_SUCCESS) {
        res.reason = sink.describe(r);
        return res;
    }
    const uint32_t total = o.warmup + o.steps;
    PskDecodeStateCreateInfo si{};
    si.batchSize = c.batch;
    si.capacity = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? c.n + total : 0;
    PskDecodeState state = nullptr;
    r = pskCreateDecodeState(attn, &si, &state);
    const std::string what = describe(c);
    if (r == PSK_SUCCESS) {
        progress.show(index, what + " prefill", 0, total);
        r = prefillStateOnly(state, c, in, res);
    }
    if (r != PSK_SUCCESS) {
        res.reason = sink.describe(r);
    } else {
        // A few distinct random tokens, cycled (the step time does not depend on the values).
        const uint32_t distinct = 8;
        const DecodeTokens tok = decodeTokens(c, distinct);
        std::vector<uint8_t> out(tok.outBytes);
        PskForwardStats stats{};
        if (o.warmup == 0) res.timedStartUnix = unixNow();
        for (uint32_t step = 0; step < total; ++step) {
            progress.show(index, what, step + 1, total);
            const uint32_t t = step % distinct;
            PskDecodeStepInfo di{tok.q.data() + t * tok.qBytes, tok.k.data() + t * tok.kBytes, tok.v.data() + t * tok.vBytes, out.data(),
                                 tok.qBytes, tok.kBytes, tok.vBytes, tok.outBytes, &stats};
            r = pskDecodeStepHost(state, &di);
            if (r != PSK_SUCCESS) {
                res.reason = sink.describe(r);
                res.samplesMs.clear();
                break;
            }
            if (step >= o.warmup) res.samplesMs.push_back(stats.gpuMilliseconds);
            res.workspaceBytes = stats.workspaceBytes;
            // The timed steps' wall span, for the SM clock log (gpu_run's decode step): one step
            // every host round trip leaves the GPU mostly idle, and its clock follows.
            if (step + 1 == o.warmup) res.timedStartUnix = unixNow();
        }
        res.timedEndUnix = unixNow();
        res.warmupRuns = o.warmup;
    }
    pskDestroyDecodeState(state);
    pskDestroyAttention(attn);
    if (res.reason.empty()) {
        res.ok = true;
        res.gpu = summarize(res.samplesMs);
    }
    return res;
}

/**
 * Decode mode, device-resident (--decode --resident): the steps of a state prefilled to L tokens,
 * recorded back to back into one command buffer (pskCmdDecodeStep on device buffers holding one
 * token, uploaded once) with a timestamp after each, submitted once; the per-step times are the
 * differences. Before it, at least o.warmup steps and o.warmupMs of steps on a second state of the
 * same attention (prefilled to nothing; a softmax one reset when its cache fills), in command
 * buffers of up to 256 steps, so that the GPU's clocks are up and stay up: one step per host round
 * trip (the host form) leaves a GPU idle between steps and its clock falls.
 */
Result runDecodeResident(ResidentDevice& dev, MessageSink& sink, const Config& c, Inputs& in, const BenchOptions& o, Progress& progress,
                         size_t index) {
    Result res;
    res.config = c;
    res.timing = "resident";
    std::string error;
    if (!prepare(in, c, error)) {
        res.reason = error;
        return res;
    }
    const LearnedSketchFile learned(c, o.seed);
    const PskAttentionCreateInfo ai = attentionInfo(c, o.seed, true, learned);  // decoding is causal
    PskAttention attn = nullptr;
    PskResult r = pskCreateAttention(dev.context(), &ai, &attn);
    if (r != PSK_SUCCESS) {
        res.reason = sink.describe(r);
        return res;
    }
    constexpr uint32_t kWarmBurst = 256, kWarmCapacity = 4096;
    const bool softmax = c.kind == PSK_ATTENTION_KIND_SOFTMAX;
    PskDecodeState state = nullptr, warm = nullptr;
    PskDecodeStateCreateInfo si{};
    si.batchSize = c.batch;
    si.capacity = softmax ? c.n + o.steps : 0;
    r = pskCreateDecodeState(attn, &si, &state);
    if (r == PSK_SUCCESS) {
        si.capacity = softmax ? kWarmCapacity : 0;
        r = pskCreateDecodeState(attn, &si, &warm);
    }
    const std::string what = describe(c) + " resident";
    if (r == PSK_SUCCESS) {
        progress.show(index, what + " prefill", 0, o.steps);
        r = prefillStateOnly(state, c, in, res);
    }
    if (r != PSK_SUCCESS) error = sink.describe(r);
    // One token (the step time does not depend on the values), in device buffers.
    const DecodeTokens tok = decodeTokens(c, 1);
    ResidentDevice::Buffer q, k, v, out;
    VkCommandBuffer timed = VK_NULL_HANDLE;
    if (error.empty()) error = dev.create(q, tok.qBytes, false);
    if (error.empty()) error = dev.create(k, tok.kBytes, false);
    if (error.empty()) error = dev.create(v, tok.vBytes, false);
    if (error.empty()) error = dev.create(out, tok.outBytes, false);
    if (error.empty()) error = dev.upload({{&tok.q, &q}, {&tok.k, &k}, {&tok.v, &v}});
    if (error.empty()) error = dev.reserveSeries(o.steps + 1);
    PskCmdDecodeStepInfo di{};
    di.q = {q.buffer, 0, q.size, nullptr};
    di.k = {k.buffer, 0, k.size, nullptr};
    di.v = {v.buffer, 0, v.size, nullptr};
    di.out = {out.buffer, 0, out.size, nullptr};
    // The timed steps, recorded first (they may be: each runs once, in order, and nothing else
    // touches the state until they have), so that the warm-up's last burst is followed at once.
    if (error.empty()) error = dev.begin(timed);
    if (error.empty()) {
        dev.fullBarrier(timed);
        dev.resetSeries(timed, o.steps + 1);
        dev.seriesMark(timed, 0);
        for (uint32_t step = 0; error.empty() && step < o.steps; ++step) {
            if (PskResult rr = pskCmdDecodeStep(state, timed, &di); rr != PSK_SUCCESS) error = "pskCmdDecodeStep: " + sink.describe(rr);
            dev.seriesMark(timed, step + 1);
        }
        if (!dev.end(timed) && error.empty()) error = "vkEndCommandBuffer failed";
    }
    // The warm-up: one host-form step on the second state (its statistics give the step's
    // scratch), then bursts of steps.
    uint32_t warmSteps = 0, warmPosition = 0;
    if (error.empty()) {
        std::vector<uint8_t> hostOut(tok.outBytes);
        PskForwardStats stats{};
        PskDecodeStepInfo hi{tok.q.data(), tok.k.data(), tok.v.data(), hostOut.data(), tok.qBytes, tok.kBytes, tok.vBytes, hostOut.size(), &stats};
        if (PskResult rr = pskDecodeStepHost(warm, &hi); rr != PSK_SUCCESS) error = "pskDecodeStepHost: " + sink.describe(rr);
        res.workspaceBytes = stats.workspaceBytes;
        warmPosition = 1;
    }
    const auto w0 = std::chrono::steady_clock::now();
    while (error.empty() && (warmSteps < o.warmup || msSince(w0) < o.warmupMs)) {
        progress.show(index, what + " warm-up", warmSteps, std::max(o.warmup, warmSteps + 1));
        if (softmax && warmPosition + kWarmBurst > kWarmCapacity) {
            for (uint32_t b = 0; error.empty() && b < c.batch; ++b)
                if (PskResult rr = pskResetDecodeSequence(warm, b); rr != PSK_SUCCESS) error = "pskResetDecodeSequence: " + sink.describe(rr);
            warmPosition = 0;
        }
        VkCommandBuffer cb = VK_NULL_HANDLE;
        if (error.empty()) error = dev.begin(cb);
        if (error.empty()) {
            dev.fullBarrier(cb);
            for (uint32_t step = 0; error.empty() && step < kWarmBurst; ++step)
                if (PskResult rr = pskCmdDecodeStep(warm, cb, &di); rr != PSK_SUCCESS) error = "pskCmdDecodeStep: " + sink.describe(rr);
            if (error.empty()) error = dev.endSubmitWait(cb);
        }
        if (cb) dev.freeCommandBuffer(cb);
        pskResetDecodeCommandDescriptors(warm);
        warmSteps += kWarmBurst;
        warmPosition += kWarmBurst;
    }
    res.warmupRuns = warmSteps;
    res.warmupMs = msSince(w0);
    if (error.empty()) {
        progress.show(index, what, 0, o.steps);
        res.timedStartUnix = unixNow();
        error = dev.submitWait(timed);
        res.timedEndUnix = unixNow();
        if (error.empty()) error = dev.seriesMs(o.steps + 1, res.samplesMs);
    }
    dev.waitIdle();
    if (timed) dev.freeCommandBuffer(timed);
    for (auto* b : {&q, &k, &v, &out}) dev.destroy(*b);
    pskDestroyDecodeState(warm);
    pskDestroyDecodeState(state);
    pskDestroyAttention(attn);
    if (!error.empty()) {
        res.reason = error;
        res.samplesMs.clear();
        return res;
    }
    res.ok = true;
    res.gpu = summarize(res.samplesMs);
    return res;
}

void printDecodeHeader() {
    std::printf("%-34s %7s %10s %10s %10s %10s %13s %12s\n", "configuration", "context", "median ms", "mean ms", "min ms", "max ms",
                "state bytes", "prefill s");
}

void printDecodeRow(const Result& r) {
    std::string what = describe(r.config);
    what = what.substr(0, what.find(" n="));
    if (!r.ok) {
        std::printf("%-34s %7u skipped: %s\n", what.c_str(), r.config.n, r.reason.c_str());
    } else {
        std::printf("%-34s %7u %10.3f %10.3f %10.3f %10.3f %13llu %12.2f\n", what.c_str(), r.config.n, r.gpu.medianMs, r.gpu.meanMs,
                    r.gpu.minMs, r.gpu.maxMs, static_cast<unsigned long long>(r.stateBytes), r.prefillWallMs * 1e-3);
    }
    std::fflush(stdout);
}

}  // namespace

int runBench(int argc, char** argv) {
    BenchOptions o;
    try {
        bool help = false;
        o = parseOptions(argc, argv, &help);
        if (help) {
            benchUsage(stdout);
            return 0;
        }
    } catch (const UsageError& e) {
        std::fprintf(stderr, "psk bench: %s (see psk bench --help)\n", e.message.c_str());
        return 2;
    }

    RunInfo info;
    info.command = "psk bench";
    for (int i = 0; i < argc; ++i) info.command += std::string(" ") + argv[i];
    info.startedUtc = utcNow();
    info.runs = int(o.decode ? o.steps : o.runs);
    info.warmup = int(o.warmup);
    info.warmupMs = o.warmupMs;
    info.resident = o.resident;
    info.hostRuns = int(o.hostRuns);
    info.decode = o.decode;
    const uint32_t version = pskGetVersion();
    info.libraryVersion = std::to_string(PSK_VERSION_MAJOR(version)) + "." + std::to_string(PSK_VERSION_MINOR(version)) + "." +
                          std::to_string(PSK_VERSION_PATCH(version));

    MessageSink sink;
    PskContextCreateInfo ci{};
    ci.device = o.device.empty() ? nullptr : o.device.c_str();
    ci.messageCallback = MessageSink::callback;
    ci.messageUserData = &sink;
    PskContext ctx = nullptr;
    const PskResult cr = pskCreateContext(&ci, &ctx);
    if (cr != PSK_SUCCESS) {
        std::fprintf(stderr, "psk bench: cannot create a context: %s\n", sink.describe(cr).c_str());
        return 1;
    }
    PskDeviceInfo dev{};
    pskGetDeviceInfo(ctx, &dev);
    info.deviceName = dev.name;
    info.driverName = dev.driverName;
    info.driverInfo = dev.driverInfo;
    info.deviceType = dev.deviceType;

    // --resident: psk's own device for the timed runs (the library's own context stays for the
    // host-form runs that give the stage times).
    std::unique_ptr<ResidentDevice> resident;
    if (o.resident) {
        resident = std::make_unique<ResidentDevice>();
        const std::string why = resident->open(dev, sink);
        if (!why.empty()) {
            std::fprintf(stderr, "psk bench: --resident: %s\n", why.c_str());
            resident.reset();
            pskDestroyContext(ctx);
            return 1;
        }
    }

    const std::vector<Config> configs = makeConfigs(o);
    if (!o.quiet) {
        std::printf("device: %s (%s %s)\n", dev.name, dev.driverName, dev.driverInfo);
        if (o.decode) {
            if (o.resident)
                std::printf("%zu configuration(s), decode, device-resident: state-only prefill to each context, then at least %u "
                            "warm-up step(s) and %d ms of them on a second state, then %u timed steps in one command buffer; GPU "
                            "times per step (timestamps between steps)\n\n",
                            configs.size(), o.warmup, int(o.warmupMs), o.steps);
            else
                std::printf("%zu configuration(s), decode: state-only prefill to each context, then %u warm-up + %u timed step(s); "
                            "GPU times per step\n\n",
                            configs.size(), o.warmup, o.steps);
            printDecodeHeader();
        } else {
            std::printf("%zu configuration(s), %s, %u warm-up run(s)%s + %u timed run(s) each; GPU times%s\n\n", configs.size(),
                        o.causal ? "causal" : "full", o.warmup,
                        o.warmupMs > 0 ? (" and at least " + std::to_string(int(o.warmupMs)) + " ms").c_str() : "", o.runs,
                        o.resident ? (" of device-resident calls (pskCmdAttentionForward on buffers uploaded once); stage times from " +
                                      std::to_string(o.hostRuns) + " host-form call(s) right after")
                                         .c_str()
                                   : " of host-form calls (pskAttentionForwardHost)");
            printHeader();
        }
    }
    Progress progress(stderrIsTerminal(), configs.size());
    std::vector<Result> results;
    Inputs inputs;
    for (size_t i = 0; i < configs.size(); ++i) {
        results.push_back(o.decode && resident ? runDecodeResident(*resident, sink, configs[i], inputs, o, progress, i)
                          : o.decode           ? runDecodeOne(ctx, sink, configs[i], inputs, o, progress, i)
                          : resident ? runResident(*resident, ctx, sink, configs[i], inputs, o, progress, i)
                                     : runOne(ctx, sink, configs[i], inputs, o, progress, i));
        progress.clear();
        if (!o.quiet) o.decode ? printDecodeRow(results.back()) : printRow(results.back());
    }
    inputs = Inputs{};
    resident.reset();
    pskDestroyContext(ctx);

    if (!o.peer.empty()) {
        if (!o.quiet) std::fprintf(stderr, "running the torch peer (tools/torch_peer.py) on the sweep's shapes...\n");
        runTorchPeer(results, int(o.runs), int(o.warmup), info.peer, stderrIsTerminal());
        if (!info.peer.available) {
            std::fprintf(stderr, "psk bench: peer torch unavailable: %s\n", info.peer.reason.c_str());
        } else if (!o.quiet) {
            std::printf("\npeer: torch %s scaled_dot_product_attention, CPU float32, %d thread(s), wall time\n",
                        info.peer.version.c_str(), info.peer.threads);
            std::printf("%-34s %6s %10s %12s %10s\n", "configuration", "n", "median ms", "torch ms", "speedup");
            for (const Result& r : results) {
                std::string what = describe(r.config);
                what = what.substr(0, what.find(" n="));
                if (!r.peerOk) {
                    std::printf("%-34s %6u %10s peer skipped: %s\n", what.c_str(), r.config.n, "", r.peerReason.c_str());
                } else if (!r.ok) {
                    std::printf("%-34s %6u %10s %12.3f %10s\n", what.c_str(), r.config.n, "-", r.peer.medianMs, "-");
                } else {
                    std::printf("%-34s %6u %10.3f %12.3f %9.3fx\n", what.c_str(), r.config.n, r.gpu.medianMs, r.peer.medianMs,
                                r.gpu.medianMs > 0 ? r.peer.medianMs / r.gpu.medianMs : 0.0);
                }
            }
        }
    }

    int status = 0;
    std::string error;
    const std::string jsonText = toJson(info, results);
    if (!o.json.empty() && !writeText(o.json, jsonText, error)) {
        std::fprintf(stderr, "psk bench: %s\n", error.c_str());
        status = 1;
    }
    if (!o.csv.empty() && !writeText(o.csv, toCsv(info, results), error)) {
        std::fprintf(stderr, "psk bench: %s\n", error.c_str());
        status = 1;
    }
    if (!o.plot.empty()) {
        // The plot script reads the JSON: the --json file when there is one, else a temporary copy.
        std::string jsonPath = o.json;
        bool temporary = false;
        if (jsonPath.empty() || status != 0) {
            jsonPath = o.plot + ".json.tmp" + std::to_string(getpid());
            temporary = true;
            if (!writeText(jsonPath, jsonText, error)) {
                std::fprintf(stderr, "psk bench: %s\n", error.c_str());
                return 1;
            }
        }
        const char* envPython = std::getenv("PSK_BENCH_PYTHON");
        const std::string python = envPython && *envPython ? envPython : access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
        const int rc = runProcess({python, toolsDir() + "/bench_plot.py", jsonPath, o.plot}, error);
        if (temporary) std::remove(jsonPath.c_str());
        if (rc != 0) {
            std::fprintf(stderr, "psk bench: no plot written: %s\n",
                         rc < 0 ? error.c_str()
                         : rc == 3 ? "matplotlib is missing (run tools/install_bench_deps.sh)"
                                   : ("tools/bench_plot.py exited with status " + std::to_string(rc)).c_str());
            status = 1;
        }
    }
    return status;
}
