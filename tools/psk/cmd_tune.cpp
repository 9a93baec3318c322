// psk tune: measures the planner's tunable choices on this device and writes a tuning table
// (lib/forward/tuning_table.hpp; docs/PERFORMANCE.md, "Tuning").
//
// Shapes that share a shape class (h, dv, r, p, storage type, causal, local exact, sketch) are
// tuned together: the objective is the sum of their median GPU times. The parameters are those the
// plans name as tunable ("; tunable: NAME=VALUE" in pskGetAttentionPlan), searched one at a time
// around the model's value (coordinate descent): each candidate goes into a table of its own that
// the library reads through PSK_TUNING_TABLE, the attention is created again (the planner checks
// that the candidate fits the device, and psk tune skips it when the plan says it was ignored), run
// on the same inputs as the model's configuration, and kept only where its output agrees with the
// model's within the conformance threshold of the storage type and its time beats the best so far
// by --min-gain. The search stops when --budget-s is spent; what it did not reach keeps the
// model's choice. The table gets one entry per parameter that changed, the measured medians as
// comments, and is parsed back before it is reported written.
//
// The parameters are searched in the order of kSearchOrder below (or --params's), not in the
// enum's: a GPU check gives psk tune tens of seconds, a few candidates at 32k and 128k tokens, and
// the first parameters tried are the only ones measured.
//
// The timed calls are device-resident, as psk bench --resident's (resident_device.hpp): q, k and v
// uploaded once per shape into psk's own device, one command buffer with pskCmdAttentionForward
// between two timestamps submitted back to back, after at least --warmup calls and --warmup-ms;
// the output is read back once per candidate for the comparison. Without that device (no Vulkan
// loader of its own, --host-form) they are host-form calls (pskAttentionForwardHost) on the
// library's own device, their GPU time from PskForwardStats::gpuMilliseconds: each such call also
// moves q, k, v and the output across PCIe, ~1 GB at 128k tokens and 16 heads in float16.
#include <polysketch/polysketch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bench.hpp"
#include "cli_util.hpp"
#include "commands.hpp"
#include "resident_device.hpp"
#include "forward/tuning_table.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/storage_types.hpp"
#include "util/error.hpp"

namespace {

using psk::TuningParameter;
using psk::cli::MessageSink;
using psk::cli::UsageError;
using psk::cli::utcNow;

void tuneUsage(FILE* out) {
    std::fprintf(out,
                 "usage: psk tune --shapes LIST --out FILE [--kind polysketch|softmax|polynomial] [--budget-s S]\n"
                 "                [--heads H] [--batch B] [--dtype f16|bf16|f32] [--degree 4] [--block-size 256] [--no-local-exact]\n"
                 "                [--full] [--runs N] [--warmup N] [--warmup-ms MS] [--min-gain F] [--host-form] [--device D]\n"
                 "\n"
                 "Times the tunable choices of the planner (the plan's \"tunable:\" values: polysketch's stages,\n"
                 "or the FlashAttention-2 baseline's tiling with --kind softmax or polynomial) on\n"
                 "this device, one parameter at a time around the model's choice, and writes a tuning table\n"
                 "(docs/PERFORMANCE.md, \"Tuning\") with one entry per choice that a measurement improved.\n"
                 "\n"
                 "  --kind K            polysketch (default), softmax or polynomial (the 16-bit baselines)\n"
                 "  --shapes LIST       comma list of N[:hH][:rR][:dvD], N with an optional k (x 1024):\n"
                 "                      32k:h64,128k:h64,32k:h128 (h 64, r 32, dv = h by default)\n"
                 "  --out FILE          the table to write (also when nothing improved: then no entries)\n"
                 "  --budget-s S        stop searching after S seconds (default 60); the rest keeps the model's choices\n"
                 "  --params LIST       comma list of the parameters to search, in that order (default: every\n"
                 "                      one the plans name, those likeliest to change the time first)\n"
                 "  --list              time the model's configuration only, and print the search order and\n"
                 "                      each parameter's candidates (what a budget would be spent on)\n"
                 "  --heads H           query and key/value heads (default 16); --batch B (default 1)\n"
                 "  --dtype T           storage type (default f16)\n"
                 "  --degree P          polynomial degree (default 4); --block-size B (default 256)\n"
                 "  --no-local-exact    the sketched local part (default: exact)\n"
                 "  --full              non-causal attention (default: causal)\n"
                 "  --runs N            timed calls per candidate and shape (default 5)\n"
                 "  --warmup N          untimed calls before them (default 2), and at least\n"
                 "  --warmup-ms MS      that long (default 1000: a GPU's clock drops while pipelines are made)\n"
                 "  --min-gain F        a candidate must beat the best time by this fraction (default 0.02;\n"
                 "                      a negative F keeps slower ones too: for tests of the table's path)\n"
                 "  --host-form         time host-form calls (each moves q, k, v and the output across PCIe)\n"
                 "                      instead of device-resident ones (the default)\n"
                 "  --device D          the device (as PSK_DEVICE)\n"
                 "\n"
                 "Each candidate's output is compared with the model's configuration's on the same inputs: one\n"
                 "that disagrees by more than the conformance threshold of the storage type is rejected and\n"
                 "reported. Apply the table with PSK_TUNING_TABLE=FILE or PskContextCreateInfo::tuningTable,\n"
                 "or commit it under tuning/devices/ to build it into the library.\n");
}

struct Shape {
    uint32_t n = 0, headDim = 64, sketch = 32, valueDim = 0;
};

struct TuneOptions {
    std::vector<Shape> shapes;
    std::string out, device;
    double budgetS = 60;
    uint32_t heads = 16, batch = 1, degree = 4, blockSize = 256;
    PskDataType dtype = PSK_DATA_TYPE_FLOAT16;
    bool localExact = true, causal = true;
    PskAttentionKind kind = PSK_ATTENTION_KIND_POLYSKETCH;
    uint32_t runs = 5, warmup = 2;
    // At least 1 s of warm-up per candidate and shape, as the bench: the H200's SM clock fell from
    // 1980 to ~600 MHz within 2 s of idle (pipeline creation between candidates) and 200 ms did not
    // bring psk tune's times to the bench's (47.2 against 27.3 ms for the same softmax call).
    double warmupMs = 1000, minGain = 0.02;
    bool resident = true;  // --host-form: false
    std::vector<TuningParameter> params;  // --params: the parameters to search, in order (empty: kSearchOrder)
    bool list = false;                    // --list: the order and the candidates, nothing timed but the model's configuration
};

// The default order of the search, the likeliest gains first (docs/PERFORMANCE.md, "Tuning"): the
// row groups of the cooperative output and of the block states (on an H200 both sit at 211-255
// registers with 128 invocations; SG_M sets the workgroup size, which bounds the registers a driver
// may give an invocation, and, in the output, the rows that share each staging of a Z chunk and
// key tile), whether the output's Z is packed once per block (the other way to share its
// staging), whether the packed Z comes from the walk that takes the prefix and packs in one pass
// (the scan's float32 prefix never written: docs/MODEL.md, "The floor of each architecture"), the
// block states' row groups, the output's loads in flight, then whether the cooperative output runs at all
// (against the best of those), which generic output kernel (the row kernel or the register tiles:
// the one a table that turns the cooperative output off runs), the cooperative output's chunks, the feature map, the baselines' tilings (the FP32
// kernel's before the one-row kernel is tried against the best of them: a table keeps that tiling
// for the forwards continuing a softmax KV cache, which the one-row kernel cannot run), the float32
// path, whether the generic kernels stage one batch of loads at a time (the registers a whole
// staged tile may hold), and last the walking block states (on an H200 slower at every size
// measured, and the most expensive candidate to time). A GPU check's budget reaches about ten candidates at 32k.
constexpr TuningParameter kSearchOrder[] = {
    TuningParameter::OutputSgM,          TuningParameter::OutputZPacked,     TuningParameter::PrefixPackMinGroups, TuningParameter::StatesSgM,
    TuningParameter::OutputStageBatch,   TuningParameter::OutputCooperative,  TuningParameter::OutputGenericRows, TuningParameter::OutputFeatChunk,
    TuningParameter::OutputKeyTile,
    TuningParameter::OutputWn,           TuningParameter::FeaturesTile,      TuningParameter::FeaturesRows,
    TuningParameter::FeaturesLearnedTile, TuningParameter::BaselinesTile,    TuningParameter::BaselinesFp32Tile,
    TuningParameter::BaselinesFp32Rows,  TuningParameter::Float32Cooperative, TuningParameter::GenericStageRolled,
    TuningParameter::StatesWalkMinGroups,
};
static_assert(sizeof kSearchOrder / sizeof kSearchOrder[0] == psk::kTuningParameterCount, "every parameter has its place in the search");

/** The parameters of `model` in the order searched: --params's when given, else kSearchOrder's. */
std::vector<TuningParameter> searchOrder(const std::vector<TuningParameter>& requested, const std::map<TuningParameter, uint32_t>& model) {
    std::vector<TuningParameter> order;
    const std::vector<TuningParameter> all(std::begin(kSearchOrder), std::end(kSearchOrder));
    for (TuningParameter p : requested.empty() ? all : requested)
        if (model.count(p)) order.push_back(p);
    return order;
}

uint32_t countWithK(const std::string& text, const std::string& what) {
    std::string digits = text;
    uint64_t scale = 1;
    if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) {
        digits.pop_back();
        scale = 1024;
    }
    uint32_t v = 0;
    if (!psk::cli::parseUint32(digits, 1, 1u << 30, &v) || uint64_t(v) * scale > (1u << 30))
        throw UsageError{"--shapes: " + what + " '" + text + "' is not a count"};
    return uint32_t(v * scale);
}

