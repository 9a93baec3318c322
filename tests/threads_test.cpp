// The threading rules of include/polysketch/polysketch.h, exercised:
//  - one context shared by several threads, each creating, using and destroying its own attention
//    object at the same time (pipeline cache, allocator, queue submission and messages all shared);
//  - several contexts at once, each created, used and destroyed on its own thread.
//  - polysketch forwards and polysketch decoding (prompt, then steps across block boundaries) on
//    the shared context, each thread with its own attention object and decode state.
// Every thread runs several forwards (or steps) with its own kind, shape, sketch and inputs, and
// every output row is checked against the float64 reference with the conformance thresholds
// (reference/conformance_cases.hpp), so results that cross between threads, a buffer reused too
// early or a lost submission fail the test. The validation layer (required in CI) also checks
// Vulkan's own external-synchronization rules; any validation message fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "sketch/sketch_weights.hpp"
#include "reference/sketch_fixtures.hpp"
#include "support/layer_lock.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;
using psk::test::MessageLog;

/** One thread's work: an attention configuration and how many forwards to run with it. */
struct Job {
    PskAttentionKind kind = PSK_ATTENTION_KIND_SOFTMAX;
    uint32_t degree = 4;
    bool causal = false;
    uint32_t Hq = 2, Hkv = 1, h = 16, dv = 16;
    uint32_t n = 40;  // first call; every later call grows it, so device buffers are reallocated
    uint32_t forwards = 3;
    uint64_t seed = 1;
    uint32_t growBy = 23;  // n grows by this much per call
    // Polysketch only: sketch size, block size, local exact; the random sketch comes from `seed`.
    uint32_t r = 8, b = 16;
    bool localExact = false;
    // Decoding (polysketch, causal): a decode state of one sequence prefilled with a prompt of n
    // tokens, then this many steps; 0: forwards.
    uint32_t steps = 0;
};

/** What a thread saw, checked on the main thread. */
struct Outcome {
    std::string failure;  // empty on success
    double maxError = 0;
    uint32_t forwardsDone = 0;
};

/** The float32 threshold of the conformance tests: 1e-4 softmax and polynomial, 2e-4 polysketch
 *  (forward and decoded rows against the float64 reference). */
double threshold(const Job& j) {
    return j.kind == PSK_ATTENTION_KIND_POLYSKETCH ? psk::conformance::kPolysketchFloat32 : psk::conformance::kQuadraticFloat32;
}

std::string describe(const Job& j) {
    std::ostringstream s;
    s << (j.kind == PSK_ATTENTION_KIND_SOFTMAX ? "softmax" : j.kind == PSK_ATTENTION_KIND_POLYNOMIAL ? "polynomial" : "polysketch")
      << (j.kind == PSK_ATTENTION_KIND_SOFTMAX ? "" : std::to_string(j.degree));
    if (j.kind == PSK_ATTENTION_KIND_POLYSKETCH) s << " r=" << j.r << " b=" << j.b << (j.localExact ? " local-exact" : "");
    s << (j.causal ? " causal" : " full") << " Hq=" << j.Hq << " Hkv=" << j.Hkv << " h=" << j.h << " dv=" << j.dv;
    if (j.steps) s << " decode prompt=" << j.n << " steps=" << j.steps;
    return s.str();
}

/** The attention of `job` (its own seeded sketch for polysketch) and the float64 reference's
 *  polysketch configuration with the very same sketch. */
PskAttentionCreateInfo attentionInfo(const Job& job, double scale, psk::ref::PolysketchConfig* ref) {
    PskAttentionCreateInfo info{};
    info.kind = job.kind;
    info.flags = (job.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (job.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    info.degree = job.degree;
    info.scale = job.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0.0f : float(scale);
    info.numQueryHeads = job.Hq;
    info.numKeyValueHeads = job.Hkv;
    info.headDim = job.h;
    info.valueDim = job.dv;
    if (job.kind == PSK_ATTENTION_KIND_POLYSKETCH) {
        info.sketchSize = job.r;
        info.blockSize = job.b;
        info.seed = job.seed;
        ref->sketch = psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(job.seed, job.degree, job.h, job.r)));
        ref->degree = int(job.degree);
        ref->scale = float(scale);
        ref->causal = job.causal;
        ref->localExact = job.localExact;
        ref->blockSize = int(job.b);
    }
    return info;
}

