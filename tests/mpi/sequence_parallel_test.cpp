// Sequence parallelism over MPI (polysketch_mpi.h), run under mpirun with 1 to 4 ranks by ctest.
// Every rank computes the single-process forward over the whole sequence itself and compares its
// own chunk's rows from pskMpiAttentionForwardHost with it (relative max error <= 1e-5 in float32);
// then the bad-input cases must fail on every rank, with the same message, and never hang.
// Exit status 0 when every case passed on every rank.
#include <polysketch/polysketch_mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

int rank = 0, ranks = 1;
int failures = 0;
unsigned validationMessages = 0;

void onMessage(PskMessageSeverity severity, PskResult, const char* message, void*) {
    if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) {
        ++validationMessages;
        std::fprintf(stderr, "rank %d: validation: %s\n", rank, message);
    }
}

void check(bool ok, const std::string& what) {
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "rank %d: FAIL %s\n", rank, what.c_str());
    }
}

/** An error as printed: "%.3e" (std::to_string's six decimals read 0.000000 for float32 errors). */
std::string formatError(double error) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3e", error);
    return buf;
}

std::vector<float> randomNormal(size_t count, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(count);
    for (float& f : x) f = dist(rng);
    return x;
}

uint16_t toHalf(float f) {  // round to nearest even, finite normal range (inputs are N(0, 1))
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    int32_t exponent = int32_t((x >> 23) & 0xff) - 127 + 15;
    uint32_t mantissa = x & 0x7fffffu;
    if (exponent <= 0) return uint16_t(sign);  // flush the tiny ones: irrelevant for these inputs
    uint32_t half = sign | uint32_t(exponent) << 10 | mantissa >> 13;
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
    return uint16_t(half);
}