std::vector<Shape> parseShapes(const std::string& list) {
    std::vector<Shape> shapes;
    for (const std::string& item : psk::cli::splitList(list)) {
        Shape s;
        size_t start = 0;
        bool first = true;
        while (start <= item.size()) {
            size_t end = item.find(':', start);
            if (end == std::string::npos) end = item.size();
            const std::string part = item.substr(start, end - start);
            start = end + 1;
            if (first) {
                s.n = countWithK(part, "length");
                first = false;
            } else if (part.rfind("dv", 0) == 0) {
                if (!psk::cli::parseUint32(part.substr(2), 1, 1024, &s.valueDim)) throw UsageError{"--shapes: bad '" + part + "'"};
            } else if (part.rfind("h", 0) == 0) {
                if (!psk::cli::parseUint32(part.substr(1), 1, 1024, &s.headDim)) throw UsageError{"--shapes: bad '" + part + "'"};
            } else if (part.rfind("r", 0) == 0) {
                if (!psk::cli::parseUint32(part.substr(1), 1, 1024, &s.sketch)) throw UsageError{"--shapes: bad '" + part + "'"};
            } else {
                throw UsageError{"--shapes: '" + part + "' is none of hH, rR, dvD"};
            }
        }
        if (!s.valueDim) s.valueDim = s.headDim;
        shapes.push_back(s);
    }
    if (shapes.empty()) throw UsageError{"--shapes needs at least one shape"};
    return shapes;
}