/** The float64 reference of `job`'s kind over q, k, v (BHND, one sequence of n tokens). */
std::vector<double> reference(const Job& job, const psk::ref::PolysketchConfig& config, double scale, uint32_t n,
                              const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
    const psk::ref::Shape shape{1, int(job.Hq), int(job.Hkv), int(n), int(job.h), int(job.dv)};
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want;
    if (job.kind == PSK_ATTENTION_KIND_SOFTMAX)
        psk::ref::softmaxAttention(shape, qd, kd, vd, scale, job.causal, want);
    else if (job.kind == PSK_ATTENTION_KIND_POLYNOMIAL)
        psk::ref::polynomialAttention(shape, qd, kd, vd, scale, int(job.degree), job.causal, want);
    else
        psk::ref::polysketchAttention(shape, qd, kd, vd, config, want);
    return want;
}

/** Runs `job` on `context` from the calling thread; never throws, never uses gtest assertions. */
Outcome runJob(PskContext context, const Job& job) {
    Outcome outcome;
    const double scale = 1.0 / std::sqrt(double(job.h));
    psk::ref::PolysketchConfig config;
    const PskAttentionCreateInfo info = attentionInfo(job, scale, &config);
    PskAttention attention = nullptr;
    PskResult r = pskCreateAttention(context, &info, &attention);
    if (r != PSK_SUCCESS) {
        outcome.failure = describe(job) + ": pskCreateAttention: " + pskResultToString(r);
        return outcome;
    }
    for (uint32_t call = 0; call < job.forwards; ++call) {
        const uint32_t n = job.n + job.growBy * call;
        const uint64_t seed = job.seed * 1000 + call;
        const auto q = psk::test::randomNormal(size_t(job.Hq) * n * job.h, seed + 1);
        const auto k = psk::test::randomNormal(size_t(job.Hkv) * n * job.h, seed + 2);
        const auto v = psk::test::randomNormal(size_t(job.Hkv) * n * job.dv, seed + 3);
        std::vector<float> out(size_t(job.Hq) * n * job.dv, NAN);
        PskForwardHostInfo fwd{};
        fwd.seqLen = n;
        fwd.q = q.data();
        fwd.k = k.data();
        fwd.v = v.data();
        fwd.out = out.data();
        fwd.qBytes = q.size() * sizeof(float);
        fwd.kBytes = k.size() * sizeof(float);
        fwd.vBytes = v.size() * sizeof(float);
        fwd.outBytes = out.size() * sizeof(float);
        r = pskAttentionForwardHost(attention, &fwd);
        if (r != PSK_SUCCESS) {
            outcome.failure = describe(job) + ": pskAttentionForwardHost: " + pskResultToString(r);
            break;
        }
        // A misuse on the way (seqLen 0): its ERROR message reaches the callback from this thread,
        // concurrently with the other threads' messages.
        PskForwardHostInfo bad = fwd;
        bad.seqLen = 0;
        if (pskAttentionForwardHost(attention, &bad) != PSK_ERROR_INVALID_SHAPE) {
            outcome.failure = describe(job) + ": seqLen 0 did not give PSK_ERROR_INVALID_SHAPE";
            break;
        }

        const double err = psk::test::relativeMaxError(out, reference(job, config, scale, n, q, k, v));
        outcome.maxError = std::max(outcome.maxError, std::isnan(err) ? INFINITY : err);
        if (!(err <= threshold(job))) {
            outcome.failure = describe(job) + ": n=" + std::to_string(n) + " relative error " + psk::ref::formatError(err);
            break;
        }
        ++outcome.forwardsDone;
    }
    pskDestroyAttention(attention);
    return outcome;
}

