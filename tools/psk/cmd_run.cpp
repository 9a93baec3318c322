// psk run: one attention call on q, k, v read from .npy files, the output written to a .npy file.
//
// Everything that can be checked on the host (options, files, shapes) is checked before the device
// is touched, and the output is written to a temporary name that is renamed only on success, so a
// failed run never leaves an output file behind.
#include <polysketch/polysketch.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"
#include "npy.hpp"
#include "reference/storage_types.hpp"

namespace {

using psk::cli::MessageSink;

void runUsage(FILE* out) {
    std::fprintf(out,
        "usage: psk run --kind softmax|poly|polysketch --q Q.npy --k K.npy --v V.npy --out O.npy\n"
        "               [--causal | --full] [--degree P] [--scale S] [--layout bhnd|bnhd]\n"
        "               [--device-layout bhnd|bnhd] [--dtype f32|f16|bf16] [--device SEL]\n"
        "               [--cu-seqlens 0,N1,N2,...]\n"
        "               polysketch only: [--sketch-size R] [--block-size B] [--local-exact]\n"
        "               [--seed N | --sketch FILE.safetensors | --learned FILE.safetensors]\n"
        "               [--reference-scaling] [--qk-norm FILE.safetensors]\n"
        "\n"
        "Computes attention on the device and writes the output as a float32 .npy file.\n"
        "\n"
        "Files (little-endian float32 '<f4' or float16 '<f2', C order), in the order --layout names:\n"
        "                --layout bhnd (default)   --layout bnhd (FlashAttention)\n"
        "  --q Q.npy     [B, Hq, n, h]             [B, n, Hq, h]\n"
        "  --k K.npy     [B, Hkv, n, h]            [B, n, Hkv, h]   (Hq a multiple of Hkv: grouped-query heads)\n"
        "  --v V.npy     [B, Hkv, n, dv]           [B, n, Hkv, dv]\n"
        "  --out O.npy   [B, Hq, n, dv]            [B, n, Hq, dv]   float32; written only when the call succeeds\n"
        "A shape alone cannot tell the two orders apart: give --layout bnhd for [B, n, H, dim] files.\n"
        "\n"
        "Options:\n"
        "  --causal            row i attends to j <= i (the DEFAULT: the language-model case)\n"
        "  --full              every row attends to every j\n"
        "  --degree P          2, 4 or 8 (poly and polysketch; default 4)\n"
        "  --scale S           score scale s, a finite non-zero float32 (default 1/sqrt(h) for softmax, 1 otherwise)\n"
        "  --dtype T           storage type on the device (default f32); inputs are converted on the host\n"
        "  --layout L          the layout of the FILES: bhnd (default) or bnhd, see above; the output file is\n"
        "                      written in the same layout as the inputs\n"
        "  --device-layout L   the layout of the tensors on the device (default: the same as --layout); one\n"
        "                      that differs from --layout is transposed on the host before and after the call\n"
        "  --device SEL        device index or part of its name (see psk info); default PSK_DEVICE or the best\n"
        "  --cu-seqlens LIST   a packed batch (FlashAttention's varlen): the files hold B = 1 and n = the\n"
        "                      total tokens, LIST the sequences' B' + 1 offsets (0 first, n last); each\n"
        "                      sequence attends only within itself, as if run alone\n"
        "  --sketch-size R     polysketch sketch size r, 8 to 128 (default 32)\n"
        "  --block-size B      polysketch block size b, 16 to 1024 (default 256)\n"
        "  --local-exact       polysketch: exact polynomial weights inside each block (causal only)\n"
        "  --seed N            polysketch: random sketch generated from seed N (the default source, seed 0)\n"
        "  --sketch FILE       polysketch: random sketch matrices g{l}_{i}a/b from a .safetensors file\n"
        "  --learned FILE      polysketch: learned sketch (degree 4) from a .safetensors file\n"
        "  --reference-scaling polysketch, random sketch: the google-research scaling (G / sqrt(r))\n"
        "  --qk-norm FILE      polysketch: q/k LayerNorm parameters from a .safetensors file\n"
        "\n"
        "Exit status: 0 on success; 2 for a bad command line or q, k, v shapes that do not fit together\n"
        "under --layout; 1 for an unreadable or malformed file (or not 4-D) or a failed call.\n");
}

struct RunOptions {
    PskAttentionKind kind = PSK_ATTENTION_KIND_NONE;
    std::string q, k, v, out, device;
    bool causal = true, sawCausal = false, sawFull = false;
    uint32_t degree = 0, sketchSize = 0, blockSize = 0;
    double scale = 0;
    bool localExact = false, referenceScaling = false;
    bool haveSeed = false;
    uint64_t seed = 0;
    std::string sketchFile, learnedFile, qkNormFile;
    PskLayout layout = PSK_LAYOUT_BHND;        // the files' layout (--layout)
    PskLayout deviceLayout = PSK_LAYOUT_BHND;  // the device's layout (--device-layout; default: layout)
    bool haveDeviceLayout = false;
    PskDataType dtype = PSK_DATA_TYPE_FLOAT32;
    std::vector<uint32_t> cuSeqlens;          // --cu-seqlens: a packed batch
    std::vector<std::string> polysketchOnly;  // polysketch-only options seen, in order
};

using psk::cli::UsageError;

// Parses the command line; throws UsageError with a one-line message.
RunOptions parseOptions(int argc, char** argv, bool* help) {
    RunOptions o;
    *help = false;
    psk::cli::ArgReader args(argc, argv);
    while (args.next()) {
        const std::string& a = args.name();
        auto next = [&] { return args.value(); };
        auto flag = [&] { args.flag(); };
        auto uintOpt = [&](uint32_t lo, uint32_t hi) {
            const std::string s = next();
            uint32_t v = 0;
            if (!psk::cli::parseUint32(s, lo, hi, &v))
                throw UsageError{a + " needs an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + " (got '" + s + "')"};
            return v;
        };
        if (a == "--help" || a == "-h") {
            *help = true;
            return o;
        } else if (a == "--kind") {
            const std::string s = next();
            if (!psk::cli::parseKind(s, &o.kind)) throw UsageError{"--kind takes softmax, poly or polysketch (got '" + s + "')"};
        } else if (a == "--q") {
            o.q = next();
        } else if (a == "--k") {
            o.k = next();
        } else if (a == "--v") {
            o.v = next();
        } else if (a == "--out") {
            o.out = next();
        } else if (a == "--causal") {
            flag();
            o.sawCausal = true;
        } else if (a == "--full") {
            flag();
            o.sawFull = true;
        } else if (a == "--degree") {
            const std::string s = next();
            if (s != "2" && s != "4" && s != "8") throw UsageError{"--degree must be 2, 4 or 8 (got '" + s + "')"};
            o.degree = uint32_t(std::stoul(s));
        } else if (a == "--scale") {
            // The library takes a float: the value must be finite and non-zero as a float, not
            // only as a double (1e39 overflows to infinity, 1e-50 underflows to 0, which would
            // select the default scale).
            const std::string s = next();
            if (!psk::cli::parseDouble(s, &o.scale) || o.scale == 0)
                throw UsageError{"--scale needs a finite non-zero number (got '" + s + "')"};
            // (A double beyond FLT_MAX is not converted at all: that conversion is undefined.)
            const bool overflows = std::fabs(o.scale) > double(std::numeric_limits<float>::max());
            if (overflows || static_cast<float>(o.scale) == 0.0f)
                throw UsageError{"--scale '" + s + "' is " + (overflows ? "infinite" : "zero") +
                                 " as a float32 (the library's type): give a magnitude from 1.4e-45 to 3.4e38"};
        } else if (a == "--sketch-size") {
            o.sketchSize = uintOpt(1, 1u << 20);
            o.polysketchOnly.push_back(a);
        } else if (a == "--block-size") {
            o.blockSize = uintOpt(1, 1u << 20);
            o.polysketchOnly.push_back(a);
        } else if (a == "--local-exact") {
            flag();
            o.localExact = true;
            o.polysketchOnly.push_back(a);
        } else if (a == "--reference-scaling") {
            flag();
            o.referenceScaling = true;
            o.polysketchOnly.push_back(a);
        } else if (a == "--seed") {
            const std::string s = next();
            if (!psk::cli::parseUint(s, 0, ~0ull, &o.seed)) throw UsageError{"--seed needs a non-negative integer (got '" + s + "')"};
            o.haveSeed = true;
            o.polysketchOnly.push_back(a);
        } else if (a == "--sketch") {
            o.sketchFile = next();
            o.polysketchOnly.push_back(a);
        } else if (a == "--learned") {
            o.learnedFile = next();
            o.polysketchOnly.push_back(a);
        } else if (a == "--qk-norm") {
            o.qkNormFile = next();
            o.polysketchOnly.push_back(a);
        } else if (a == "--layout") {
            const std::string s = next();
            if (!psk::cli::parseLayout(s, &o.layout)) throw UsageError{"--layout takes bhnd or bnhd (got '" + s + "')"};
        } else if (a == "--device-layout") {
            const std::string s = next();
            if (!psk::cli::parseLayout(s, &o.deviceLayout))
                throw UsageError{"--device-layout takes bhnd or bnhd (got '" + s + "')"};
            o.haveDeviceLayout = true;
        } else if (a == "--cu-seqlens") {
            const std::string s = next();
            o.cuSeqlens.clear();
            size_t at = 0;
            while (at <= s.size()) {
                const size_t comma = std::min(s.find(',', at), s.size());
                uint32_t x = 0;
                if (!psk::cli::parseUint32(s.substr(at, comma - at), 0, 0xffffffffu, &x))
                    throw UsageError{"--cu-seqlens takes comma-separated token offsets (got '" + s + "')"};
                o.cuSeqlens.push_back(x);
                at = comma + 1;
            }
            if (o.cuSeqlens.size() < 2) throw UsageError{"--cu-seqlens needs at least two offsets (0 and the total)"};
        } else if (a == "--dtype") {
            const std::string s = next();
            if (!psk::cli::parseDataType(s, &o.dtype)) throw UsageError{"--dtype takes f32, f16 or bf16 (got '" + s + "')"};
        } else if (a == "--device") {
            o.device = next();
        } else {
            throw UsageError{"unknown option '" + args.raw() + "'"};
        }
    }

    // Required options, then combinations.
    if (o.kind == PSK_ATTENTION_KIND_NONE) throw UsageError{"--kind is required (softmax, poly or polysketch)"};
    for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"--q", &o.q}, {"--k", &o.k}, {"--v", &o.v}, {"--out", &o.out}})
        if (value->empty()) throw UsageError{std::string(name) + " is required"};
    if (o.sawCausal && o.sawFull) throw UsageError{"--causal and --full conflict; give one"};
    o.causal = !o.sawFull;
    if (o.kind == PSK_ATTENTION_KIND_SOFTMAX && o.degree) throw UsageError{"--degree applies to poly and polysketch, not softmax"};
    if (o.kind != PSK_ATTENTION_KIND_POLYSKETCH && !o.polysketchOnly.empty())
        throw UsageError{o.polysketchOnly.front() + " applies only to --kind polysketch"};
    const int sources = int(o.haveSeed) + int(!o.sketchFile.empty()) + int(!o.learnedFile.empty());
    if (sources > 1) throw UsageError{"--seed, --sketch and --learned conflict; give one sketch source"};
    if (!o.learnedFile.empty() && o.referenceScaling)
        throw UsageError{"--reference-scaling applies to random sketches (--seed, --sketch), not --learned"};
    if (!o.learnedFile.empty() && o.degree && o.degree != 4) throw UsageError{"--learned sketches have degree 4 (got --degree " + std::to_string(o.degree) + ")"};
    if (o.localExact && !o.causal) throw UsageError{"--local-exact needs causal attention (drop --full)"};
    if (!o.haveDeviceLayout) o.deviceLayout = o.layout;
    return o;
}