TuneOptions parseOptions(int argc, char** argv, bool* help) {
    TuneOptions o;
    psk::cli::ArgReader args(argc, argv);
    auto uint = [&](uint32_t lo, uint32_t hi) {
        const std::string v = args.value();
        uint32_t out = 0;
        if (!psk::cli::parseUint32(v, lo, hi, &out)) throw UsageError{args.name() + ": '" + v + "' is not in " + std::to_string(lo) + ".." + std::to_string(hi)};
        return out;
    };
    auto real = [&](double lo) {
        const std::string v = args.value();
        double out = 0;
        if (!psk::cli::parseDouble(v, &out) || !(out >= lo)) throw UsageError{args.name() + ": '" + v + "' is not a number >= " + std::to_string(lo)};
        return out;
    };
    bool shapes = false;
    while (args.next()) {
        const std::string& a = args.name();
        if (a == "--help" || a == "-h") {
            *help = true;
            return o;
        } else if (a == "--shapes") {
            o.shapes = parseShapes(args.value());
            shapes = true;
        } else if (a == "--out") {
            o.out = args.value();
        } else if (a == "--budget-s") {
            o.budgetS = real(0);
        } else if (a == "--heads") {
            o.heads = uint(1, 1024);
        } else if (a == "--batch") {
            o.batch = uint(1, 1024);
        } else if (a == "--dtype") {
            const std::string v = args.value();
            if (!psk::cli::parseDataType(v, &o.dtype)) throw UsageError{"--dtype: '" + v + "' is none of f32, f16, bf16"};
        } else if (a == "--kind") {
            const std::string v = args.value();
            if (v == "polysketch") o.kind = PSK_ATTENTION_KIND_POLYSKETCH;
            else if (v == "softmax") o.kind = PSK_ATTENTION_KIND_SOFTMAX;
            else if (v == "polynomial") o.kind = PSK_ATTENTION_KIND_POLYNOMIAL;
            else throw UsageError{"--kind: '" + v + "' is none of polysketch, softmax, polynomial"};
        } else if (a == "--degree") {
            o.degree = uint(2, 8);
        } else if (a == "--block-size") {
            o.blockSize = uint(1, 65536);
        } else if (a == "--no-local-exact") {
            args.flag();
            o.localExact = false;
        } else if (a == "--full") {
            args.flag();
            o.causal = false;
        } else if (a == "--runs") {
            o.runs = uint(1, 1000);
        } else if (a == "--warmup") {
            o.warmup = uint(0, 1000);
        } else if (a == "--warmup-ms") {
            o.warmupMs = real(0);
        } else if (a == "--min-gain") {
            o.minGain = real(-1e9);
        } else if (a == "--host-form") {
            o.resident = false;
        } else if (a == "--list") {
            args.flag();
            o.list = true;
        } else if (a == "--params") {
            o.params.clear();
            for (const std::string& name : psk::cli::splitList(args.value())) {
                const std::optional<TuningParameter> p = psk::tuningParameterNamed(name);
                if (!p) throw UsageError{"--params: '" + name + "' is not a tunable parameter (docs/PERFORMANCE.md, \"Tuning\")"};
                if (std::find(o.params.begin(), o.params.end(), *p) != o.params.end()) throw UsageError{"--params: '" + name + "' is named twice"};
                o.params.push_back(*p);
            }
            if (o.params.empty()) throw UsageError{"--params needs at least one parameter"};
        } else if (a == "--device") {
            o.device = args.value();
        } else {
            throw UsageError{"unknown option '" + args.raw() + "'"};
        }
    }
    if (!shapes) throw UsageError{"--shapes is required"};
    if (o.out.empty()) throw UsageError{"--out is required"};
    return o;
}

double msSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string fixed(double v, int digits = 3) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", digits, v);
    return text;
}

std::string shapeName(const Shape& s) {
    return "n=" + std::to_string(s.n) + " h=" + std::to_string(s.headDim) + " r=" + std::to_string(s.sketch) + " dv=" +
           std::to_string(s.valueDim);
}

/** The shape class a table entry keys: everything of the attention but the length. */
psk::TuningShape shapeClass(const TuneOptions& o, const Shape& s) {
    psk::TuningShape t;
    t.headDim = s.headDim;
    t.valueDim = s.valueDim;
    t.type = o.dtype;
    t.causal = o.causal;
    if (o.kind == PSK_ATTENTION_KIND_POLYSKETCH) {
        t.sketchLength = s.sketch;
        t.degree = o.degree;
        t.localExact = o.localExact;
        t.learned = false;
    } else if (o.kind == PSK_ATTENTION_KIND_POLYNOMIAL) {
        t.degree = o.degree;  // the baselines' classes: no sketch (tiled_forward.cpp keys them so)
    }
    return t;
}

