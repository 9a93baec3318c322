// Sequence parallelism over MPI (include/polysketch/polysketch_mpi.h, docs/SEQUENCE_PARALLEL.md).
//
// Built only where MPI is found, as its own library on top of the public C API: the decode state
// and its documented blob (docs/DECODING.md, "Serialization") carry everything between ranks.
// Per call, on every rank:
//   1. agree: all-gather a 64-byte record (this rank's status, B, n_r, the attention's config and
//      sketch hash from a fresh state's blob header), so every rank sees every rank's problem;
//   2. reduce: a state-only prefill of the chunk gives S_r = sum over its tokens of
//      phi(k_j)^T [v_j | 1] (the blob's z plus, local exact, the unfinished block's sum);
//   3. scan: MPI_Exscan of S_r (float32, as the single-process scan adds) gives E_r, everything
//      before the chunk;
//   4. boundary (local exact only): the rows of the block that straddles the chunk's start, i.e.
//      tokens floor(o_r / b) b .. o_r - 1, come from the ranks that hold them (MPI_Alltoallv);
//   5. initial state: a prefill of those rows gives their rows and their sum U_r; the state's blob
//      is rewritten with position o_r and z = E_r - U_r (the rows' own sum stays in the unfinished
//      block, where one forward over the whole sequence would have it), sealed, restored;
//   6. finish: one forward that continues the state (PskForwardHostInfo.state) writes the chunk's
//      rows into scratch; an all-reduce of the status decides whether they are copied to out.
#include "polysketch/polysketch_mpi.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "util/xxh64.hpp"

namespace {

// The blob's fixed header (docs/DECODING.md): magic 0-7, version 8-11, config 12-55 (11 x u32),
// sketch hash 56-63, B 64-67, capacity 68-71, then B u64 positions, the data, an 8-byte checksum.
constexpr size_t kConfigAt = 12, kHashAt = 56, kHeaderBytes = 72, kTrailerBytes = 8;
enum ConfigField { kKind, kDegree, kSketchLength, kBlockSize, kHeadDim, kValueDim, kQueryHeads, kKvHeads, kFlags, kScale, kDataType, kFields };
constexpr uint32_t kCausal = 1, kLocalExact = 2;

void put64(uint8_t* p, uint64_t x) { std::memcpy(p, &x, 8); }

/** The record every rank all-gathers first: 64 bytes. */
struct Agreement {
    int32_t status;  // PskResult of this rank's own checks
    uint32_t batch;
    uint32_t seqLen;
    uint32_t config[kFields];
    uint64_t sketchHash;
};
static_assert(sizeof(Agreement) == 64, "the agreement record is 64 bytes");

struct Failure {
    PskResult code = PSK_SUCCESS;
    std::string message;
    void set(PskResult c, const char* format, ...) __attribute__((format(printf, 3, 4))) {
        if (code != PSK_SUCCESS) return;  // the first problem is the one reported
        char text[512];
        va_list args;
        va_start(args, format);
        std::vsnprintf(text, sizeof(text), format, args);
        va_end(args);
        code = c;
        message = text;
    }
};

const char* configFieldName(int f) {
    static const char* names[kFields] = {"kind", "degree", "sketch size", "block size", "head dim", "value dim",
                                         "query heads", "key/value heads", "flags", "scale", "data type"};
    return names[f];
}

/** A decode state destroyed with the scope. */
struct State {
    PskDecodeState handle = nullptr;
    ~State() { pskDestroyDecodeState(handle); }
};

std::vector<uint8_t> serialize(PskDecodeState state, PskResult& code) {
    size_t size = 0;
    code = pskSerializeDecodeState(state, nullptr, &size);
    std::vector<uint8_t> blob(code == PSK_SUCCESS ? size : 0);
    if (code == PSK_SUCCESS) code = pskSerializeDecodeState(state, blob.data(), &size);
    return blob;
}

/** The geometry a blob's header describes. */
struct Geometry {
    uint32_t B = 0, Hq = 0, Hkv = 0, h = 0, dv = 0, b = 0, features = 0;
    bool local = false;
    size_t elementBytes = 4;
    size_t stateFloats() const { return size_t(B) * Hkv * features * (dv + 1); }  // z, or the block's sum
    size_t dataAt() const { return kHeaderBytes + size_t(B) * 8; }
};

Geometry geometryOf(const uint32_t* config, uint32_t batch) {
    Geometry g;
    g.B = batch;
    g.Hq = config[kQueryHeads];
    g.Hkv = config[kKvHeads];
    g.h = config[kHeadDim];
    g.dv = config[kValueDim];
    g.b = config[kBlockSize];
    const uint32_t R = config[kSketchLength];
    g.features = R * (R + 1) / 2;
    g.local = (config[kFlags] & kLocalExact) != 0;
    g.elementBytes = config[kDataType] == uint32_t(PSK_DATA_TYPE_FLOAT32) ? 4 : 2;
    return g;
}

/** Element (b, head, t, 0) of a [B, H, n, dim] tensor in the attention's layout, in elements. */
size_t elementOffset(bool bnhd, uint32_t H, uint64_t n, uint32_t dim, uint32_t b, uint32_t head, uint64_t t) {
    return bnhd ? ((size_t(b) * n + t) * H + head) * dim : ((size_t(b) * H + head) * n + t) * dim;
}

bool mpiOk(int rc, Failure& failure, const char* what) {
    if (rc == MPI_SUCCESS) return true;
    failure.set(PSK_ERROR_COMMUNICATION, "%s failed (MPI error %d)", what, rc);
    return false;
}

}  // namespace

