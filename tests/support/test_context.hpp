// Shared fixtures: one validated context per test binary, message capture, random tensors and the
// error metric every conformance test uses.
#pragma once

#include <polysketch/polysketch.h>

#include <gtest/gtest.h>

#include "reference/conformance_cases.hpp"
#include "reference/error_metric.hpp"

#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace psk::test {

/**
 * The validation layer's setting for synchronization validation across queue submissions; test
 * binaries that link these fixtures put it in VK_LAYER_ENABLES (when unset) before main.
 */
inline constexpr const char* kQueueSubmitValidationEnable = "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT";

/** Collects every message a context sends. */
struct MessageLog {
    std::mutex mutex;
    std::vector<std::string> validation;
    std::vector<std::string> errors;
    std::vector<PskResult> errorCodes;
    void clear();
    static void callback(PskMessageSeverity severity, PskResult result, const char* message, void* user);
};

/**
 * The context all tests of a binary share, created with validation layers on when installed.
 * Tests derive from ContextTest, whose TearDown fails the test on any validation message.
 */
PskContext sharedContext();
MessageLog& sharedLog();

class ContextTest : public ::testing::Test {
protected:
    void SetUp() override;
    void TearDown() override;
    PskContext ctx = nullptr;
};

/** An attention's plan text (pskGetAttentionPlan); "" where it cannot be read. */
std::string attentionPlan(PskAttention attention);
/** The plan of an attention created from `info` and destroyed again; "" where creation fails. */
std::string attentionPlan(PskContext context, const PskAttentionCreateInfo& info);

/** Normal random floats (mean 0, stddev `sigma`), deterministic per seed. */
std::vector<float> randomNormal(size_t count, uint64_t seed, float sigma = 1.0f);

/**
 * Threshold of the conformance metric for an output stored as `type`: `float32` (the kernel's own
 * float32 arithmetic) for float32, else the output rounding dominates: float16 2e-3 (ulp 2^-11
 * ~ 4.9e-4), bfloat16 1.2e-2 (ulp 2^-8 ~ 3.9e-3). One definition: reference/conformance_cases.hpp.
 */
using psk::conformance::outputThreshold;

/** The conformance error metric (see reference/error_metric.hpp). */
using psk::ref::relativeMaxError;

}  // namespace psk::test