/**
 * Runs `job` as decoding on `context` from the calling thread: its own attention and decode state
 * (one sequence), the prompt's n tokens prefilled, then `steps` steps; every row (prompt and steps)
 * against the float64 reference over the whole sequence. Never throws, never uses gtest assertions.
 */
Outcome runDecodeJob(PskContext context, const Job& job) {
    Outcome outcome;
    const double scale = 1.0 / std::sqrt(double(job.h));
    psk::ref::PolysketchConfig config;
    const PskAttentionCreateInfo info = attentionInfo(job, scale, &config);
    PskAttention attention = nullptr;
    PskResult r = pskCreateAttention(context, &info, &attention);
    if (r != PSK_SUCCESS) {
        outcome.failure = describe(job) + ": pskCreateAttention: " + pskResultToString(r);
        return outcome;
    }
    PskDecodeStateCreateInfo stateInfo{};
    stateInfo.batchSize = 1;
    PskDecodeState state = nullptr;
    r = pskCreateDecodeState(attention, &stateInfo, &state);
    if (r != PSK_SUCCESS) {
        pskDestroyAttention(attention);
        outcome.failure = describe(job) + ": pskCreateDecodeState: " + pskResultToString(r);
        return outcome;
    }

    // The whole sequence, BHND [1][H][N][d]; the prompt is its first n tokens, step t its token n + t.
    const uint32_t P = job.n, N = job.n + job.steps;
    const auto q = psk::test::randomNormal(size_t(job.Hq) * N * job.h, job.seed * 1000 + 1);
    const auto k = psk::test::randomNormal(size_t(job.Hkv) * N * job.h, job.seed * 1000 + 2);
    const auto v = psk::test::randomNormal(size_t(job.Hkv) * N * job.dv, job.seed * 1000 + 3);
    auto tokens = [](const std::vector<float>& x, uint32_t heads, uint32_t d, uint32_t first, uint32_t count, uint32_t total) {
        std::vector<float> y(size_t(heads) * count * d);
        for (uint32_t hd = 0; hd < heads; ++hd)
            std::copy_n(x.begin() + (size_t(hd) * total + first) * d, size_t(count) * d, y.begin() + size_t(hd) * count * d);
        return y;
    };
    std::vector<float> out(size_t(job.Hq) * N * job.dv, NAN);  // BHND, every row decoded

    const std::vector<float> pq = tokens(q, job.Hq, job.h, 0, P, N), pk = tokens(k, job.Hkv, job.h, 0, P, N),
                             pv = tokens(v, job.Hkv, job.dv, 0, P, N);
    std::vector<float> prompt(size_t(job.Hq) * P * job.dv, NAN);
    PskDecodePrefillInfo prefill{};
    prefill.seqLen = P;
    prefill.q = pq.data();
    prefill.k = pk.data();
    prefill.v = pv.data();
    prefill.out = prompt.data();
    prefill.qBytes = pq.size() * sizeof(float);
    prefill.kBytes = pk.size() * sizeof(float);
    prefill.vBytes = pv.size() * sizeof(float);
    prefill.outBytes = prompt.size() * sizeof(float);
    r = pskDecodePrefillHost(state, &prefill);
    if (r != PSK_SUCCESS) outcome.failure = describe(job) + ": pskDecodePrefillHost: " + pskResultToString(r);
    for (uint32_t hd = 0; hd < job.Hq && r == PSK_SUCCESS; ++hd)
        std::copy_n(prompt.begin() + size_t(hd) * P * job.dv, size_t(P) * job.dv, out.begin() + size_t(hd) * N * job.dv);

    for (uint32_t t = P; t < N && r == PSK_SUCCESS; ++t) {
        const std::vector<float> sq = tokens(q, job.Hq, job.h, t, 1, N), sk = tokens(k, job.Hkv, job.h, t, 1, N),
                                 sv = tokens(v, job.Hkv, job.dv, t, 1, N);
        std::vector<float> row(size_t(job.Hq) * job.dv, NAN);
        PskDecodeStepInfo step{};
        step.q = sq.data();
        step.k = sk.data();
        step.v = sv.data();
        step.out = row.data();
        step.qBytes = sq.size() * sizeof(float);
        step.kBytes = sk.size() * sizeof(float);
        step.vBytes = sv.size() * sizeof(float);
        step.outBytes = row.size() * sizeof(float);
        r = pskDecodeStepHost(state, &step);
        if (r != PSK_SUCCESS) {
            outcome.failure = describe(job) + ": pskDecodeStepHost at position " + std::to_string(t) + ": " + pskResultToString(r);
            break;
        }
        for (uint32_t hd = 0; hd < job.Hq; ++hd)
            std::copy_n(row.begin() + size_t(hd) * job.dv, job.dv, out.begin() + (size_t(hd) * N + t) * job.dv);
        ++outcome.forwardsDone;  // steps
    }
    uint64_t position = 0;
    if (r == PSK_SUCCESS && (pskGetDecodePosition(state, 0, &position) != PSK_SUCCESS || position != N))
        outcome.failure = describe(job) + ": position " + std::to_string(position) + " after the steps, not " + std::to_string(N);
    pskDestroyDecodeState(state);
    pskDestroyAttention(attention);
    if (!outcome.failure.empty()) return outcome;

    const double err = psk::test::relativeMaxError(out, reference(job, config, scale, N, q, k, v));
    outcome.maxError = std::isnan(err) ? INFINITY : err;
    if (!(err <= threshold(job)))
        outcome.failure = describe(job) + ": decoded rows: relative error " + psk::ref::formatError(err);
    return outcome;
}

