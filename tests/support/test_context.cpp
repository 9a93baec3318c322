#include "test_context.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace psk::test {

namespace {
// With validation on, the library enables synchronization validation (lib/vk/instance.cpp), which
// checks hazards inside each command buffer. This adds its check across submissions (a command
// buffer reading what an earlier submission wrote with no semaphore or fence wait between them),
// which the layer of Debian 12 (1.3.239) takes only from VK_LAYER_ENABLES or vk_layer_settings.txt,
// not from VkValidationFeaturesEXT. Set during static initialization, while the process has one
// thread (setenv is not thread-safe); a VK_LAYER_ENABLES of the developer's is left as it is. The
// psk processes that tests start inherit it.
[[maybe_unused]] const bool kQueueSubmitSyncValidation = [] {
#if defined(_WIN32)
    if (!std::getenv("VK_LAYER_ENABLES")) _putenv_s("VK_LAYER_ENABLES", kQueueSubmitValidationEnable);
#else
    setenv("VK_LAYER_ENABLES", kQueueSubmitValidationEnable, 0);
#endif
    return true;
}();
// Every polysketch forward of the tests hands its kernels a workspace of NaN
// (PolysketchPlan::poisonWorkspace): lavapipe's fresh memory is zero, a GPU's is not, and a kernel
// that reads workspace its call did not write must fail here rather than there. Same rules as
// above (a developer's own setting stays).
[[maybe_unused]] const bool kPoisonWorkspace = [] {
#if defined(_WIN32)
    if (!std::getenv("PSK_POISON_WORKSPACE")) _putenv_s("PSK_POISON_WORKSPACE", "1");
#else
    setenv("PSK_POISON_WORKSPACE", "1", 0);
#endif
    return true;
}();
}  // namespace

void MessageLog::clear() {
    std::lock_guard<std::mutex> lock(mutex);
    validation.clear();
    errors.clear();
    errorCodes.clear();
}

void MessageLog::callback(PskMessageSeverity severity, PskResult result, const char* message, void* user) {
    auto* log = static_cast<MessageLog*>(user);
    std::lock_guard<std::mutex> lock(log->mutex);
    if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) log->validation.emplace_back(message);
    if (severity == PSK_MESSAGE_SEVERITY_ERROR) {
        log->errors.emplace_back(message);
        log->errorCodes.push_back(result);
    }
}

MessageLog& sharedLog() {
    static MessageLog log;
    return log;
}

PskContext sharedContext() {
    // Created on first use and intentionally kept until process exit (one device per binary).
    static PskContext context = [] {
        PskContextCreateInfo info{};
        // CI sets PSK_REQUIRE_VALIDATION=1 so that a missing layer fails instead of passing silently.
        const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
        info.flags = require && std::string(require) == "1" ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
        info.messageCallback = &MessageLog::callback;
        info.messageUserData = &sharedLog();
        PskContext c = nullptr;
        const PskResult r = pskCreateContext(&info, &c);
        if (r != PSK_SUCCESS) {
            MessageLog& log = sharedLog();
            std::lock_guard<std::mutex> lock(log.mutex);
            ADD_FAILURE() << "pskCreateContext failed: " << pskResultToString(r) << ": "
                          << (log.errors.empty() ? std::string("(no message)") : log.errors.back());
            return static_cast<PskContext>(nullptr);
        }
        return c;
    }();
    return context;
}

void ContextTest::SetUp() {
    ctx = sharedContext();
    ASSERT_NE(ctx, nullptr);
    sharedLog().clear();
}

void ContextTest::TearDown() {
    MessageLog& log = sharedLog();
    std::lock_guard<std::mutex> lock(log.mutex);
    for (const std::string& m : log.validation) ADD_FAILURE() << "validation message: " << m;
}

std::string attentionPlan(PskAttention attention) {
    size_t size = 0;
    if (pskGetAttentionPlan(attention, nullptr, &size) != PSK_SUCCESS || size == 0) return {};
    std::string plan(size, '\0');
    if (pskGetAttentionPlan(attention, plan.data(), &size) != PSK_SUCCESS) return {};
    plan.resize(plan.find('\0') == std::string::npos ? plan.size() : plan.find('\0'));
    return plan;
}

std::string attentionPlan(PskContext context, const PskAttentionCreateInfo& info) {
    PskAttention attn = nullptr;
    if (pskCreateAttention(context, &info, &attn) != PSK_SUCCESS) return {};
    const std::string plan = attentionPlan(attn);
    pskDestroyAttention(attn);
    return plan;
}

std::vector<float> randomNormal(size_t count, uint64_t seed, float sigma) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(count);
    for (float& x : v) x = dist(rng);
    return v;
}

}  // namespace psk::test