struct FileError {
    std::string message;
};

/** q, k and v whose shapes do not fit together under the declared --layout: exit status 2. */
struct ShapeError {
    std::string message;
};

struct Input {
    psk::npy::Array array;
    uint64_t B = 0, H = 0, n = 0, d = 0;  // the shape read in the files' layout
};

// "[B, Hq, n, h]" or "[B, n, Hq, h]": the dimension names of a file in `layout`.
std::string dimNames(PskLayout layout, const char* heads, const char* dim) {
    return layout == PSK_LAYOUT_BNHD ? std::string("[B, n, ") + heads + ", " + dim + "]"
                                     : std::string("[B, ") + heads + ", n, " + dim + "]";
}

struct Dims {
    uint64_t B = 0, H = 0, n = 0, d = 0;
};

// A 4-D shape read as [B, H, n, d] (bhnd) or [B, n, H, d] (bnhd).
Dims dimsOf(const std::vector<uint64_t>& s, PskLayout layout) {
    return layout == PSK_LAYOUT_BNHD ? Dims{s[0], s[2], s[1], s[3]} : Dims{s[0], s[1], s[2], s[3]};
}

void assignDims(Input& in, PskLayout layout) {
    const Dims x = dimsOf(in.array.shape, layout);
    in.B = x.B;
    in.H = x.H;
    in.n = x.n;
    in.d = x.d;
}