/** Different kinds, masks, head counts and dims, so each thread's outputs are its own. */
std::vector<Job> jobs(size_t count) {
    const Job pattern[] = {
        {PSK_ATTENTION_KIND_SOFTMAX, 4, false, 2, 1, 16, 16, 40, 3, 0},
        {PSK_ATTENTION_KIND_SOFTMAX, 4, true, 4, 2, 32, 24, 33, 3, 0},
        {PSK_ATTENTION_KIND_POLYNOMIAL, 2, true, 2, 2, 16, 32, 50, 3, 0},
        {PSK_ATTENTION_KIND_POLYNOMIAL, 4, false, 3, 1, 64, 16, 29, 3, 0},
        {PSK_ATTENTION_KIND_POLYNOMIAL, 8, true, 1, 1, 32, 32, 45, 3, 0},
        {PSK_ATTENTION_KIND_POLYNOMIAL, 4, true, 4, 4, 16, 8, 61, 3, 0},
    };
    std::vector<Job> out;
    for (size_t i = 0; i < count; ++i) {
        Job j = pattern[i % (sizeof(pattern) / sizeof(pattern[0]))];
        j.seed = 17 + i;
        out.push_back(j);
    }
    return out;
}

/** Starts one thread per element of `work`, releases them together, joins them all. */
template <typename Fn>
void runTogether(size_t threads, Fn&& work) {
    std::atomic<size_t> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (size_t i = 0; i < threads; ++i)
        pool.emplace_back([&, i] {
            ++ready;
            while (!go.load()) std::this_thread::yield();
            work(i);
        });
    while (ready.load() < threads) std::this_thread::yield();
    go = true;
    for (auto& t : pool) t.join();
}

// -----------------------------------------------------------------------------------------------
// (a) One context, several threads, one attention object per thread
// -----------------------------------------------------------------------------------------------

class SharedContextThreads : public ContextTest {};

TEST_F(SharedContextThreads, EachThreadOwnAttentionMatchesReference) {
    constexpr size_t kThreads = 6;
    const std::vector<Job> work = jobs(kThreads);
    std::vector<Outcome> outcomes(kThreads);
    runTogether(kThreads, [&](size_t i) { outcomes[i] = runJob(ctx, work[i]); });

    for (size_t i = 0; i < kThreads; ++i) {
        SCOPED_TRACE("thread " + std::to_string(i) + ": " + describe(work[i]));
        EXPECT_EQ(outcomes[i].failure, "");
        EXPECT_EQ(outcomes[i].forwardsDone, work[i].forwards);
        EXPECT_LE(outcomes[i].maxError, threshold(work[i]));
    }
    // One ERROR message per misuse, each delivered whole (the callback ran concurrently).
    MessageLog& log = psk::test::sharedLog();
    std::lock_guard<std::mutex> lock(log.mutex);
    size_t expected = 0;
    for (const Outcome& o : outcomes) expected += o.forwardsDone;
    EXPECT_EQ(log.errors.size(), expected);
    for (size_t i = 0; i < log.errors.size(); ++i) {
        EXPECT_EQ(log.errorCodes[i], PSK_ERROR_INVALID_SHAPE) << log.errors[i];
        EXPECT_NE(log.errors[i].find("pskAttentionForwardHost"), std::string::npos) << log.errors[i];
    }
    log.errors.clear();
    log.errorCodes.clear();
}

