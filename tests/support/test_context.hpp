// Shared fixtures: one validated context per test binary, message capture, random tensors and the
// error metric every conformance test uses.
#pragma once

#include <polysketch/polysketch.h>

#include <gtest/gtest.h>

#include "reference/error_metric.hpp"

#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace psk::test {

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

/** Normal random floats (mean 0, stddev `sigma`), deterministic per seed. */
std::vector<float> randomNormal(size_t count, uint64_t seed, float sigma = 1.0f);

/** The conformance error metric (see reference/error_metric.hpp). */
using psk::ref::relativeMaxError;

}  // namespace psk::test