// Whether q, k, v fit together read in `layout`: "" when they do, else the problem (one line).
std::string shapeMismatch(const Input& qIn, const Input& kIn, const Input& vIn, PskLayout layout) {
    const Dims q = dimsOf(qIn.array.shape, layout), k = dimsOf(kIn.array.shape, layout), v = dimsOf(vIn.array.shape, layout);
    const std::string qs = qIn.array.shapeString(), ks = kIn.array.shapeString(), vs = vIn.array.shapeString();
    const std::string all = ": q " + qs + ", k " + ks + ", v " + vs;
    if (k.B != q.B || v.B != q.B) return "batch sizes differ" + all;
    if (k.n != q.n || v.n != q.n) return "sequence lengths differ" + all;
    if (k.d != q.d) return "head dims differ: q " + qs + " and k " + ks + " must share h";
    if (v.H != k.H) return "head-count mismatch: k has " + std::to_string(k.H) + " heads, v has " + std::to_string(v.H);
    if (q.H % k.H != 0)
        return "head-count mismatch: q has " + std::to_string(q.H) + " heads, k and v have " + std::to_string(k.H) +
               "; Hq must be a multiple of Hkv";
    return "";
}

Input readInput(const std::string& path, const char* what, const std::string& dims) {
    Input in;
    try {
        in.array = psk::npy::read(path);
    } catch (const psk::npy::Error& e) {
        throw FileError{path + ": " + e.what()};
    }
    const auto& s = in.array.shape;
    if (s.size() != 4)
        throw FileError{path + ": " + what + " must be a 4-D array " + dims + ", got " + std::to_string(s.size()) + "-D shape " +
                        in.array.shapeString()};
    for (uint64_t d : s)
        if (d == 0) throw FileError{path + ": " + what + " is empty (shape " + in.array.shapeString() + ")"};
    for (uint64_t d : s)
        if (d > 0xFFFFFFFFull) throw FileError{path + ": a dimension of " + in.array.shapeString() + " exceeds 2^32 - 1"};
    return in;
}