TEST_F(SharedContextThreads, CreateAndDestroyWhileOthersRun) {
    // Every thread creates, uses and destroys three attention objects in a row, configurations
    // rotating between threads: creation and destruction overlap other threads' forwards (pipeline
    // cache hits, allocator frees and reuse).
    constexpr size_t kThreads = 4;
    std::vector<Job> work = jobs(kThreads);
    for (Job& j : work) j.forwards = 1;
    std::vector<Outcome> outcomes(kThreads * 3);
    runTogether(kThreads, [&](size_t i) {
        for (size_t round = 0; round < 3; ++round) outcomes[i * 3 + round] = runJob(ctx, work[(i + round) % kThreads]);
    });
    for (size_t i = 0; i < outcomes.size(); ++i) {
        SCOPED_TRACE("thread " + std::to_string(i / 3) + " round " + std::to_string(i % 3));
        EXPECT_EQ(outcomes[i].failure, "");
        EXPECT_EQ(outcomes[i].forwardsDone, 1u);
    }
    psk::test::sharedLog().clear();  // the misuse messages, counted by the test above
}

TEST_F(SharedContextThreads, ManySmallForwards) {
    // Many tiny calls from more threads than cores: submissions (vkQueueSubmit under the context's
    // queue mutex) come close together, which is where the validation layer's thread checks look.
    constexpr size_t kThreads = 8;
    std::vector<Job> work = jobs(kThreads);
    for (Job& j : work) {
        j.n = 3 + uint32_t(&j - work.data());
        j.forwards = 25;
        j.growBy = 0;
    }
    std::vector<Outcome> outcomes(kThreads);
    runTogether(kThreads, [&](size_t i) { outcomes[i] = runJob(ctx, work[i]); });
    for (size_t i = 0; i < kThreads; ++i) {
        SCOPED_TRACE("thread " + std::to_string(i) + ": " + describe(work[i]));
        EXPECT_EQ(outcomes[i].failure, "");
        EXPECT_EQ(outcomes[i].forwardsDone, work[i].forwards);
    }
    psk::test::sharedLog().clear();  // the misuse messages
}

