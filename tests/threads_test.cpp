// The threading rules of include/polysketch/polysketch.h, exercised:
//  - one context shared by several threads, each creating, using and destroying its own attention
//    object at the same time (pipeline cache, allocator, queue submission and messages all shared);
//  - several contexts at once, each created, used and destroyed on its own thread.
// Every thread runs several forwards with its own kind, shape and inputs, and every output is
// checked against the float64 reference, so results that cross between threads, a buffer reused
// too early or a lost submission fail the test. The validation layer (required in CI) also checks
// Vulkan's own external-synchronization rules; any validation message fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "reference/reference.hpp"
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
};

/** What a thread saw, checked on the main thread. */
struct Outcome {
    std::string failure;  // empty on success
    double maxError = 0;
    uint32_t forwardsDone = 0;
};

constexpr double kMaxRelativeError = 1e-4;  // float32, as the conformance tests

std::string describe(const Job& j) {
    std::ostringstream s;
    s << (j.kind == PSK_ATTENTION_KIND_SOFTMAX ? "softmax" : "polynomial") << (j.kind == PSK_ATTENTION_KIND_SOFTMAX ? "" : std::to_string(j.degree))
      << (j.causal ? " causal" : " full") << " Hq=" << j.Hq << " Hkv=" << j.Hkv << " h=" << j.h << " dv=" << j.dv;
    return s.str();
}

/** Runs `job` on `context` from the calling thread; never throws, never uses gtest assertions. */
Outcome runJob(PskContext context, const Job& job) {
    Outcome outcome;
    const double scale = 1.0 / std::sqrt(double(job.h));
    PskAttentionCreateInfo info{};
    info.kind = job.kind;
    info.flags = job.causal ? PSK_ATTENTION_CAUSAL_BIT : 0;
    info.degree = job.degree;
    info.scale = job.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0.0f : float(scale);
    info.numQueryHeads = job.Hq;
    info.numKeyValueHeads = job.Hkv;
    info.headDim = job.h;
    info.valueDim = job.dv;
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

        const psk::ref::Shape shape{1, int(job.Hq), int(job.Hkv), int(n), int(job.h), int(job.dv)};
        std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want;
        if (job.kind == PSK_ATTENTION_KIND_SOFTMAX)
            psk::ref::softmaxAttention(shape, qd, kd, vd, scale, job.causal, want);
        else
            psk::ref::polynomialAttention(shape, qd, kd, vd, scale, int(job.degree), job.causal, want);
        const double err = psk::test::relativeMaxError(out, want);
        outcome.maxError = std::max(outcome.maxError, std::isnan(err) ? INFINITY : err);
        if (!(err <= kMaxRelativeError)) {
            outcome.failure = describe(job) + ": n=" + std::to_string(n) + " relative error " + psk::ref::formatError(err);
            break;
        }
        ++outcome.forwardsDone;
    }
    pskDestroyAttention(attention);
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
        EXPECT_LE(outcomes[i].maxError, kMaxRelativeError);
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

// -----------------------------------------------------------------------------------------------
// (b) Several contexts at once, each on its own thread
// -----------------------------------------------------------------------------------------------

TEST(SeparateContextThreads, EachThreadOwnContextMatchesReference) {
    constexpr size_t kThreads = 3;
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    const bool requireValidation = require && std::string(require) == "1";
    const std::vector<Job> work = jobs(kThreads + 1);  // skip the first pattern: other shapes
    std::vector<Outcome> outcomes(kThreads);
    std::vector<std::unique_ptr<MessageLog>> logs;
    for (size_t i = 0; i < kThreads; ++i) logs.push_back(std::make_unique<MessageLog>());

    runTogether(kThreads, [&](size_t i) {
        PskContextCreateInfo info{};
        info.flags = requireValidation ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
        info.messageCallback = &MessageLog::callback;
        info.messageUserData = logs[i].get();
        PskContext context = nullptr;
        const PskResult r = pskCreateContext(&info, &context);
        if (r != PSK_SUCCESS) {
            outcomes[i].failure = std::string("pskCreateContext: ") + pskResultToString(r);
            return;
        }
        outcomes[i] = runJob(context, work[i + 1]);
        pskDestroyContext(context);
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