PskAttentionCreateInfo attentionInfo(const TuneOptions& o, const Shape& s) {
    PskAttentionCreateInfo ai{};
    ai.kind = o.kind;
    if (o.kind != PSK_ATTENTION_KIND_POLYSKETCH) {
        ai.flags = o.causal ? PSK_ATTENTION_CAUSAL_BIT : 0;
        if (o.kind == PSK_ATTENTION_KIND_POLYNOMIAL) ai.degree = o.degree;
        ai.numQueryHeads = ai.numKeyValueHeads = o.heads;
        ai.headDim = s.headDim;
        ai.valueDim = s.valueDim;
        ai.dataType = o.dtype;
        return ai;
    }
    ai.flags = (o.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (o.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    ai.degree = o.degree;
    ai.numQueryHeads = o.heads;
    ai.numKeyValueHeads = o.heads;
    ai.headDim = s.headDim;
    ai.valueDim = s.valueDim;
    ai.dataType = o.dtype;
    ai.sketchSize = s.sketch;
    ai.blockSize = o.blockSize;
    ai.sketchSource = PSK_SKETCH_SOURCE_SEED;
    ai.seed = 1;
    return ai;
}

/** Seeded inputs of one shape, encoded in the storage type (values uniform with unit variance). */
struct Inputs {
    std::vector<uint8_t> q, k, v;
    size_t outBytes = 0;
};

std::vector<uint8_t> randomTensor(size_t count, uint64_t seed, PskDataType type) {
    std::vector<float> x(count);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (float& f : x) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        f = float((double(s >> 11) * (1.0 / 9007199254740992.0) * 2 - 1) * 1.7320508075688772);
    }
    return psk::storage::encode(x, type);
}

Inputs makeInputs(const TuneOptions& o, const Shape& s) {
    Inputs in;
    const size_t rows = size_t(o.batch) * o.heads * s.n;
    in.q = randomTensor(rows * s.headDim, 1, o.dtype);
    in.k = randomTensor(rows * s.headDim, 2, o.dtype);
    in.v = randomTensor(rows * s.valueDim, 3, o.dtype);
    in.outBytes = rows * s.valueDim * psk::storage::elementBytes(o.dtype);
    return in;
}

std::string planText(PskAttention attn) {
    size_t size = 0;
    if (pskGetAttentionPlan(attn, nullptr, &size) != PSK_SUCCESS || size == 0) return "";
    std::string text(size, '\0');
    if (pskGetAttentionPlan(attn, text.data(), &size) != PSK_SUCCESS) return "";
    text.resize(std::strlen(text.c_str()));
    return text;
}

/** The plan's "; tunable: NAME=VALUE ..." values (the first of each name). */
std::map<TuningParameter, uint32_t> tunableValues(const std::string& plan) {
    std::map<TuningParameter, uint32_t> values;
    size_t at = 0;
    while ((at = plan.find("; tunable:", at)) != std::string::npos) {
        at += 10;
        const size_t end = plan.find_first_of(";\n", at);
        const std::string list = plan.substr(at, end == std::string::npos ? std::string::npos : end - at);
        size_t p = 0;
        while (p < list.size()) {
            while (p < list.size() && list[p] == ' ') ++p;
            size_t q = list.find(' ', p);
            if (q == std::string::npos) q = list.size();
            const std::string word = list.substr(p, q - p);
            p = q;
            const size_t eq = word.find('=');
            if (eq == std::string::npos) continue;
            const auto param = psk::tuningParameterNamed(word.substr(0, eq));
            uint32_t v = 0;
            if (param && psk::cli::parseUint32(word.substr(eq + 1), 0, UINT32_MAX, &v) && !values.count(*param)) values[*param] = v;
        }
    }
    return values;
}

/** Whether the plan applied the candidate; else why not (the planner's reason, or that no kernel takes it). */
bool candidateApplied(const std::string& plan, TuningParameter p, uint32_t value, std::string* why) {
    const std::string name = psk::tuningParameterName(p);
    if (plan.find("; " + name + "=" + std::to_string(value) + " from tuning table") != std::string::npos) return true;
    const std::string ignored = "(" + name + " " + std::to_string(value);
    size_t at = plan.find(ignored);
    if (at != std::string::npos && (at = plan.find(") ignored: ", at)) != std::string::npos) {
        at += 11;
        const size_t end = plan.find_first_of(";\n", at);
        *why = "ignored by the planner: " + plan.substr(at, end == std::string::npos ? std::string::npos : end - at);
    } else {
        *why = "no kernel of this plan takes it";
    }
    return false;
}

/** Values to try for a parameter around the model's value (the planner rejects those that do not fit). */
std::vector<uint32_t> candidates(TuningParameter p, uint32_t model) {
    std::vector<uint32_t> all;
    switch (p) {
        case TuningParameter::StatesWalkMinGroups: all = {1, UINT32_MAX}; break;  // walk every call / never
        // Never first: at the headline shapes (B x Hkv = 16: 144 packing workgroups) the model's
        // 64 walks already, as 1 would; the scan and packing kernel are the informative candidate.
        case TuningParameter::PrefixPackMinGroups:
            all = {UINT32_MAX, 1};
            all.erase(std::remove(all.begin(), all.end(), model), all.end());
            return all;  // in this order, not the nearest first
        case TuningParameter::OutputFeatChunk:
        case TuningParameter::OutputKeyTile: all = {16, 32, 64, 128}; break;
        case TuningParameter::OutputWn: all = {1, 2, 3, 4, 5, 6, 8}; break;
        case TuningParameter::FeaturesTile: all = {0, 1, 2, 3}; break;
        case TuningParameter::FeaturesRows: all = {16, 32, 64, 128, 256}; break;
        case TuningParameter::BaselinesTile:
            // Entries of the FlashAttention-2 tiling table (tiled_forward.cpp), in the order tried:
            // the one-row-tile entries of 64 and 32 keys first (1 the model's on an H200, 3 its
            // table's), then two row tiles per subgroup (8-13: on the shared-memory data path
            // alone 9 and 11 tie with 1, docs/MODEL.md, but they hold twice the accumulators of
            // a kernel the H200's driver gave 207-242 registers, and AMD's compiler spills 120-349
            // VGPRs for them at h = 64), then the rest; an index says nothing about its
            // neighbours, so no distance sort.
            all = {1, 3, 4, 2, 9, 11, 10, 12, 13, 5, 6, 7, 0, 8};
            all.erase(std::remove(all.begin(), all.end(), model), all.end());
            return all;
        case TuningParameter::OutputCooperative:
        case TuningParameter::OutputZPacked:
        case TuningParameter::OutputGenericRows:
        case TuningParameter::GenericStageRolled:
        case TuningParameter::Float32Cooperative:
        case TuningParameter::BaselinesFp32Rows: all = {0, 1}; break;
        case TuningParameter::OutputSgM:
        case TuningParameter::StatesSgM:
            // The most row groups first: 8 (512 invocations, which bound a driver's registers to
            // 128 per invocation; the output also stages each Z chunk and key tile once per 128
            // rows) is the candidate docs/MODEL.md expects to gain on an H200, where the model's 2
            // sits at 211-255 registers; then 4. Not 1: fewer invocations leave the registers
            // unbounded and share less, and a GPU check's budget has room for ten candidates.
            all = {8, 4, 2};
            all.erase(std::remove(all.begin(), all.end(), model), all.end());
            return all;
        case TuningParameter::OutputStageBatch: all = {2, 4, 8, 16}; break;
        case TuningParameter::FeaturesLearnedTile: all = {0, 16, 32, 64}; break;
        case TuningParameter::BaselinesFp32Tile:
            // Entries of the FP32 FlashAttention-2 tiling table (tiled_forward.cpp), in index order.
            all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
            all.erase(std::remove(all.begin(), all.end(), model), all.end());
            return all;
        default: break;
    }
    all.erase(std::remove(all.begin(), all.end(), model), all.end());
    // Nearest to the model's value first: where the budget ends, the likeliest wins were tried.
    std::stable_sort(all.begin(), all.end(), [&](uint32_t a, uint32_t b) {
        auto distance = [&](uint32_t v) { return std::fabs(std::log2(double(std::max(v, 1u))) - std::log2(double(std::max(model, 1u)))); };
        return distance(a) < distance(b);
    });
    return all;
}

/** Whether a plan applied the candidate (else why not, into the string); null: time every plan. */
using AppliesFn = std::function<bool(const std::string& plan, std::string* why)>;

/** One shape's run: the median GPU time of the timed calls, and the output of the last. */
struct Run {
    bool ok = false;
    std::string error, plan;
    std::string ignored;  // the plan did not apply the candidate (why): nothing was timed
    double medianMs = 0;
    std::vector<float> out;
    double createMs = 0, callsMs = 0;  // wall time: the attention's creation (pipelines, self-test probes), the calls
};

/**
 * The calls of one candidate and shape: `call(&ms)` runs one, its GPU time into ms, and returns an
 * error or ""; at least o.warmup of them and o.warmupMs untimed, then o.runs timed. The median (on
 * success) and the calls' wall time into `run`.
 */
template <typename Call>
void timeCalls(const TuneOptions& o, Run& run, Call call) {
    std::vector<double> samples;
    double ms = 0;
    const auto w0 = std::chrono::steady_clock::now();
    for (uint32_t i = 0; run.error.empty() && (i < o.warmup || msSince(w0) < o.warmupMs); ++i) {
        const std::string e = call(&ms);
        if (!e.empty()) run.error = "warm-up call: " + e;
    }
    for (uint32_t i = 0; run.error.empty() && i < o.runs; ++i) {
        const std::string e = call(&ms);
        if (!e.empty()) run.error = "timed call: " + e;
        else samples.push_back(ms);
    }
    run.callsMs = msSince(w0);
    if (run.error.empty()) run.medianMs = psk::bench::summarize(samples).medianMs;
}

Run timeShape(PskContext ctx, MessageSink& sink, const TuneOptions& o, const Shape& s, const Inputs& in, bool keepOutput,
              const AppliesFn& applies = nullptr) {
    Run run;
    const PskAttentionCreateInfo ai = attentionInfo(o, s);
    PskAttention attn = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    const PskResult cr = pskCreateAttention(ctx, &ai, &attn);
    run.createMs = msSince(t0);
    if (cr != PSK_SUCCESS) {
        run.error = "pskCreateAttention: " + sink.describe(cr);
        return run;
    }
    run.plan = planText(attn);
    if (applies && !applies(run.plan, &run.ignored)) {
        pskDestroyAttention(attn);
        return run;
    }
    std::vector<uint8_t> out;
    try {
        out.assign(in.outBytes, 0);
    } catch (const std::bad_alloc&) {
        pskDestroyAttention(attn);
        run.error = "host memory: cannot allocate the output";
        return run;
    }
    PskForwardStats stats{};
    PskForwardHostInfo f{};
    f.batchSize = o.batch;
    f.seqLen = s.n;
    f.q = in.q.data();
    f.k = in.k.data();
    f.v = in.v.data();
    f.out = out.data();
    f.qBytes = in.q.size();
    f.kBytes = in.k.size();
    f.vBytes = in.v.size();
    f.outBytes = out.size();
    f.stats = &stats;
    timeCalls(o, run, [&](double* ms) {
        const PskResult r = pskAttentionForwardHost(attn, &f);
        *ms = stats.gpuMilliseconds;
        return r == PSK_SUCCESS ? std::string() : sink.describe(r);
    });
    pskDestroyAttention(attn);
    if (!run.error.empty()) return run;
    if (keepOutput) run.out = psk::storage::decode(out, o.dtype);
    run.ok = true;
    return run;
}

/**
 * Device-resident timing: psk's own device (psk::bench::ResidentDevice) and, per shape of the class
 * being tuned, q, k, v and the output in device buffers, uploaded once (drop() at the class's end).
 */
struct Resident {
    psk::bench::ResidentDevice dev;
    struct Shape {
        psk::bench::ResidentDevice::Buffer q, k, v, out;
    };
    std::map<const Inputs*, Shape> shapes;

    /** The shape's buffers, uploaded on first use; empty on success, else why not. */
    std::string buffers(const Inputs& in, Shape** out) {
        auto it = shapes.find(&in);
        if (it != shapes.end()) {
            *out = &it->second;
            return {};
        }
        Shape b;
        std::string error = dev.create(b.q, in.q.size(), false);
        if (error.empty()) error = dev.create(b.k, in.k.size(), false);
        if (error.empty()) error = dev.create(b.v, in.v.size(), false);
        if (error.empty()) error = dev.create(b.out, in.outBytes, false);
        if (error.empty()) error = dev.upload({{&in.q, &b.q}, {&in.k, &b.k}, {&in.v, &b.v}});
        if (!error.empty()) {
            for (auto* x : {&b.q, &b.k, &b.v, &b.out}) dev.destroy(*x);
            return error;
        }
        *out = &(shapes[&in] = b);
        return {};
    }

    void drop() {
        dev.waitIdle();
        for (auto& [in, b] : shapes)
            for (auto* x : {&b.q, &b.k, &b.v, &b.out}) dev.destroy(*x);
        shapes.clear();
    }
    ~Resident() { drop(); }
};

/** timeShape's device-resident form: the same Run, from timestamps around pskCmdAttentionForward. */
Run timeShapeResident(Resident& res, MessageSink& sink, const TuneOptions& o, const Shape& s, const Inputs& in, bool keepOutput,
                      const AppliesFn& applies = nullptr) {
    Run run;
    psk::bench::ResidentDevice& dev = res.dev;
    Resident::Shape* b = nullptr;
    run.error = res.buffers(in, &b);
    if (!run.error.empty()) return run;
    const PskAttentionCreateInfo ai = attentionInfo(o, s);
    PskAttention attn = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    const PskResult cr = pskCreateAttention(dev.context(), &ai, &attn);
    run.createMs = msSince(t0);
    if (cr != PSK_SUCCESS) {
        run.error = "pskCreateAttention: " + sink.describe(cr);
        return run;
    }
    run.plan = planText(attn);
    if (applies && !applies(run.plan, &run.ignored)) {
        pskDestroyAttention(attn);
        return run;
    }
    PskWorkspaceLayoutInfo li{};
    li.batchSize = o.batch;
    li.seqLen = s.n;
    uint32_t wsCount = 0;
    std::vector<uint64_t> wsSizes;
    PskResult r = pskGetWorkspaceLayout(attn, &li, &wsCount, nullptr);
    if (r == PSK_SUCCESS) {
        wsSizes.resize(wsCount);
        r = pskGetWorkspaceLayout(attn, &li, &wsCount, wsSizes.data());
    }
    if (r != PSK_SUCCESS) run.error = "pskGetWorkspaceLayout: " + sink.describe(r);
    std::vector<psk::bench::ResidentDevice::Buffer> ws(wsCount);
    psk::bench::ResidentDevice::Buffer readback;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    for (uint32_t i = 0; i < wsCount && run.error.empty(); ++i) run.error = dev.create(ws[i], wsSizes[i], false);
    if (run.error.empty()) run.error = dev.begin(cb);
    if (run.error.empty()) {
        dev.fullBarrier(cb);  // this run after the previous one
        dev.timestamps(cb, true);
        PskCmdForwardInfo fi{};
        fi.batchSize = o.batch;
        fi.seqLen = s.n;
        fi.q = {b->q.buffer, 0, b->q.size, nullptr};
        fi.k = {b->k.buffer, 0, b->k.size, nullptr};
        fi.v = {b->v.buffer, 0, b->v.size, nullptr};
        fi.out = {b->out.buffer, 0, b->out.size, nullptr};
        std::vector<PskWorkspaceRange> ranges;
        psk::bench::ResidentDevice::bindWorkspaces(fi, ws, ranges);
        r = pskCmdAttentionForward(attn, cb, &fi);
        if (r != PSK_SUCCESS) run.error = "pskCmdAttentionForward: " + sink.describe(r);
        dev.timestamps(cb, false);
        if (!dev.end(cb) && run.error.empty()) run.error = "vkEndCommandBuffer failed";
    }
    if (run.error.empty())
        timeCalls(o, run, [&](double* ms) {
            std::string e = dev.submitWait(cb);
            if (e.empty() && (*ms = dev.elapsedMs()) < 0) e = "vkGetQueryPoolResults failed";
            return e;
        });
    if (run.error.empty() && keepOutput) {
        run.error = dev.create(readback, in.outBytes, true);
        if (run.error.empty()) run.error = dev.submitOnce([&](VkCommandBuffer c1) { dev.copy(c1, b->out.buffer, readback.buffer, in.outBytes); });
        if (run.error.empty()) {
            const uint8_t* p = static_cast<const uint8_t*>(readback.mapped);
            run.out = psk::storage::decode(std::vector<uint8_t>(p, p + in.outBytes), o.dtype);
        }
    }
    dev.waitIdle();
    if (cb) dev.freeCommandBuffer(cb);
    dev.destroy(readback);
    for (auto& w : ws) dev.destroy(w);
    pskDestroyAttention(attn);
    if (!run.error.empty()) return run;
    run.ok = true;
    return run;
}

/** max |got - want| / max |want| (the conformance metric, against the model's output). */
double relativeDifference(const std::vector<float>& got, const std::vector<float>& want) {
    if (got.size() != want.size()) return INFINITY;
    double diff = 0, scale = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
        scale = std::max(scale, std::fabs(double(want[i])));
    }
    return scale > 0 ? diff / scale : diff;
}