extern "C" PSK_MPI_API PskResult pskMpiAttentionForwardHost(PskAttention attention, MPI_Comm comm, const PskMpiForwardInfo* info,
                                                        PskMpiForwardStats* stats, char* message, size_t messageSize) {
    const double start = MPI_Wtime();
    double communication = 0;
    PskMpiForwardStats st{};
    Failure local;  // this rank's own problem
    auto finish = [&](PskResult code, const std::string& text) {
        if (message && messageSize) std::snprintf(message, messageSize, "%s", text.c_str());
        st.seconds = MPI_Wtime() - start;
        st.communicationSeconds = communication;
        if (stats) *stats = st;
        return code;
    };
    int rank = 0, ranks = 1;
    if (comm == MPI_COMM_NULL) return finish(PSK_ERROR_INVALID_ARGUMENT, "comm is MPI_COMM_NULL");
    if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &ranks) != MPI_SUCCESS)
        return finish(PSK_ERROR_COMMUNICATION, "MPI_Comm_rank / MPI_Comm_size failed");

    // 1. This rank's own checks, then the agreement.
    Agreement mine{};
    mine.batch = info && info->batchSize ? info->batchSize : 1;
    mine.seqLen = info ? info->seqLen : 0;
    State fresh;
    std::vector<uint8_t> freshBlob;
    if (!attention) local.set(PSK_ERROR_INVALID_ARGUMENT, "attention is NULL");
    if (!info) local.set(PSK_ERROR_INVALID_ARGUMENT, "info is NULL");
    if (local.code == PSK_SUCCESS) {
        PskDecodeStateCreateInfo create{};
        create.batchSize = mine.batch;
        const PskResult c = pskCreateDecodeState(attention, &create, &fresh.handle);
        if (c != PSK_SUCCESS) local.set(c, "pskCreateDecodeState failed: %s (sequence parallelism needs a causal polysketch attention that decodes)", pskResultToString(c));
    }
    if (local.code == PSK_SUCCESS) {
        PskResult c;
        freshBlob = serialize(fresh.handle, c);
        if (c != PSK_SUCCESS) local.set(c, "pskSerializeDecodeState failed: %s", pskResultToString(c));
    }
    Geometry g;
    if (local.code == PSK_SUCCESS) {
        std::memcpy(mine.config, freshBlob.data() + kConfigAt, sizeof(mine.config));
        std::memcpy(&mine.sketchHash, freshBlob.data() + kHashAt, 8);
        g = geometryOf(mine.config, mine.batch);
        if (mine.config[kKind] != uint32_t(PSK_ATTENTION_KIND_POLYSKETCH) || !(mine.config[kFlags] & kCausal))
            local.set(PSK_ERROR_UNSUPPORTED, "sequence parallelism needs a causal POLYSKETCH attention");
    }
    if (local.code == PSK_SUCCESS) {
        const uint64_t n = info->seqLen, e = g.elementBytes;
        if (n == 0) local.set(PSK_ERROR_INVALID_SHAPE, "seqLen is 0 (every rank needs at least one token)");
        else if (!info->q || !info->k || !info->v || !info->out) local.set(PSK_ERROR_INVALID_ARGUMENT, "q, k, v or out is NULL");
        else if (info->qBytes < uint64_t(g.B) * g.Hq * n * g.h * e || info->kBytes < uint64_t(g.B) * g.Hkv * n * g.h * e ||
                 info->vBytes < uint64_t(g.B) * g.Hkv * n * g.dv * e || info->outBytes < uint64_t(g.B) * g.Hq * n * g.dv * e)
            local.set(PSK_ERROR_BUFFER_TOO_SMALL, "a size (qBytes, kBytes, vBytes or outBytes) is smaller than the chunk's shape needs");
    }
    mine.status = int32_t(local.code);
    std::vector<Agreement> all(static_cast<size_t>(ranks));
    double t = MPI_Wtime();
    Failure failure;
    if (!mpiOk(MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, comm), failure, "MPI_Allgather"))
        return finish(failure.code, failure.message);
    communication += MPI_Wtime() - t;
    st.agreementBytes = sizeof(Agreement) * uint64_t(ranks);

    // Every rank reaches the same verdict from the same records; when a rank failed its own
    // checks, every rank also gets its sentence (one more all-gather, only then).
    for (int r = 0; r < ranks && failure.code == PSK_SUCCESS; ++r) {
        if (all[r].status == PSK_SUCCESS) continue;
        constexpr int kTextBytes = 240;
        char text[kTextBytes] = {};
        std::snprintf(text, sizeof(text), "%s", local.message.c_str());
        std::vector<char> texts(size_t(ranks) * kTextBytes);
        if (!mpiOk(MPI_Allgather(text, kTextBytes, MPI_CHAR, texts.data(), kTextBytes, MPI_CHAR, comm), failure, "MPI_Allgather"))
            return finish(failure.code, failure.message);
        texts[size_t(r + 1) * kTextBytes - 1] = 0;
        failure.set(PskResult(all[r].status), "rank %d: %s", r, texts.data() + size_t(r) * kTextBytes);
    }
    for (int r = 1; r < ranks && failure.code == PSK_SUCCESS; ++r) {
        if (all[r].batch != all[0].batch)
            failure.set(PSK_ERROR_INVALID_ARGUMENT, "rank %d has batchSize %u, rank 0 has %u", r, all[r].batch, all[0].batch);
        for (int f = 0; f < kFields && failure.code == PSK_SUCCESS; ++f)
            if (all[r].config[f] != all[0].config[f])
                failure.set(PSK_ERROR_INVALID_ARGUMENT, "rank %d's attention differs from rank 0's in its %s (%u, rank 0: %u)", r,
                            configFieldName(f), all[r].config[f], all[0].config[f]);
        if (failure.code == PSK_SUCCESS && all[r].sketchHash != all[0].sketchHash)
            failure.set(PSK_ERROR_INVALID_ARGUMENT, "rank %d's sketch weights differ from rank 0's", r);
    }
    std::vector<uint64_t> offsets(size_t(ranks) + 1, 0);
    for (int r = 0; r < ranks; ++r) offsets[r + 1] = offsets[r] + all[r].seqLen;
    if (failure.code == PSK_SUCCESS && offsets[ranks] > (uint64_t(1) << 53))
        failure.set(PSK_ERROR_TOO_LARGE, "the ranks hold %llu tokens together, more than 2^53", (unsigned long long)offsets[ranks]);
    if (failure.code != PSK_SUCCESS) {
        // A rank that failed its own checks keeps its own code; the others report that a peer
        // failed (or disagreed). The sentence is the same everywhere.
        return finish(local.code != PSK_SUCCESS ? local.code : PSK_ERROR_INVALID_ARGUMENT, failure.message);
    }
    const uint64_t first = offsets[rank], n = info->seqLen;
    st.firstToken = first;
    st.totalTokens = offsets[ranks];
    PskAttentionInfo ai{};
    pskGetAttentionInfo(attention, &ai);  // cannot fail: the attention made a decode state above
    const bool bnhd = ai.layout == PSK_LAYOUT_BNHD;

    // 2. reduce: S_r from a state-only prefill of the chunk.
    std::vector<float> sums(g.stateFloats(), 0.0f);
    {
        State s;
        PskDecodeStateCreateInfo create{};
        create.batchSize = g.B;
        PskResult c = pskCreateDecodeState(attention, &create, &s.handle);
        if (c == PSK_SUCCESS) {
            PskDecodePrefillInfo p{};
            p.batchSize = g.B;
            p.seqLen = uint32_t(n);
            p.q = info->q;
            p.k = info->k;
            p.v = info->v;
            p.qBytes = info->qBytes;
            p.kBytes = info->kBytes;
            p.vBytes = info->vBytes;
            c = pskDecodePrefillHost(s.handle, &p);
        }
        std::vector<uint8_t> blob;
        if (c == PSK_SUCCESS) blob = serialize(s.handle, c);
        if (c != PSK_SUCCESS) {
            local.set(c, "the chunk's state-only prefill failed: %s", pskResultToString(c));
        } else {
            const float* z = reinterpret_cast<const float*>(blob.data() + g.dataAt());
            std::memcpy(sums.data(), z, sums.size() * 4);
            if (g.local)  // the unfinished block's sum follows z
                for (size_t i = 0; i < sums.size(); ++i) sums[i] += z[sums.size() + i];
        }
    }
    // Every rank learns whether every rank's reduction worked before anyone enters the scan.
    auto agreeOnStatus = [&](const char* stage) -> bool {
        int32_t status = int32_t(local.code), worst = 0;
        const double t0 = MPI_Wtime();
        if (!mpiOk(MPI_Allreduce(&status, &worst, 1, MPI_INT32_T, MPI_MIN, comm), failure, "MPI_Allreduce")) return false;
        communication += MPI_Wtime() - t0;
        st.agreementBytes += 4;
        if (worst == PSK_SUCCESS) return true;
        if (local.code != PSK_SUCCESS) failure.set(local.code, "rank %d: %s", rank, local.message.c_str());
        else failure.set(PSK_ERROR_INVALID_ARGUMENT, "another rank failed during %s (%s)", stage, pskResultToString(PskResult(worst)));
        return false;
    };
    if (!agreeOnStatus("the reduction")) return finish(failure.code, failure.message);

    // 3. scan: E_r, the sum over every token before this chunk (rank 0: none).
    std::vector<float> before(sums.size(), 0.0f);
    t = MPI_Wtime();
    if (!mpiOk(MPI_Exscan(sums.data(), before.data(), int(sums.size()), MPI_FLOAT, MPI_SUM, comm), failure, "MPI_Exscan"))
        return finish(failure.code, failure.message);
    communication += MPI_Wtime() - t;
    if (rank == 0) std::fill(before.begin(), before.end(), 0.0f);  // MPI leaves rank 0's undefined
    st.scanBytes = sums.size() * sizeof(float);

    // 4. boundary rows (local exact): tokens [blockStart, first) of this rank's chunk come from the
    // ranks that hold them. Every rank knows every chunk, so every count is computed, not sent.
    // Per (sender, receiver) the payload is, for each sequence and kv head, the k rows then the v
    // rows of the overlap, in the storage type.
    const size_t e = g.elementBytes;
    auto window = [&](int r) { return g.local ? std::make_pair(offsets[r] / g.b * g.b, offsets[r]) : std::make_pair(offsets[r], offsets[r]); };
    auto overlap = [&](int holder, int receiver) {  // tokens of `holder` inside `receiver`'s window
        const auto [lo, hi] = window(receiver);
        const uint64_t a = std::max(lo, offsets[holder]), c = std::min(hi, offsets[holder + 1]);
        return c > a ? std::make_pair(a, c) : std::make_pair(a, a);
    };
    const size_t rowBytes = size_t(g.B) * g.Hkv * (g.h + g.dv) * e;  // one token of every sequence and head
    std::vector<int> sendCounts(ranks, 0), sendDispl(ranks, 0), recvCounts(ranks, 0), recvDispl(ranks, 0);
    for (int r = 0; r < ranks; ++r) {
        const auto [a, c] = overlap(rank, r);
        sendCounts[r] = r > rank ? int((c - a) * rowBytes) : 0;
        const auto [a2, c2] = overlap(r, rank);
        recvCounts[r] = r < rank ? int((c2 - a2) * rowBytes) : 0;
        if (r) {
            sendDispl[r] = sendDispl[r - 1] + sendCounts[r - 1];
            recvDispl[r] = recvDispl[r - 1] + recvCounts[r - 1];
        }
    }
    const uint64_t blockStart = window(rank).first;
    const uint32_t u = uint32_t(first - blockStart);
    std::vector<uint8_t> sendBuf(size_t(sendDispl[ranks - 1] + sendCounts[ranks - 1]));
    std::vector<uint8_t> recvBuf(size_t(recvDispl[ranks - 1] + recvCounts[ranks - 1]));
    const uint8_t* k = static_cast<const uint8_t*>(info->k);
    const uint8_t* v = static_cast<const uint8_t*>(info->v);
    for (int r = rank + 1; r < ranks; ++r) {
        const auto [a, c] = overlap(rank, r);
        uint8_t* out = sendBuf.data() + sendDispl[r];
        for (uint32_t b = 0; b < g.B; ++b)
            for (uint32_t hd = 0; hd < g.Hkv; ++hd) {
                for (uint64_t tkn = a; tkn < c; ++tkn, out += g.h * e)
                    std::memcpy(out, k + elementOffset(bnhd, g.Hkv, n, g.h, b, hd, tkn - first) * e, g.h * e);
                for (uint64_t tkn = a; tkn < c; ++tkn, out += g.dv * e)
                    std::memcpy(out, v + elementOffset(bnhd, g.Hkv, n, g.dv, b, hd, tkn - first) * e, g.dv * e);
            }
    }
    if (g.local) {
        t = MPI_Wtime();
        if (!mpiOk(MPI_Alltoallv(sendBuf.data(), sendCounts.data(), sendDispl.data(), MPI_BYTE, recvBuf.data(), recvCounts.data(),
                                 recvDispl.data(), MPI_BYTE, comm),
                   failure, "MPI_Alltoallv"))
            return finish(failure.code, failure.message);
        communication += MPI_Wtime() - t;
    }
    st.boundaryBytesSent = sendBuf.size();
    st.boundaryBytesReceived = recvBuf.size();
    // The window's rows as the prefill takes them: [B, H, u, dim] in the attention's layout.
    std::vector<uint8_t> windowK(size_t(g.B) * g.Hkv * u * g.h * e), windowV(size_t(g.B) * g.Hkv * u * g.dv * e);
    for (int r = 0; r < rank; ++r) {
        const auto [a, c] = overlap(r, rank);
        const uint8_t* in = recvBuf.data() + recvDispl[r];
        for (uint32_t b = 0; b < g.B; ++b)
            for (uint32_t hd = 0; hd < g.Hkv; ++hd) {
                for (uint64_t tkn = a; tkn < c; ++tkn, in += g.h * e)
                    std::memcpy(windowK.data() + elementOffset(bnhd, g.Hkv, u, g.h, b, hd, tkn - blockStart) * e, in, g.h * e);
                for (uint64_t tkn = a; tkn < c; ++tkn, in += g.dv * e)
                    std::memcpy(windowV.data() + elementOffset(bnhd, g.Hkv, u, g.dv, b, hd, tkn - blockStart) * e, in, g.dv * e);
            }
    }

    // 5. the initial state: the window's rows prefilled (their sum U_r in the unfinished block,
    // z = 0 since u < b), then position := first and z := E_r - U_r.
    State state;
    {
        PskDecodeStateCreateInfo create{};
        create.batchSize = g.B;
        PskResult c = pskCreateDecodeState(attention, &create, &state.handle);
        std::vector<uint8_t> blob;
        if (c == PSK_SUCCESS && u > 0) {
            std::vector<uint8_t> zeros(size_t(g.B) * g.Hq * u * g.h * e, 0);  // queries: their rows are not kept
            PskDecodePrefillInfo p{};
            p.batchSize = g.B;
            p.seqLen = u;
            p.q = zeros.data();
            p.k = windowK.data();
            p.v = windowV.data();
            p.qBytes = zeros.size();
            p.kBytes = windowK.size();
            p.vBytes = windowV.size();
            c = pskDecodePrefillHost(state.handle, &p);
        }
        if (c == PSK_SUCCESS) blob = serialize(state.handle, c);
        if (c == PSK_SUCCESS) {
            for (uint32_t b = 0; b < g.B; ++b) put64(blob.data() + kHeaderBytes + 8 * size_t(b), first);
            float* z = reinterpret_cast<float*>(blob.data() + g.dataAt());
            const float* windowSum = z + before.size();  // local exact: the unfinished block's sum
            for (size_t i = 0; i < before.size(); ++i)
                z[i] = g.local ? before[i] - windowSum[i] : before[i];
            put64(blob.data() + blob.size() - kTrailerBytes, psk::xxh64(blob.data(), blob.size() - kTrailerBytes));
            c = pskRestoreDecodeState(state.handle, blob.data(), blob.size());
        }
        if (c != PSK_SUCCESS) local.set(c, "building the initial state failed: %s", pskResultToString(c));
    }

    // 6. finish the chunk from that state, into scratch; out is written only if every rank
    // succeeded. A chunk too long for one forward call (its workspace) goes in pieces of whole
    // blocks, each continuing the state: the same rows.
    std::vector<uint8_t> rows(size_t(g.B) * g.Hq * n * g.dv * e);
    uint64_t piece = n;
    for (uint64_t bytes = 0; local.code == PSK_SUCCESS && pskGetWorkspaceSize(attention, g.B, uint32_t(piece), &bytes) == PSK_ERROR_TOO_LARGE;) {
        if (piece <= g.b) {
            local.set(PSK_ERROR_TOO_LARGE, "a forward of %u tokens is too large for this device", g.b);
            break;
        }
        piece = std::max<uint64_t>(g.b, (piece / 2 + g.b - 1) / g.b * g.b);
    }
    const uint64_t Hq = g.Hq, Hkv = g.Hkv;
    // Default strides of the chunk's tensors (the pieces keep them and start further in).
    auto strides = [&](uint64_t H, uint64_t dim) {
        return bnhd ? PskTensorStrides{n * H * dim, dim, H * dim} : PskTensorStrides{H * n * dim, n * dim, dim};
    };
    const PskTensorStrides qs = strides(Hq, g.h), ks = strides(Hkv, g.h), vs = strides(Hkv, g.dv), os = strides(Hq, g.dv);
    for (uint64_t t0 = 0; t0 < n && local.code == PSK_SUCCESS; t0 += piece) {
        const uint64_t len = std::min(piece, n - t0);
        PskForwardHostInfo f{};
        f.batchSize = g.B;
        f.seqLen = uint32_t(len);
        f.q = static_cast<const uint8_t*>(info->q) + t0 * qs.token * e;
        f.k = static_cast<const uint8_t*>(info->k) + t0 * ks.token * e;
        f.v = static_cast<const uint8_t*>(info->v) + t0 * vs.token * e;
        f.out = rows.data() + t0 * os.token * e;
        f.qBytes = size_t(g.B) * Hq * n * g.h * e - t0 * qs.token * e;
        f.kBytes = size_t(g.B) * Hkv * n * g.h * e - t0 * ks.token * e;
        f.vBytes = size_t(g.B) * Hkv * n * g.dv * e - t0 * vs.token * e;
        f.outBytes = rows.size() - t0 * os.token * e;
        if (len < n) {
            f.qStrides = &qs;
            f.kStrides = &ks;
            f.vStrides = &vs;
            f.outStrides = &os;
        }
        f.state = state.handle;
        const PskResult c = pskAttentionForwardHost(attention, &f);
        if (c != PSK_SUCCESS) local.set(c, "the forward from the initial state failed: %s", pskResultToString(c));
    }
    if (!agreeOnStatus("the forward")) return finish(failure.code, failure.message);
    std::memcpy(info->out, rows.data(), rows.size());
    return finish(PSK_SUCCESS, "");
}