float fromHalf(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    uint32_t x = sign;
    if (exponent) x |= (exponent - 15 + 127) << 23 | mantissa << 13;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

struct Case {
    std::string name;
    uint32_t n;                   // whole sequence
    std::vector<uint32_t> split;  // chunk lengths per rank (empty: as equal as possible)
    bool localExact = true;
    uint32_t Hq = 2, Hkv = 2, B = 1, h = 32, dv = 32, b = 64, r = 16;
    PskDataType dataType = PSK_DATA_TYPE_FLOAT32;
    PskLayout layout = PSK_LAYOUT_BHND;
};

PskAttention createAttention(PskContext ctx, const Case& c, uint32_t blockSizeOverride = 0) {
    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = PSK_ATTENTION_CAUSAL_BIT | (c.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    info.scale = 1.0f / std::sqrt(float(c.h));
    info.numQueryHeads = c.Hq;
    info.numKeyValueHeads = c.Hkv;
    info.headDim = c.h;
    info.valueDim = c.dv;
    info.dataType = c.dataType;
    info.layout = c.layout;
    info.sketchSize = c.r;
    info.blockSize = blockSizeOverride ? blockSizeOverride : c.b;
    info.seed = 7;
    PskAttention attention = nullptr;
    const PskResult result = pskCreateAttention(ctx, &info, &attention);
    check(result == PSK_SUCCESS, c.name + ": pskCreateAttention: " + pskResultToString(result));
    return attention;
}

/** This rank's chunk [first, first + len) of the case's split. */
void chunkOf(const Case& c, uint64_t& first, uint32_t& len) {
    std::vector<uint32_t> split = c.split;
    if (split.empty())
        for (int r = 0; r < ranks; ++r) split.push_back(c.n / ranks + (uint32_t(r) < c.n % ranks ? 1 : 0));
    first = 0;
    for (int r = 0; r < rank; ++r) first += split[r];
    len = split[rank];
}

/** Rows [first, first + len) of a [B, H, n, d] tensor in `layout`, as a [B, H, len, d] one. */
template <typename T>
std::vector<T> slice(const std::vector<T>& x, const Case& c, uint32_t H, uint32_t d, uint64_t first, uint32_t len) {
    std::vector<T> out(size_t(c.B) * H * len * d);
    const bool bnhd = c.layout == PSK_LAYOUT_BNHD;
    for (uint32_t b = 0; b < c.B; ++b)
        for (uint32_t hd = 0; hd < H; ++hd)
            for (uint32_t t = 0; t < len; ++t) {
                const size_t from = bnhd ? ((size_t(b) * c.n + first + t) * H + hd) * d : ((size_t(b) * H + hd) * c.n + first + t) * d;
                const size_t to = bnhd ? ((size_t(b) * len + t) * H + hd) * d : ((size_t(b) * H + hd) * len + t) * d;
                std::memcpy(&out[to], &x[from], d * sizeof(T));
            }
    return out;
}

void runCase(PskContext ctx, const Case& c) {
    PskAttention attention = createAttention(ctx, c);
    if (!attention) return;
    const bool half = c.dataType != PSK_DATA_TYPE_FLOAT32;
    const size_t e = half ? 2 : 4;
    // The whole sequence, the same on every rank (the same seeds).
    std::vector<float> q = randomNormal(size_t(c.B) * c.Hq * c.n * c.h, 1), k = randomNormal(size_t(c.B) * c.Hkv * c.n * c.h, 2),
                       v = randomNormal(size_t(c.B) * c.Hkv * c.n * c.dv, 3);
    std::vector<uint16_t> qh, kh, vh;
    if (half) {
        for (float f : q) qh.push_back(toHalf(f));
        for (float f : k) kh.push_back(toHalf(f));
        for (float f : v) vh.push_back(toHalf(f));
    }
    std::vector<uint8_t> whole(size_t(c.B) * c.Hq * c.n * c.dv * e);
    PskForwardHostInfo f{};
    f.batchSize = c.B;
    f.seqLen = c.n;
    f.q = half ? (const void*)qh.data() : q.data();
    f.k = half ? (const void*)kh.data() : k.data();
    f.v = half ? (const void*)vh.data() : v.data();
    f.out = whole.data();
    f.qBytes = q.size() * e;
    f.kBytes = k.size() * e;
    f.vBytes = v.size() * e;
    f.outBytes = whole.size();
    PskResult result = pskAttentionForwardHost(attention, &f);
    check(result == PSK_SUCCESS, c.name + ": the single-process forward: " + pskResultToString(result));

    uint64_t first;
    uint32_t len;
    chunkOf(c, first, len);
    std::vector<uint8_t> myQ, myK, myV;
    auto bytesOf = [](auto vec) {
        std::vector<uint8_t> b(vec.size() * sizeof(vec[0]));
        std::memcpy(b.data(), vec.data(), b.size());
        return b;
    };
    if (half) {
        myQ = bytesOf(slice(qh, c, c.Hq, c.h, first, len));
        myK = bytesOf(slice(kh, c, c.Hkv, c.h, first, len));
        myV = bytesOf(slice(vh, c, c.Hkv, c.dv, first, len));
    } else {
        myQ = bytesOf(slice(q, c, c.Hq, c.h, first, len));
        myK = bytesOf(slice(k, c, c.Hkv, c.h, first, len));
        myV = bytesOf(slice(v, c, c.Hkv, c.dv, first, len));
    }
    std::vector<uint8_t> mine(size_t(c.B) * c.Hq * len * c.dv * e, 0xff);
    PskMpiForwardInfo info{};
    info.batchSize = c.B;
    info.seqLen = len;
    info.q = myQ.data();
    info.k = myK.data();
    info.v = myV.data();
    info.out = mine.data();
    info.qBytes = myQ.size();
    info.kBytes = myK.size();
    info.vBytes = myV.size();
    info.outBytes = mine.size();
    PskMpiForwardStats stats{};
    char message[512] = {};
    result = pskMpiAttentionForwardHost(attention, MPI_COMM_WORLD, &info, &stats, message, sizeof(message));
    check(result == PSK_SUCCESS, c.name + ": pskMpiAttentionForwardHost: " + pskResultToString(result) + " " + message);
    check(stats.firstToken == first && stats.totalTokens == c.n, c.name + ": stats.firstToken / totalTokens");

    // Compare with the whole forward's rows of this chunk.
    auto value = [&](const std::vector<uint8_t>& bytes, size_t i) {
        if (half) {
            uint16_t x;
            std::memcpy(&x, &bytes[2 * i], 2);
            return fromHalf(x);
        }
        float x;
        std::memcpy(&x, &bytes[4 * i], 4);
        return x;
    };
    std::vector<float> wholeF(whole.size() / e);
    for (size_t i = 0; i < wholeF.size(); ++i) wholeF[i] = value(whole, i);
    const std::vector<float> want = slice(wholeF, c, c.Hq, c.dv, first, len);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        worst = std::fmax(worst, std::fabs(double(value(mine, i)) - want[i]));
        scale = std::fmax(scale, std::fabs(double(want[i])));
    }
    const double relative = worst / std::fmax(scale, 1e-30);
    // float32: 1e-5, the bound docs/SEQUENCE_PARALLEL.md gives for a rank's rows against one
    // forward over the whole sequence. 16-bit storage: the output is rounded to the storage type, so
    // rows may differ by an ulp of it (2^-11 relative for float16).
    const double threshold = half ? 2e-3 : 1e-5;
    check(relative <= threshold, c.name + ": relative max error " + formatError(relative));
    // The control: the chunk attended on its own (no state) differs from the whole forward's rows
    // past rank 0, so the comparison above can tell a lost prefix.
    if (rank > 0 && result == PSK_SUCCESS) {
        std::vector<uint8_t> alone(mine.size());
        PskForwardHostInfo a{};
        a.batchSize = c.B;
        a.seqLen = len;
        a.q = myQ.data();
        a.k = myK.data();
        a.v = myV.data();
        a.out = alone.data();
        a.qBytes = myQ.size();
        a.kBytes = myK.size();
        a.vBytes = myV.size();
        a.outBytes = alone.size();
        check(pskAttentionForwardHost(attention, &a) == PSK_SUCCESS, c.name + ": the chunk alone");
        double apart = 0;
        for (size_t i = 0; i < want.size(); ++i) apart = std::fmax(apart, std::fabs(double(value(alone, i)) - want[i]));
        check(apart / std::fmax(scale, 1e-30) > 1e-3, c.name + ": the chunk alone matches the whole forward (the check cannot fail)");
    }
    double maxRelative = 0;
    MPI_Allreduce(&relative, &maxRelative, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    uint64_t sent = stats.boundaryBytesSent, scan = stats.scanBytes;
    uint64_t sentMax = 0;
    MPI_Reduce(&sent, &sentMax, 1, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        std::printf("%-44s ranks %d  n %6u  max rel error %.2e  scan bytes/rank %llu  boundary bytes sent (max rank) %llu\n",
                    c.name.c_str(), ranks, c.n, maxRelative, (unsigned long long)scan, (unsigned long long)sentMax);
    pskDestroyAttention(attention);
}

/** A bad-input case: every rank must fail, with `code` on rank `culprit` and the same message everywhere. */
void expectCollectiveError(PskContext ctx, const std::string& name, int culprit, PskResult code, const std::string& needle,
                           void (*spoil)(Case&, PskMpiForwardInfo&, bool isCulprit)) {
    Case c{name, 64};
    c.split.assign(size_t(ranks), 16);
    PskMpiForwardInfo info{};
    spoil(c, info, rank == culprit);
    PskAttention attention = createAttention(ctx, c, rank == culprit && name == "ConfigMismatch" ? 32 : 0);
    if (!attention) return;
    const uint32_t len = info.seqLen;
    const size_t B = info.batchSize ? info.batchSize : 1;
    std::vector<float> q = randomNormal(B * c.Hq * 16 * c.h, 4), k = randomNormal(B * c.Hkv * 16 * c.h, 5),
                       v = randomNormal(B * c.Hkv * 16 * c.dv, 6);
    std::vector<float> out(B * c.Hq * 16 * c.dv, 123.0f);
    info.q = info.q == reinterpret_cast<const void*>(1) ? nullptr : q.data();
    info.k = k.data();
    info.v = v.data();
    info.out = out.data();
    info.qBytes = B * c.Hq * len * c.h * 4;
    info.kBytes = B * c.Hkv * len * c.h * 4;
    info.vBytes = B * c.Hkv * len * c.dv * 4;
    info.outBytes = B * c.Hq * len * c.dv * 4;
    char message[512] = {};
    const PskResult result = pskMpiAttentionForwardHost(attention, MPI_COMM_WORLD, &info, nullptr, message, sizeof(message));
    const PskResult want = rank == culprit ? code : PSK_ERROR_INVALID_ARGUMENT;
    check(result == want, name + ": returned " + pskResultToString(result) + ", expected " + pskResultToString(want) + " (" + message + ")");
    check(std::string(message).find(needle) != std::string::npos, name + ": message \"" + message + "\" lacks \"" + needle + "\"");
    bool untouched = true;
    for (float x : out) untouched = untouched && x == 123.0f;
    check(untouched, name + ": out was written");
    // The same sentence on every rank.
    char first[512] = {};
    std::memcpy(first, message, sizeof(first));
    MPI_Bcast(first, sizeof(first), MPI_CHAR, 0, MPI_COMM_WORLD);
    check(std::strcmp(first, message) == 0, name + ": rank 0 says \"" + first + "\", this rank \"" + message + "\"");
    if (rank == 0) std::printf("%-44s ranks %d  every rank failed: %s\n", name.c_str(), ranks, message);
    pskDestroyAttention(attention);
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;

    PskContextCreateInfo ci{};
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    ci.flags = require && require[0] == '1' ? PSK_CONTEXT_ENABLE_VALIDATION_BIT | PSK_CONTEXT_REQUIRE_VALIDATION_BIT : 0;
    ci.messageCallback = onMessage;
    PskContext ctx = nullptr;
    PskResult result = pskCreateContext(&ci, &ctx);
    check(result == PSK_SUCCESS, std::string("pskCreateContext: ") + pskResultToString(result));

    if (ctx) {
        std::vector<Case> cases;
        // Equal chunks on block boundaries (b = 64), local exact and not.
        cases.push_back({"aligned_localexact", uint32_t(256 * ranks), {}});
        cases.push_back({"aligned_sketched_local", uint32_t(256 * ranks), {}, false});
        // Chunks off block boundaries, of uneven lengths.
        Case uneven{"uneven_localexact", 0, {}};
        for (int r = 0; r < ranks; ++r) uneven.split.push_back(uint32_t(37 + 101 * r));
        for (uint32_t s : uneven.split) uneven.n += s;
        cases.push_back(uneven);
        Case unevenSketched = uneven;
        unevenSketched.name = "uneven_sketched_local";
        unevenSketched.localExact = false;
        cases.push_back(unevenSketched);
        // Chunks shorter than a block: a boundary block gathers rows from several ranks.
        Case tiny{"tiny_chunks_localexact", uint32_t(5 * ranks), {}};
        tiny.split.assign(size_t(ranks), 5);
        tiny.b = 16;
        cases.push_back(tiny);
        // GQA, B = 2, BNHD, dv != h.
        Case gqa{"gqa_B2_bnhd_localexact", uint32_t(100 * ranks + 3), {}};
        gqa.Hq = 4;
        gqa.Hkv = 2;
        gqa.B = 2;
        gqa.dv = 24;
        gqa.layout = PSK_LAYOUT_BNHD;
        cases.push_back(gqa);
        if (!quick) {
            Case longCase{"long_64k_localexact", 65536, {}};
            longCase.b = 256;
            longCase.Hq = longCase.Hkv = 1;
            cases.push_back(longCase);
        }
        for (const Case& c : cases) runCase(ctx, c);

        // 16-bit storage: decode states accept float16 attention objects (their state and blobs
        // stay float32), so the sequence-parallel forward runs and its rows must match.
        {
            Case f16{"f16_localexact", uint32_t(200 * ranks + 17), {}};
            f16.dataType = PSK_DATA_TYPE_FLOAT16;
            PskAttention probe = createAttention(ctx, f16);
            PskDecodeState state = nullptr;
            PskDecodeStateCreateInfo dc{};
            const bool decodes = probe && pskCreateDecodeState(probe, &dc, &state) == PSK_SUCCESS;
            pskDestroyDecodeState(state);
            pskDestroyAttention(probe);
            check(decodes, "f16: a float16 attention must have a decode state");
            if (decodes) runCase(ctx, f16);
        }
        if (ranks > 1) {
            expectCollectiveError(ctx, "ZeroTokens", 1, PSK_ERROR_INVALID_SHAPE, "rank 1: seqLen is 0",
                                  [](Case&, PskMpiForwardInfo& i, bool culprit) { i.seqLen = culprit ? 0 : 16; });
            expectCollectiveError(ctx, "ConfigMismatch", ranks - 1, PSK_ERROR_INVALID_ARGUMENT, "block size",
                                  [](Case&, PskMpiForwardInfo& i, bool) { i.seqLen = 16; });
            expectCollectiveError(ctx, "BatchMismatch", 0, PSK_ERROR_INVALID_ARGUMENT, "batchSize",
                                  [](Case&, PskMpiForwardInfo& i, bool culprit) {
                                      i.seqLen = 16;
                                      i.batchSize = culprit ? 1 : 2;  // the culprit's buffers match B = 1
                                  });
            expectCollectiveError(ctx, "NullQ", ranks - 1, PSK_ERROR_INVALID_ARGUMENT, "NULL",
                                  [](Case&, PskMpiForwardInfo& i, bool culprit) {
                                      i.seqLen = 16;
                                      if (culprit) i.q = reinterpret_cast<const void*>(1);  // replaced by NULL
                                  });
        }
        pskDestroyContext(ctx);
    }
    check(validationMessages == 0, std::to_string(validationMessages) + " validation messages");
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) std::printf("%s: %d failure(s) over %d rank(s)\n", total ? "FAILED" : "PASSED", total, ranks);
    MPI_Finalize();
    return total ? 1 : 0;
}