/** Sets PSK_TUNING_TABLE for the attentions created next (the library reads it at creation). */
void useTable(const std::string& path) { setenv("PSK_TUNING_TABLE", path.c_str(), 1); }

/** The shapes of one class and what the search found for them. */
struct ClassSearch {
    psk::TuningShape shape;
    std::vector<size_t> members;  // indices into the options' shapes
    std::map<TuningParameter, uint32_t> model, chosen;  // the model's values; the measured ones that replace them
    std::map<TuningParameter, std::vector<std::string>> notes;  // per parameter: what was measured
    std::vector<std::string> general;                  // notes on the class as a whole
    double modelMs = 0, bestMs = 0;                    // sums of the members' medians
};

std::vector<psk::TuningEntry> entriesOf(const ClassSearch& c, TuningParameter extra, uint32_t value, bool withExtra) {
    std::vector<psk::TuningEntry> entries;
    for (const auto& [p, v] : c.chosen) {
        if (withExtra && p == extra) continue;
        psk::TuningEntry e;
        e.parameter = p;
        e.value = v;
        e.key = psk::tuningKeyOf(c.shape);
        entries.push_back(e);
    }
    if (withExtra) {
        psk::TuningEntry e;
        e.parameter = extra;
        e.value = value;
        e.key = psk::tuningKeyOf(c.shape);
        entries.push_back(e);
    }
    return entries;
}

}  // namespace