TEST_F(SharedContextThreads, PolysketchForwardsAndDecodingMatchReference) {
    // Polysketch on the shared context: three threads run forwards (causal local exact, causal
    // sketched, full; n across several blocks and growing per call), three decode (a prompt, then
    // steps across block boundaries), each with its own attention, sketch (seed), inputs and, for
    // decoding, decode state. Two configurations (h = 16 and h = 32) are shared between threads,
    // so pipeline creation and cache lookups overlap too.
    auto polysketch = [](bool causal, bool localExact, uint32_t Hq, uint32_t Hkv, uint32_t h, uint32_t dv, uint32_t n, uint32_t steps) {
        Job j;
        j.kind = PSK_ATTENTION_KIND_POLYSKETCH;
        j.causal = causal;
        j.localExact = localExact;
        j.Hq = Hq;
        j.Hkv = Hkv;
        j.h = h;
        j.dv = dv;
        j.n = n;
        j.steps = steps;
        return j;
    };
    std::vector<Job> work = {
        polysketch(true, true, 2, 1, 16, 16, 40, 0),     // forwards: n = 40, 63, 86 (b = 16)
        polysketch(true, false, 4, 2, 32, 24, 33, 0),    //           n = 33, 56, 79
        polysketch(false, false, 2, 2, 16, 16, 29, 0),   //           n = 29, 52, 75
        polysketch(true, true, 2, 1, 16, 16, 21, 30),    // decoding: prompt 21, then to 51 tokens
        polysketch(true, false, 4, 2, 32, 24, 16, 27),   //           prompt of exactly one block, to 43
        polysketch(true, true, 4, 2, 32, 24, 5, 40),     //           prompt within a block, to 45
    };
    for (size_t i = 0; i < work.size(); ++i) work[i].seed = 101 + i;
    std::vector<Outcome> outcomes(work.size());
    runTogether(work.size(), [&](size_t i) { outcomes[i] = work[i].steps ? runDecodeJob(ctx, work[i]) : runJob(ctx, work[i]); });

    for (size_t i = 0; i < work.size(); ++i) {
        SCOPED_TRACE("thread " + std::to_string(i) + ": " + describe(work[i]));
        EXPECT_EQ(outcomes[i].failure, "");
        EXPECT_EQ(outcomes[i].forwardsDone, work[i].steps ? work[i].steps : work[i].forwards);
        EXPECT_LE(outcomes[i].maxError, psk::conformance::kPolysketchFloat32);
        RecordProperty("relative_max_error_thread" + std::to_string(i), psk::ref::formatError(outcomes[i].maxError));
    }
    psk::test::sharedLog().clear();  // the forward threads' misuse messages (seqLen 0)
}

// -----------------------------------------------------------------------------------------------
// (b) Several contexts at once, each on its own thread
// -----------------------------------------------------------------------------------------------

/** The sanitizer run without the layer (tools/sanitize.sh tsan turns it off this way). */
bool validationLayerOff() {
    const char* disabled = std::getenv("VK_LOADER_LAYERS_DISABLE");
    return disabled && *disabled;
}

TEST(SeparateContextThreads, EachThreadOwnContextMatchesReference) {
    constexpr size_t kThreads = 3;
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    const bool requireValidation = require && std::string(require) == "1";
    const std::vector<Job> work = jobs(kThreads + 1);  // skip the first pattern: other shapes
    std::vector<Outcome> outcomes(kThreads);
    std::vector<std::unique_ptr<MessageLog>> logs;
    for (size_t i = 0; i < kThreads; ++i) logs.push_back(std::make_unique<MessageLog>());

    // Creations and destructions one at a time, the jobs at once (support/layer_lock.hpp: the
    // validation layer's own race); no ordering when the layer is turned off (the sanitizer run).
    std::shared_mutex layerMaps;
    const psk::test::LayerLock layer{validationLayerOff() ? nullptr : &layerMaps};
    runTogether(kThreads, [&](size_t i) {
        PskContextCreateInfo info{};
        info.flags = requireValidation ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
        info.messageCallback = &MessageLog::callback;
        info.messageUserData = logs[i].get();
        PskResult r;
        const psk::test::LockedContext context = psk::test::createLockedContext(info, layer, &r);
        if (r != PSK_SUCCESS) {
            outcomes[i].failure = std::string("pskCreateContext: ") + pskResultToString(r);
            return;
        }
        const auto held = layer.shared();
        outcomes[i] = runJob(context.get(), work[i + 1]);
    });

    for (size_t i = 0; i < kThreads; ++i) {
        SCOPED_TRACE("context " + std::to_string(i) + ": " + describe(work[i + 1]));
        EXPECT_EQ(outcomes[i].failure, "");
        EXPECT_EQ(outcomes[i].forwardsDone, work[i + 1].forwards);
        std::lock_guard<std::mutex> lock(logs[i]->mutex);
        for (const std::string& m : logs[i]->validation) ADD_FAILURE() << "validation message: " << m;
        // Only the deliberate misuse messages, all on this context's own callback.
        EXPECT_EQ(logs[i]->errors.size(), outcomes[i].forwardsDone);
        for (PskResult code : logs[i]->errorCodes) EXPECT_EQ(code, PSK_ERROR_INVALID_SHAPE);
    }
}

}  // namespace