// [B, H, n, d] -> [B, n, H, d].
std::vector<float> toBnhd(const std::vector<float>& x, size_t B, size_t H, size_t n, size_t d) {
    std::vector<float> y(x.size());
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h)
            for (size_t t = 0; t < n; ++t)
                std::memcpy(&y[((b * n + t) * H + h) * d], &x[((b * H + h) * n + t) * d], d * sizeof(float));
    return y;
}

// [B, n, H, d] -> [B, H, n, d].
std::vector<float> fromBnhd(const std::vector<float>& y, size_t B, size_t H, size_t n, size_t d) {
    std::vector<float> x(y.size());
    for (size_t b = 0; b < B; ++b)
        for (size_t h = 0; h < H; ++h)
            for (size_t t = 0; t < n; ++t)
                std::memcpy(&x[((b * H + h) * n + t) * d], &y[((b * n + t) * H + h) * d], d * sizeof(float));
    return x;
}

}  // namespace

namespace {
int runChecked(int argc, char** argv);
}  // namespace

int runRun(int argc, char** argv) {
    try {
        return runChecked(argc, argv);
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "psk run: out of host memory\n");
        return 1;
    }
}

namespace {

int runChecked(int argc, char** argv) {
    RunOptions o;
    try {
        bool help = false;
        o = parseOptions(argc, argv, &help);
        if (help) {
            runUsage(stdout);
            return 0;
        }
    } catch (const UsageError& e) {
        std::fprintf(stderr, "psk run: %s (see psk run --help)\n", e.message.c_str());
        return 2;
    }

    Input q, k, v;
    try {
        q = readInput(o.q, "q", dimNames(o.layout, "Hq", "h"));
        k = readInput(o.k, "k", dimNames(o.layout, "Hkv", "h"));
        v = readInput(o.v, "v", dimNames(o.layout, "Hkv", "dv"));
        // The shapes must fit together read in the declared layout; a shape alone cannot show the
        // layout, but a mismatch that the other layout would not have is worth naming.
        const std::string problem = shapeMismatch(q, k, v, o.layout);
        if (!problem.empty()) {
            const PskLayout other = o.layout == PSK_LAYOUT_BNHD ? PSK_LAYOUT_BHND : PSK_LAYOUT_BNHD;
            std::string message = problem + " (--layout " + psk::cli::layoutName(o.layout) + " reads the files as " +
                                  dimNames(o.layout, "H", "dim") + ")";
            if (shapeMismatch(q, k, v, other).empty())
                message += std::string("; they fit --layout ") + psk::cli::layoutName(other) + " " + dimNames(other, "H", "dim");
            throw ShapeError{message};
        }
        assignDims(q, o.layout);
        assignDims(k, o.layout);
        assignDims(v, o.layout);
    } catch (const FileError& e) {
        std::fprintf(stderr, "psk run: %s\n", e.message.c_str());
        return 1;
    } catch (const ShapeError& e) {
        std::fprintf(stderr, "psk run: %s\n", e.message.c_str());
        return 2;
    }

    const size_t B = q.B, Hq = q.H, Hkv = k.H, n = q.n, h = q.d, dv = v.d;
    if (!o.cuSeqlens.empty()) {
        // A packed batch: one "sequence" of n tokens in the files, split by the offsets.
        std::string problem;
        if (B != 1) problem = "--cu-seqlens needs files with B = 1 (the packed tokens), got B = " + std::to_string(B);
        else if (o.cuSeqlens.front() != 0) problem = "--cu-seqlens must start at 0";
        else if (o.cuSeqlens.back() != n)
            problem = "--cu-seqlens ends at " + std::to_string(o.cuSeqlens.back()) + ", the files hold n = " + std::to_string(n) + " tokens";
        for (size_t i = 1; problem.empty() && i < o.cuSeqlens.size(); ++i)
            if (o.cuSeqlens[i] < o.cuSeqlens[i - 1]) problem = "--cu-seqlens offsets must not decrease";
        if (!problem.empty()) {
            std::fprintf(stderr, "psk run: %s\n", problem.c_str());
            return 2;
        }
    }
    std::vector<float> qf = q.array.toFloat(), kf = k.array.toFloat(), vf = v.array.toFloat();
    q.array.data.clear();
    k.array.data.clear();
    v.array.data.clear();
    // Files and device in different layouts: transpose on the host.
    if (o.layout != o.deviceLayout) {
        const auto convert = o.deviceLayout == PSK_LAYOUT_BNHD ? toBnhd : fromBnhd;
        qf = convert(qf, B, Hq, n, h);
        kf = convert(kf, B, Hkv, n, h);
        vf = convert(vf, B, Hkv, n, dv);
    }
    const auto qb = psk::storage::encode(qf, o.dtype), kb = psk::storage::encode(kf, o.dtype), vb = psk::storage::encode(vf, o.dtype);
    std::vector<uint8_t> ob(B * Hq * n * dv * psk::storage::elementBytes(o.dtype));

    MessageSink sink;
    PskContextCreateInfo ci{};
    ci.device = o.device.empty() ? nullptr : o.device.c_str();
    ci.messageCallback = MessageSink::callback;
    ci.messageUserData = &sink;
    PskContext ctx = nullptr;
    PskResult r = pskCreateContext(&ci, &ctx);
    if (r != PSK_SUCCESS) {
        std::fprintf(stderr, "psk run: cannot create a context: %s\n", sink.describe(r).c_str());
        return 1;
    }

    PskAttentionCreateInfo ai{};
    ai.kind = o.kind;
    ai.flags = (o.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (o.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0) |
               (o.referenceScaling ? PSK_ATTENTION_REFERENCE_SCALING_BIT : 0);
    ai.degree = o.degree;
    ai.scale = static_cast<float>(o.scale);
    ai.numQueryHeads = uint32_t(Hq);
    ai.numKeyValueHeads = uint32_t(Hkv);
    ai.headDim = uint32_t(h);
    ai.valueDim = uint32_t(dv);
    ai.dataType = o.dtype;
    ai.layout = o.deviceLayout;
    ai.sketchSize = o.sketchSize;
    ai.blockSize = o.blockSize;
    ai.seed = o.seed;
    if (!o.sketchFile.empty()) {
        ai.sketchSource = PSK_SKETCH_SOURCE_FILE;
        ai.sketchFile = o.sketchFile.c_str();
    } else if (!o.learnedFile.empty()) {
        ai.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
        ai.sketchFile = o.learnedFile.c_str();
    } else {
        ai.sketchSource = PSK_SKETCH_SOURCE_SEED;
    }
    ai.qkNormFile = o.qkNormFile.empty() ? nullptr : o.qkNormFile.c_str();

    PskAttention attn = nullptr;
    r = pskCreateAttention(ctx, &ai, &attn);
    if (r != PSK_SUCCESS) {
        std::fprintf(stderr, "psk run: cannot create the attention: %s\n", sink.describe(r).c_str());
        pskDestroyContext(ctx);
        return 1;
    }
    PskForwardStats stats{};
    PskForwardHostInfo f{};
    f.batchSize = uint32_t(B);
    f.seqLen = uint32_t(n);
    f.q = qb.data();
    f.k = kb.data();
    f.v = vb.data();
    f.out = ob.data();
    f.qBytes = qb.size();
    f.kBytes = kb.size();
    f.vBytes = vb.size();
    f.outBytes = ob.size();
    f.stats = &stats;
    if (!o.cuSeqlens.empty()) {
        f.batchSize = uint32_t(o.cuSeqlens.size() - 1);
        f.cuSeqlens = o.cuSeqlens.data();
    }
    r = pskAttentionForwardHost(attn, &f);
    PskDeviceInfo dev{};
    pskGetDeviceInfo(ctx, &dev);
    pskDestroyAttention(attn);
    pskDestroyContext(ctx);
    if (r != PSK_SUCCESS) {
        std::fprintf(stderr, "psk run: the attention call failed: %s\n", sink.describe(r).c_str());
        return 1;
    }

    std::vector<float> of = psk::storage::decode(ob, o.dtype);
    // The output file in the inputs' layout.
    if (o.layout != o.deviceLayout) of = (o.deviceLayout == PSK_LAYOUT_BNHD ? fromBnhd : toBnhd)(of, B, Hq, n, dv);
    const std::vector<uint64_t> outShape =
        o.layout == PSK_LAYOUT_BNHD ? std::vector<uint64_t>{B, n, Hq, dv} : std::vector<uint64_t>{B, Hq, n, dv};
    const std::string tmp = o.out + ".tmp" + std::to_string(getpid());
    try {
        psk::npy::write(tmp, outShape, of, psk::npy::DType::Float32);
    } catch (const psk::npy::Error& e) {
        std::fprintf(stderr, "psk run: %s\n", e.what());
        return 1;
    }
    if (std::rename(tmp.c_str(), o.out.c_str()) != 0) {
        std::fprintf(stderr, "psk run: cannot write %s: %s\n", o.out.c_str(), std::strerror(errno));
        std::remove(tmp.c_str());
        return 1;
    }
    std::printf("%s %s, B=%zu Hq=%zu Hkv=%zu n=%zu h=%zu dv=%zu, %s, files %s, device %s on %s: %.3f ms GPU, workspace %llu bytes -> %s\n",
                psk::cli::kindName(o.kind), o.causal ? "causal" : "full", B, Hq, Hkv, n, h, dv, psk::cli::dataTypeName(o.dtype),
                psk::cli::layoutName(o.layout), psk::cli::layoutName(o.deviceLayout), dev.name, stats.gpuMilliseconds, static_cast<unsigned long long>(stats.workspaceBytes),
                o.out.c_str());
    return 0;
}

}  // namespace