int runTune(int argc, char** argv) {
    TuneOptions o;
    try {
        bool help = false;
        o = parseOptions(argc, argv, &help);
        if (help) {
            tuneUsage(stdout);
            return 0;
        }
    } catch (const UsageError& e) {
        std::fprintf(stderr, "psk tune: %s (see psk tune --help)\n", e.message.c_str());
        return 2;
    }
    std::string command = "psk tune";
    for (int i = 0; i < argc; ++i) command += std::string(" ") + argv[i];
    const auto t0 = std::chrono::steady_clock::now();
    const double budgetMs = o.budgetS * 1000;

    MessageSink sink;
    PskContextCreateInfo ci{};
    ci.device = o.device.empty() ? nullptr : o.device.c_str();
    ci.messageCallback = MessageSink::callback;
    ci.messageUserData = &sink;
    PskContext ctx = nullptr;
    // The candidates' tables reach the library through PSK_TUNING_TABLE; the context must not name one.
    const PskResult cr = pskCreateContext(&ci, &ctx);
    if (cr != PSK_SUCCESS) {
        std::fprintf(stderr, "psk tune: cannot create a context: %s\n", sink.describe(cr).c_str());
        return 1;
    }
    PskDeviceInfo dev{};
    pskGetDeviceInfo(ctx, &dev);
    std::printf("psk tune on %s (%s, vendor 0x%x id 0x%x driver 0x%x), budget %.0f s\n", dev.name, dev.driverName, dev.vendorId, dev.deviceId,
                dev.driverVersion, o.budgetS);
    // Device-resident timing on psk's own device where it opens (the library's context above stays
    // for host-form calls, and names the device).
    std::unique_ptr<Resident> resident;
    if (o.resident) {
        resident = std::make_unique<Resident>();
        const std::string why = resident->dev.open(dev, sink);
        if (!why.empty()) {
            std::printf("device-resident timing unavailable (%s): host-form calls\n", why.c_str());
            resident.reset();
        }
    }
    const std::string timing = resident ? "device-resident calls (pskCmdAttentionForward on buffers uploaded once)"
                                        : "host-form calls (pskAttentionForwardHost)";
    std::printf("timing: %s, the median of %u after %u warm-up calls and at least %.0f ms\n", timing.c_str(), o.runs, o.warmup,
                o.warmupMs);
    const char* previousTable = std::getenv("PSK_TUNING_TABLE");
    const std::string restoreTable = previousTable ? previousTable : "";
    const std::string candidatePath = o.out + ".candidate";

    // Shape classes in order of first appearance.
    std::vector<ClassSearch> classes;
    for (size_t i = 0; i < o.shapes.size(); ++i) {
        const psk::TuningShape key = shapeClass(o, o.shapes[i]);
        auto it = std::find_if(classes.begin(), classes.end(), [&](const ClassSearch& c) { return psk::tuningKeyOf(c.shape) == psk::tuningKeyOf(key); });
        if (it == classes.end()) {
            classes.push_back({});
            classes.back().shape = key;
            it = classes.end() - 1;
        }
        it->members.push_back(i);
    }

    const double threshold = psk::conformance::threshold(
        o.dtype, o.kind == PSK_ATTENTION_KIND_POLYSKETCH ? psk::conformance::Family::Polysketch : psk::conformance::Family::Quadratic);
    bool failed = false, budgetOut = false;
    uint32_t timed = 0, rejected = 0, notTried = 0;
    double lastCandidateMs = 0;  // what the last candidate cost: one that would not end inside the budget is not started
    for (size_t ci = 0; ci < classes.size(); ++ci) {
        ClassSearch& cls = classes[ci];
        const std::string classKey = psk::tuningKeyOf(cls.shape).describe();
        // Each class's search ends at an equal share of what is left of the budget (what a class
        // leaves unspent goes to the ones after it), so that the first class of a list cannot spend
        // a GPU check's whole budget (its model configuration may still overrun the share).
        const double classEndMs = msSince(t0) + (budgetMs - msSince(t0)) / double(classes.size() - ci);
        lastCandidateMs = 0;
        std::printf("class %s: %zu shape(s), the search until %.1f s of the budget\n", classKey.c_str(), cls.members.size(), classEndMs / 1000);
        if (msSince(t0) > budgetMs) {
            budgetOut = true;
            cls.general.push_back("not measured (budget spent): the model's choices stand");
            std::printf("  not measured (budget spent)\n");
            continue;
        }
        // The model's configuration: its plan (the tunable values), times and outputs.
        std::vector<Inputs> inputs;
        std::vector<std::vector<float>> reference;
        useTable("none");
        bool usable = true;
        for (size_t m : cls.members) {
            const Shape& s = o.shapes[m];
            try {
                inputs.push_back(makeInputs(o, s));
            } catch (const std::bad_alloc&) {
                cls.general.push_back(shapeName(s) + ": host memory for the inputs ran out");
                usable = false;
                break;
            }
            Run r = resident ? timeShapeResident(*resident, sink, o, s, inputs.back(), true) : timeShape(ctx, sink, o, s, inputs.back(), true);
            if (!r.ok) {
                std::printf("  %s: %s\n", shapeName(s).c_str(), r.error.c_str());
                cls.general.push_back(shapeName(s) + ": the model's configuration failed: " + r.error);
                usable = false;
                failed = true;
                break;
            }
            for (const auto& [p, v] : tunableValues(r.plan))
                if (!cls.model.count(p)) cls.model[p] = v;
            cls.modelMs += r.medianMs;
            reference.push_back(std::move(r.out));
            std::printf("  %s: model %s ms\n", shapeName(s).c_str(), fixed(r.medianMs).c_str());
        }
        if (!usable) continue;
        cls.bestMs = cls.modelMs;
        // The candidates reuse the model's configuration's self-test verdicts (a kernel found wrong
        // stays off) and probe nothing new (PSK_COOPMAT_SELFTEST=known): their outputs are checked
        // against the model configuration's below, and a probe per candidate cost seconds on a GPU.
        const bool ownSelfTest = std::getenv("PSK_COOPMAT_SELFTEST") == nullptr;
        if (ownSelfTest) setenv("PSK_COOPMAT_SELFTEST", "known", 1);
        if (cls.model.empty()) cls.general.push_back("nothing tunable: no kernel of these plans names a tunable value");
        for (TuningParameter p : o.params)
            if (!cls.model.count(p))
                cls.general.push_back(std::string("--params names ") + psk::tuningParameterName(p) + ", which no kernel of these plans takes");
        const std::vector<TuningParameter> order = searchOrder(o.params, cls.model);
        std::string orderText;
        for (TuningParameter p : order) orderText += (orderText.empty() ? "" : ", ") + std::string(psk::tuningParameterName(p));
        std::printf("  search order: %s\n", orderText.empty() ? "(none)" : orderText.c_str());
        for (TuningParameter param : order) {
            const uint32_t modelValue = cls.model.at(param);
            const char* name = psk::tuningParameterName(param);
            std::vector<std::string>& notes = cls.notes[param];
            if (o.list) {
                std::string values;
                for (uint32_t value : candidates(param, modelValue)) values += " " + std::to_string(value);
                std::printf("  %s: model %u; candidates%s\n", name, modelValue, values.c_str());
                notes.push_back(std::string(name) + ": candidates" + values + " (not timed: --list)");
                continue;
            }
            for (uint32_t value : candidates(param, modelValue)) {
                if (msSince(t0) + lastCandidateMs > classEndMs) {
                    budgetOut = true;
                    ++notTried;
                    notes.push_back(std::string(name) + "=" + std::to_string(value) + ": not tried (budget spent)");
                    continue;
                }
                const std::vector<psk::TuningEntry> entries = entriesOf(cls, param, value, true);
                std::vector<psk::TuningTableLine> lines;
                for (const psk::TuningEntry& e : entries) lines.push_back({{}, e});
                psk::TuningDevice any;
                any.any = true;
                std::string error;
                if (!psk::bench::writeText(candidatePath, psk::writeTuningTable(any, {"a psk tune candidate"}, lines), error)) {
                    std::fprintf(stderr, "psk tune: %s\n", error.c_str());
                    pskDestroyContext(ctx);
                    return 1;
                }
                useTable(candidatePath);
                const auto c0 = std::chrono::steady_clock::now();
                double sum = 0, createMs = 0, callsMs = 0;
                std::string verdict;
                for (size_t j = 0; j < cls.members.size() && verdict.empty(); ++j) {
                    const Shape& s = o.shapes[cls.members[j]];
                    // A candidate the planner ignored (it does not fit, or its kernel is not in
                    // the plan) is not timed: the plan says so before any call.
                    const AppliesFn applies = [&](const std::string& plan, std::string* why) { return candidateApplied(plan, param, value, why); };
                    Run r = resident ? timeShapeResident(*resident, sink, o, s, inputs[j], true, applies)
                                     : timeShape(ctx, sink, o, s, inputs[j], true, applies);
                    createMs += r.createMs;
                    callsMs += r.callsMs;
                    if (!r.ignored.empty()) {
                        verdict = r.ignored;
                    } else if (!r.ok) {
                        verdict = "failed at " + shapeName(s) + ": " + r.error;
                    } else {
                        const double diff = relativeDifference(r.out, reference[j]);
                        if (!(diff <= threshold))
                            verdict = "REJECTED: its output differs from the model's configuration's by " + fixed(diff * 1e3, 4) +
                                      "e-3 at " + shapeName(s) + " (threshold " + fixed(threshold * 1e3, 4) + "e-3)";
                        sum += r.medianMs;
                    }
                }
                lastCandidateMs = msSince(c0);
                std::string line = std::string(name) + "=" + std::to_string(value) + ": ";
                if (verdict.empty()) {
                    ++timed;
                    const bool better = sum < cls.bestMs * (1 - o.minGain);
                    line += fixed(sum) + " ms (best so far " + fixed(cls.bestMs) + ")" + (better ? ", kept" : "");
                    // Where a candidate's seconds go (creation: pipelines and the self-test's probes).
                    line += " [creation " + fixed(createMs / 1e3, 1) + " s, calls " + fixed(callsMs / 1e3, 1) + " s]";
                    if (better) {
                        cls.bestMs = sum;
                        cls.chosen[param] = value;
                    }
                } else {
                    if (verdict.rfind("REJECTED", 0) == 0 || verdict.rfind("failed", 0) == 0) ++rejected;
                    line += verdict;
                }
                std::printf("  %s\n", line.c_str());
                notes.push_back(line);
            }
        }
        if (ownSelfTest) unsetenv("PSK_COOPMAT_SELFTEST");
        if (resident) resident->drop();  // the class's buffers (the next class has its own inputs)
        std::printf("  class total: model %s ms, tuned %s ms\n", fixed(cls.modelMs).c_str(), fixed(cls.bestMs).c_str());
    }
    std::remove(candidatePath.c_str());
    if (restoreTable.empty()) unsetenv("PSK_TUNING_TABLE");
    else useTable(restoreTable);

    // The table: one entry per measured improvement, the measurements as comments.
    psk::TuningDevice device;
    device.vendorId = dev.vendorId;
    device.deviceId = dev.deviceId;
    device.driverVersion = dev.driverVersion;
    device.name = dev.name;
    std::vector<std::string> header = {
        "Written by psk tune (docs/PERFORMANCE.md, \"Tuning\") on " + std::string(dev.name) + " (" + dev.driverName + " " + dev.driverInfo +
            "), " + utcNow() + ".",
        command,
        "GPU time of " + std::string(resident ? "device-resident" : "host-form") + " calls: the median of " + std::to_string(o.runs) + " after " + std::to_string(o.warmup) +
            " warm-up calls and at least " + fixed(o.warmupMs, 0) + " ms; B = " + std::to_string(o.batch) + ", H = " +
            std::to_string(o.heads) + "; a candidate is kept when it beats the best by " + fixed(o.minGain * 100, 1) + " %."};
    std::vector<psk::TuningTableLine> lines;
    size_t entryCount = 0;
    for (const ClassSearch& cls : classes) {
        std::string shapes;
        for (size_t m : cls.members) shapes += (shapes.empty() ? "" : ", ") + shapeName(o.shapes[m]);
        header.push_back("");
        header.push_back("class " + psk::tuningKeyOf(cls.shape).describe() + " (" + shapes + "): model " + fixed(cls.modelMs) +
                         " ms, tuned " + fixed(cls.bestMs) + " ms (sums of the medians)");
        for (const std::string& g : cls.general) header.push_back("  " + g);
        for (const auto& [param, modelValue] : cls.model) {
            if (cls.chosen.count(param)) continue;
            const auto searched = cls.notes.find(param);
            header.push_back("  " + std::string(psk::tuningParameterName(param)) + ": the model's " + std::to_string(modelValue) + " stands" +
                             (searched == cls.notes.end() ? " (not searched: --params)" : ""));
            if (searched != cls.notes.end())
                for (const std::string& n : searched->second) header.push_back("    " + n);
        }
        for (const auto& [param, value] : cls.chosen) {
            psk::TuningTableLine l;
            l.comments.push_back(std::string(psk::tuningParameterName(param)) + ": model " + std::to_string(cls.model.at(param)) + " -> " +
                                 std::to_string(value));
            for (const std::string& n : cls.notes.at(param)) l.comments.push_back("  " + n);
            l.entry.parameter = param;
            l.entry.value = value;
            l.entry.key = psk::tuningKeyOf(cls.shape);
            lines.push_back(l);
            ++entryCount;
        }
    }
    const std::string text = psk::writeTuningTable(device, header, lines);
    try {
        psk::parseTuningTable(text, o.out);
    } catch (const psk::Error& e) {
        std::fprintf(stderr, "psk tune: the table does not parse back (a bug): %s\n", e.what());
        pskDestroyContext(ctx);
        return 1;
    }
    std::string error;
    if (!psk::bench::writeText(o.out, text, error)) {
        std::fprintf(stderr, "psk tune: %s\n", error.c_str());
        pskDestroyContext(ctx);
        return 1;
    }
    pskDestroyContext(ctx);
    std::printf("psk tune: wrote %s: %zu entr%s; %u candidates timed, %u rejected or failed%s, %.1f s\n", o.out.c_str(), entryCount,
                entryCount == 1 ? "y" : "ies", timed, rejected,
                budgetOut ? (", " + std::to_string(notTried) + " not tried (budget spent)").c_str() : "", msSince(t0) / 1000);
    return failed ? 1 : 0;
}
