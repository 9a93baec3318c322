// Misuse of the public C API: every invalid argument of every public function must return its
// specific PskResult, report exactly one ERROR message with that code naming the problem (when a
// context is there to carry it), and write nothing: out-handles keep a sentinel value, output
// arrays keep a sentinel pattern, stats stay untouched. The cases are tables, each run by one
// parameterized test: context create infos, attention create infos, forward calls, and the NULL
// handles and pointers of every function.
//
// A positive control in the same binary makes sure the misuse cases do not pass merely because
// every call fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "support/test_context.hpp"
#include "support/scoped_env.hpp"

namespace {

using psk::test::ScopedEnv;
using psk::test::ContextTest;
using psk::test::MessageLog;
using psk::test::sharedLog;

// Values no successful call would ever write.
const PskContext kContextSentinel = reinterpret_cast<PskContext>(uintptr_t(0xC0FFEE0));
const PskAttention kAttentionSentinel = reinterpret_cast<PskAttention>(uintptr_t(0xDEADBEE0));
constexpr uint32_t kOutSentinelBits = 0x7FBADBADu;  // a NaN payload: never a computed result
constexpr uint16_t kOutSentinel16 = 0xBADB;

// The tables' codes and kinds.
constexpr PskResult ARG = PSK_ERROR_INVALID_ARGUMENT, SHAPE = PSK_ERROR_INVALID_SHAPE, SMALL = PSK_ERROR_BUFFER_TOO_SMALL,
                    NONFINITE = PSK_ERROR_NON_FINITE_INPUT, LARGE = PSK_ERROR_TOO_LARGE, BAD_FILE = PSK_ERROR_BAD_FILE,
                    NO_DEVICE = PSK_ERROR_NO_DEVICE;
constexpr PskAttentionKind SOFTMAX = PSK_ATTENTION_KIND_SOFTMAX, POLYNOMIAL = PSK_ATTENTION_KIND_POLYNOMIAL,
                           POLYSKETCH = PSK_ATTENTION_KIND_POLYSKETCH;

bool containsNoCase(const std::string& haystack, const std::string& needle) {
    auto lower = [](std::string s) {
        std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
        return s;
    };
    return lower(haystack).find(lower(needle)) != std::string::npos;
}

/** Checks that `log` holds exactly one ERROR message, with `code`, mentioning `keyword`; clears it. */
void expectOneError(MessageLog& log, PskResult code, const std::string& keyword) {
    std::lock_guard<std::mutex> lock(log.mutex);
    EXPECT_EQ(log.errors.size(), 1u) << "expected exactly one ERROR message";
    ASSERT_EQ(log.errors.size(), log.errorCodes.size());
    for (size_t i = 0; i < log.errors.size(); ++i) {
        EXPECT_EQ(log.errorCodes[i], code) << "message: " << log.errors[i];
        EXPECT_TRUE(containsNoCase(log.errors[i], keyword))
            << "message \"" << log.errors[i] << "\" does not mention \"" << keyword << "\"";
    }
    log.errors.clear();
    log.errorCodes.clear();
}

/** No ERROR message at all (calls that have no context to report through). */
void expectNoError(MessageLog& log) {
    std::lock_guard<std::mutex> lock(log.mutex);
    EXPECT_TRUE(log.errors.empty()) << "unexpected message: " << (log.errors.empty() ? "" : log.errors[0]);
    log.errors.clear();
    log.errorCodes.clear();
}

/** A table case's test name: its own. */
template <typename Case>
std::string caseName(const ::testing::TestParamInfo<Case>& p) {
    return p.param.name;
}

// ---------------------------------------------------------------------------------------------
// Version, result strings, destroy(NULL)
// ---------------------------------------------------------------------------------------------

TEST(ApiBasics, VersionMatchesHeader) {
    EXPECT_EQ(pskGetVersion(), PSK_HEADER_VERSION);
    EXPECT_EQ(PSK_VERSION_MAJOR(pskGetVersion()), 0u);
    EXPECT_EQ(PSK_VERSION_MINOR(pskGetVersion()), 1u);
    EXPECT_EQ(PSK_VERSION_PATCH(pskGetVersion()), 0u);
}

TEST(ApiBasics, ResultToStringNamesEveryCodeDistinctly) {
    const struct {
        PskResult code;
        const char* name;
    } codes[] = {
        {PSK_SUCCESS, "PSK_SUCCESS"},
        {PSK_ERROR_INVALID_ARGUMENT, "PSK_ERROR_INVALID_ARGUMENT"},
        {PSK_ERROR_INVALID_SHAPE, "PSK_ERROR_INVALID_SHAPE"},
        {PSK_ERROR_UNSUPPORTED, "PSK_ERROR_UNSUPPORTED"},
        {PSK_ERROR_BUFFER_TOO_SMALL, "PSK_ERROR_BUFFER_TOO_SMALL"},
        {PSK_ERROR_NON_FINITE_INPUT, "PSK_ERROR_NON_FINITE_INPUT"},
        {PSK_ERROR_TOO_LARGE, "PSK_ERROR_TOO_LARGE"},
        {PSK_ERROR_OUT_OF_HOST_MEMORY, "PSK_ERROR_OUT_OF_HOST_MEMORY"},
        {PSK_ERROR_OUT_OF_DEVICE_MEMORY, "PSK_ERROR_OUT_OF_DEVICE_MEMORY"},
        {PSK_ERROR_NO_DEVICE, "PSK_ERROR_NO_DEVICE"},
        {PSK_ERROR_DEVICE_LOST, "PSK_ERROR_DEVICE_LOST"},
        {PSK_ERROR_VULKAN, "PSK_ERROR_VULKAN"},
        {PSK_ERROR_BAD_FILE, "PSK_ERROR_BAD_FILE"},
        {PSK_ERROR_INTERNAL, "PSK_ERROR_INTERNAL"},
        {PSK_ERROR_COMMUNICATION, "PSK_ERROR_COMMUNICATION"},
    };
    std::set<std::string> seen;
    for (const auto& c : codes) {
        const char* s = pskResultToString(c.code);
        ASSERT_NE(s, nullptr) << int(c.code);
        EXPECT_STREQ(s, c.name);
        EXPECT_TRUE(seen.insert(s).second) << "duplicate string " << s;
    }
    // Values that are not codes (within the enum's range of values, so well-defined in C++).
    for (int unknown : {1, 2, 15, -15, -16}) {
        const char* s = pskResultToString(static_cast<PskResult>(unknown));
        ASSERT_NE(s, nullptr) << unknown;
        EXPECT_TRUE(containsNoCase(s, "UNKNOWN")) << unknown << " -> " << s;
        EXPECT_EQ(seen.count(s), 0u) << "unknown value " << unknown << " maps to a real code's name " << s;
    }
}

TEST(ApiBasics, DestroyNullIsNoOp) {
    pskDestroyContext(nullptr);
    pskDestroyAttention(nullptr);
    SUCCEED();
}

// ---------------------------------------------------------------------------------------------
// pskCreateContext
// ---------------------------------------------------------------------------------------------

PskContextCreateInfo contextInfo(MessageLog& log) {
    PskContextCreateInfo info{};
    info.messageCallback = &MessageLog::callback;
    info.messageUserData = &log;
    return info;
}

TEST(CreateContextMisuse, NullCreateInfoAndNullOutHandle) {
    EXPECT_EQ(pskCreateContext(nullptr, nullptr), PSK_ERROR_INVALID_ARGUMENT);
}

TEST(CreateContextMisuse, NullOutHandleReportsThroughCallback) {
    MessageLog log;
    const PskContextCreateInfo info = contextInfo(log);
    EXPECT_EQ(pskCreateContext(&info, nullptr), PSK_ERROR_INVALID_ARGUMENT);
    expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "pContext");
}

/** A create info that must fail: the valid one changed by `mutate`, PSK_DEVICE set when deviceEnv is. */
struct ContextCase {
    const char* name;
    const char* deviceEnv;  // PSK_DEVICE during the call; NULL: as it is
    std::function<void(PskContextCreateInfo&)> mutate;
    PskResult code;
    const char* keyword;
};

void PrintTo(const ContextCase& c, std::ostream* os) { *os << c.name; }

class CreateContextInvalid : public ::testing::TestWithParam<ContextCase> {};

TEST_P(CreateContextInvalid, FailsWithCodeAndMessageAndNoHandle) {
    const ContextCase& c = GetParam();
    std::optional<ScopedEnv> env;
    if (c.deviceEnv) env.emplace("PSK_DEVICE", c.deviceEnv);
    MessageLog log;
    PskContextCreateInfo info = contextInfo(log);
    c.mutate(info);
    PskContext context = kContextSentinel;
    const PskResult r = pskCreateContext(&info, &context);
    EXPECT_EQ(r, c.code) << pskResultToString(r) << " instead of " << pskResultToString(c.code);
    EXPECT_EQ(context, kContextSentinel) << "the out-handle was written on error";
    if (r == PSK_SUCCESS && context != kContextSentinel) pskDestroyContext(context);
    expectOneError(log, c.code, c.keyword);
}

const ContextCase kContextCases[] = {
    {"UnknownFlag4", nullptr, [](PskContextCreateInfo& i) { i.flags = 0x4u; }, ARG, "flags"},
    {"UnknownFlag100", nullptr, [](PskContextCreateInfo& i) { i.flags = 0x100u; }, ARG, "flags"},
    {"UnknownFlagHigh", nullptr, [](PskContextCreateInfo& i) { i.flags = 0x80000000u; }, ARG, "flags"},
    {"UnknownFlagsAll", nullptr, [](PskContextCreateInfo& i) { i.flags = 0xFFFFFFFFu; }, ARG, "flags"},
    {"DeviceNameThatDoesNotExist", nullptr, [](PskContextCreateInfo& i) { i.device = "no-such-gpu"; }, NO_DEVICE,
     "no-such-gpu"},
    {"DeviceIndex99", nullptr, [](PskContextCreateInfo& i) { i.device = "99"; }, NO_DEVICE, "does not exist"},
    {"DeviceIndex2Pow32", nullptr, [](PskContextCreateInfo& i) { i.device = "4294967296"; }, NO_DEVICE, "does not exist"},
    {"DeviceIndexLeadingZeros", nullptr, [](PskContextCreateInfo& i) { i.device = "00000000000000000000099"; }, NO_DEVICE,
     "does not exist"},
    // With no selector in the create info, PSK_DEVICE chooses the device.
    {"DeviceFromEnvironmentThatDoesNotExist", "no-such-gpu", [](PskContextCreateInfo&) {}, NO_DEVICE, "no-such-gpu"},
};

INSTANTIATE_TEST_SUITE_P(Cases, CreateContextInvalid, ::testing::ValuesIn(kContextCases), caseName<ContextCase>);

TEST(CreateContextMisuse, RequiredValidationLayerMissing) {
    // Hide the installed layers from the loader: REQUIRE_VALIDATION must then fail, not run silently.
    ScopedEnv env("VK_LAYER_PATH", "/nonexistent-psk-layer-dir");
    MessageLog log;
    PskContextCreateInfo info = contextInfo(log);
    info.flags = PSK_CONTEXT_REQUIRE_VALIDATION_BIT;
    PskContext context = kContextSentinel;
    const PskResult r = pskCreateContext(&info, &context);
    if (r == PSK_SUCCESS) {
        pskDestroyContext(context);
        GTEST_SKIP() << "the loader still finds VK_LAYER_KHRONOS_validation (VK_LAYER_PATH ignored)";
    }
    EXPECT_EQ(r, PSK_ERROR_UNSUPPORTED);
    EXPECT_EQ(context, kContextSentinel);
    expectOneError(log, PSK_ERROR_UNSUPPORTED, "validation");
}

TEST(CreateContextMisuse, DeviceNoSuchGpuWithoutCallbackStillFails) {
    PskContextCreateInfo info{};
    info.device = "no-such-gpu";
    PskContext context = kContextSentinel;
    EXPECT_EQ(pskCreateContext(&info, &context), PSK_ERROR_NO_DEVICE);
    EXPECT_EQ(context, kContextSentinel);
}

// ---------------------------------------------------------------------------------------------
// Device queries
// ---------------------------------------------------------------------------------------------

PskDeviceInfo sentinelDeviceInfo() {
    PskDeviceInfo info;
    std::memset(&info, 0xAB, sizeof(info));
    return info;
}

bool sameBytes(const PskDeviceInfo& a, const PskDeviceInfo& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

TEST(DeviceQueryMisuse, PhysicalDeviceInfoBadIndexOrNull) {
    uint32_t count = 0;
    ASSERT_EQ(pskEnumerateDevices(&count), PSK_SUCCESS);
    ASSERT_GE(count, 1u);
    for (uint32_t index : {count, count + 1, 99u, 0xFFFFFFFFu}) {
        PskDeviceInfo info = sentinelDeviceInfo();
        EXPECT_EQ(pskGetPhysicalDeviceInfo(index, &info), PSK_ERROR_NO_DEVICE) << index;
        EXPECT_TRUE(sameBytes(info, sentinelDeviceInfo())) << "pInfo was written on error, index " << index;
    }
    EXPECT_EQ(pskGetPhysicalDeviceInfo(0, nullptr), PSK_ERROR_INVALID_ARGUMENT);
    // Positive control: index 0 exists.
    PskDeviceInfo info = sentinelDeviceInfo();
    EXPECT_EQ(pskGetPhysicalDeviceInfo(0, &info), PSK_SUCCESS);
    EXPECT_FALSE(sameBytes(info, sentinelDeviceInfo()));
}

class DeviceInfoMisuse : public ContextTest {};

TEST_F(DeviceInfoMisuse, PositiveControl) {
    PskDeviceInfo info = sentinelDeviceInfo();
    EXPECT_EQ(pskGetDeviceInfo(ctx, &info), PSK_SUCCESS);
    EXPECT_GT(std::strlen(info.name), 0u);
    EXPECT_LT(std::strlen(info.name), sizeof(info.name));
    EXPECT_GT(info.maxStorageBufferRange, 0u);
    expectNoError(sharedLog());
}

// ---------------------------------------------------------------------------------------------
// pskCreateAttention
// ---------------------------------------------------------------------------------------------

/**
 * Stores `value` in an enum field the way C code can: by its bytes. An out-of-range value never
 * exists as a C++ enum value here (a static_cast would be undefined behaviour), and the library
 * must read the field as an integer before its range check (with clang -O2 -fstrict-enums, a check
 * on the enum-typed value is optimized away).
 */
template <typename E>
void setRaw(E& field, int32_t value) {
    static_assert(sizeof(E) == sizeof(value), "the C enums are int-sized");
    std::memcpy(&field, &value, sizeof value);
}

PskAttentionCreateInfo validCreateInfo() {
    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_SOFTMAX;
    info.headDim = 16;
    return info;
}

class CreateAttentionMisuse : public ContextTest {};

TEST_F(CreateAttentionMisuse, PositiveControl) {
    PskAttention attention = kAttentionSentinel;
    const PskAttentionCreateInfo info = validCreateInfo();
    ASSERT_EQ(pskCreateAttention(ctx, &info, &attention), PSK_SUCCESS);
    EXPECT_NE(attention, kAttentionSentinel);
    EXPECT_NE(attention, nullptr);
    pskDestroyAttention(attention);
    expectNoError(sharedLog());
}

// ---------------------------------------------------------------------------------------------
// pskGetAttentionPlan
// ---------------------------------------------------------------------------------------------

TEST_F(CreateAttentionMisuse, AttentionPlanShortBuffer) {
    const PskAttentionCreateInfo info = validCreateInfo();
    PskAttention attention = nullptr;
    ASSERT_EQ(pskCreateAttention(ctx, &info, &attention), PSK_SUCCESS);
    size_t size = 0;

    // Positive control: the size query, then the text.
    ASSERT_EQ(pskGetAttentionPlan(attention, nullptr, &size), PSK_SUCCESS);
    ASSERT_GT(size, 1u);
    std::vector<char> text(size, '#');
    size_t given = size;
    ASSERT_EQ(pskGetAttentionPlan(attention, text.data(), &given), PSK_SUCCESS);
    EXPECT_EQ(given, size);
    EXPECT_EQ(text.back(), '\0');
    EXPECT_EQ(std::string(text.data()).rfind("attention_flash_fp32.softmax.f32 (generic) THREADS=", 0), 0u) << text.data();
    expectNoError(sharedLog());

    // One byte short: BUFFER_TOO_SMALL, the size needed, and nothing written.
    std::vector<char> shortText(size - 1, '#');
    given = size - 1;
    EXPECT_EQ(pskGetAttentionPlan(attention, shortText.data(), &given), PSK_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(given, size);
    EXPECT_TRUE(std::all_of(shortText.begin(), shortText.end(), [](char c) { return c == '#'; }));
    expectOneError(sharedLog(), PSK_ERROR_BUFFER_TOO_SMALL, "bytes");
    pskDestroyAttention(attention);
}

TEST_F(CreateAttentionMisuse, AttentionInfoReportsTheConfigurationWithDefaults) {
    PskAttentionInfo got{};
    PskAttentionCreateInfo info = validCreateInfo();
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    info.numQueryHeads = 4;
    info.numKeyValueHeads = 2;
    info.headDim = 32;
    info.valueDim = 0;  // defaults: dv = h, r = 32, b = 256, scale 1, degree 4
    info.layout = PSK_LAYOUT_BNHD;
    PskAttention attention = nullptr;
    ASSERT_EQ(pskCreateAttention(ctx, &info, &attention), PSK_SUCCESS);
    ASSERT_EQ(pskGetAttentionInfo(attention, &got), PSK_SUCCESS);
    EXPECT_EQ(got.kind, PSK_ATTENTION_KIND_POLYSKETCH);
    EXPECT_EQ(got.flags, uint32_t(PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT));
    EXPECT_EQ(got.degree, 4u);
    EXPECT_EQ(got.scale, 1.0f);
    EXPECT_EQ(got.numQueryHeads, 4u);
    EXPECT_EQ(got.numKeyValueHeads, 2u);
    EXPECT_EQ(got.headDim, 32u);
    EXPECT_EQ(got.valueDim, 32u);
    EXPECT_EQ(got.layout, PSK_LAYOUT_BNHD);
    EXPECT_EQ(got.sketchLength, 32u);
    EXPECT_EQ(got.blockSize, 256u);
    EXPECT_EQ(got.features, 32u * 33u / 2u);
    pskDestroyAttention(attention);
    // Softmax: its default scale, no degree, no polysketch geometry.
    info = validCreateInfo();
    info.headDim = 64;
    ASSERT_EQ(pskCreateAttention(ctx, &info, &attention), PSK_SUCCESS);
    ASSERT_EQ(pskGetAttentionInfo(attention, &got), PSK_SUCCESS);
    EXPECT_EQ(got.kind, PSK_ATTENTION_KIND_SOFTMAX);
    EXPECT_EQ(got.degree, 0u);
    EXPECT_EQ(got.scale, 0.125f);
    EXPECT_EQ(got.features, 0u);
    expectNoError(sharedLog());
    pskDestroyAttention(attention);
}

TEST_F(CreateAttentionMisuse, FieldsIgnoredByTheKindAreNotChecked) {
    // Softmax ignores degree and every polysketch-only field.
    PskAttentionCreateInfo info = validCreateInfo();
    info.degree = 3;
    info.sketchSize = 7;
    info.blockSize = 5000;
    setRaw(info.sketchSource, 3);
    PskAttention attention = kAttentionSentinel;
    ASSERT_EQ(pskCreateAttention(ctx, &info, &attention), PSK_SUCCESS);
    pskDestroyAttention(attention);
    // The polynomial kind accepts every documented degree.
    for (uint32_t degree : {0u, 2u, 4u, 8u}) {
        info = validCreateInfo();
        info.kind = PSK_ATTENTION_KIND_POLYNOMIAL;
        info.degree = degree;
        attention = kAttentionSentinel;
        EXPECT_EQ(pskCreateAttention(ctx, &info, &attention), PSK_SUCCESS) << degree;
        pskDestroyAttention(attention == kAttentionSentinel ? nullptr : attention);
    }
    expectNoError(sharedLog());
}

struct CreateCase {
    const char* name;
    PskAttentionKind kind;  // of the valid info, before `mutate`
    std::function<void(PskAttentionCreateInfo&)> mutate;
    PskResult code;
    const char* keyword;
};

void PrintTo(const CreateCase& c, std::ostream* os) { *os << c.name; }

class CreateAttentionInvalidField : public ContextTest, public ::testing::WithParamInterface<CreateCase> {};

TEST_P(CreateAttentionInvalidField, FailsWithCodeAndMessageAndNoHandle) {
    const CreateCase& c = GetParam();
    PskAttentionCreateInfo info = validCreateInfo();
    info.kind = c.kind;
    c.mutate(info);
    PskAttention attention = kAttentionSentinel;
    const PskResult r = pskCreateAttention(ctx, &info, &attention);
    EXPECT_EQ(r, c.code) << pskResultToString(r) << " instead of " << pskResultToString(c.code);
    EXPECT_EQ(attention, kAttentionSentinel) << "the out-handle was written on error";
    if (r == PSK_SUCCESS && attention != kAttentionSentinel) pskDestroyAttention(attention);
    expectOneError(sharedLog(), c.code, c.keyword);
}

const CreateCase kCreateCases[] = {
    {"Kind0", SOFTMAX, [](PskAttentionCreateInfo& i) { i.kind = PSK_ATTENTION_KIND_NONE; }, ARG, "kind"},
    {"Kind4", SOFTMAX, [](PskAttentionCreateInfo& i) { setRaw(i.kind, 4); }, ARG, "kind"},
    {"Kind99", SOFTMAX, [](PskAttentionCreateInfo& i) { setRaw(i.kind, 99); }, ARG, "kind"},
    {"KindNegative", SOFTMAX, [](PskAttentionCreateInfo& i) { setRaw(i.kind, -1); }, ARG, "kind"},
    {"UnknownFlag8", SOFTMAX, [](PskAttentionCreateInfo& i) { i.flags = 0x8; }, ARG, "flags"},
    {"UnknownFlagHigh", SOFTMAX, [](PskAttentionCreateInfo& i) { i.flags = PSK_ATTENTION_CAUSAL_BIT | 0x80000000u; },
     ARG, "flags"},
    {"HeadDim0", SOFTMAX, [](PskAttentionCreateInfo& i) { i.headDim = 0; }, SHAPE, "headDim"},
    {"HeadDim8", SOFTMAX, [](PskAttentionCreateInfo& i) { i.headDim = 8; }, SHAPE, "headDim"},
    {"HeadDim15", SOFTMAX, [](PskAttentionCreateInfo& i) { i.headDim = 15; }, SHAPE, "headDim"},
    {"HeadDim257", SOFTMAX, [](PskAttentionCreateInfo& i) { i.headDim = 257; }, SHAPE, "headDim"},
    {"HeadDim300", SOFTMAX, [](PskAttentionCreateInfo& i) { i.headDim = 300; }, SHAPE, "headDim"},
    {"ValueDim257", SOFTMAX, [](PskAttentionCreateInfo& i) { i.valueDim = 257; }, SHAPE, "valueDim"},
    {"ValueDim300", SOFTMAX, [](PskAttentionCreateInfo& i) { i.valueDim = 300; }, SHAPE, "valueDim"},
    {"Hq3Hkv2", SOFTMAX,
     [](PskAttentionCreateInfo& i) {
         i.numQueryHeads = 3;
         i.numKeyValueHeads = 2;
     },
     SHAPE, "multiple"},
    {"Hq2Hkv4", SOFTMAX,
     [](PskAttentionCreateInfo& i) {
         i.numQueryHeads = 2;
         i.numKeyValueHeads = 4;
     },
     SHAPE, "multiple"},
    {"HkvWithDefaultHq", SOFTMAX, [](PskAttentionCreateInfo& i) { i.numKeyValueHeads = 2; }, SHAPE, "multiple"},
    {"HqBeyondDispatchLimit", SOFTMAX, [](PskAttentionCreateInfo& i) { i.numQueryHeads = 0x80000000u; },
     LARGE, "numQueryHeads"},
    {"PolynomialDegree1", POLYNOMIAL, [](PskAttentionCreateInfo& i) { i.degree = 1; }, ARG, "degree"},
    {"PolynomialDegree3", POLYNOMIAL, [](PskAttentionCreateInfo& i) { i.degree = 3; }, ARG, "degree"},
    {"PolynomialDegree6", POLYNOMIAL, [](PskAttentionCreateInfo& i) { i.degree = 6; }, ARG, "degree"},
    {"PolynomialDegree16", POLYNOMIAL, [](PskAttentionCreateInfo& i) { i.degree = 16; }, ARG, "degree"},
    {"PolysketchDegree3", POLYSKETCH, [](PskAttentionCreateInfo& i) { i.degree = 3; }, ARG, "degree"},
    {"ScaleNaN", SOFTMAX, [](PskAttentionCreateInfo& i) { i.scale = std::numeric_limits<float>::quiet_NaN(); },
     ARG, "scale"},
    {"ScalePlusInf", SOFTMAX, [](PskAttentionCreateInfo& i) { i.scale = std::numeric_limits<float>::infinity(); },
     ARG, "scale"},
    {"ScaleMinusInf", SOFTMAX, [](PskAttentionCreateInfo& i) { i.scale = -std::numeric_limits<float>::infinity(); },
     ARG, "scale"},
    {"PolynomialScaleNaN", POLYNOMIAL,
     [](PskAttentionCreateInfo& i) { i.scale = std::numeric_limits<float>::quiet_NaN(); },
     ARG, "scale"},
    {"DataType3", SOFTMAX, [](PskAttentionCreateInfo& i) { setRaw(i.dataType, 3); }, ARG, "dataType"},
    {"DataType99", SOFTMAX, [](PskAttentionCreateInfo& i) { setRaw(i.dataType, 99); }, ARG, "dataType"},
    {"DataTypeNegative", SOFTMAX, [](PskAttentionCreateInfo& i) { setRaw(i.dataType, -1); }, ARG, "dataType"},
    {"Layout2", SOFTMAX, [](PskAttentionCreateInfo& i) { setRaw(i.layout, 2); }, ARG, "layout"},
    {"LayoutNegative", SOFTMAX, [](PskAttentionCreateInfo& i) { setRaw(i.layout, -1); }, ARG, "layout"},
    {"LocalExactOnSoftmax", SOFTMAX, [](PskAttentionCreateInfo& i) { i.flags = PSK_ATTENTION_LOCAL_EXACT_BIT; },
     ARG, "LOCAL_EXACT"},
    {"LocalExactOnPolynomial", POLYNOMIAL,
     [](PskAttentionCreateInfo& i) { i.flags = PSK_ATTENTION_LOCAL_EXACT_BIT | PSK_ATTENTION_CAUSAL_BIT; },
     ARG, "LOCAL_EXACT"},
    {"ReferenceScalingOnSoftmax", SOFTMAX,
     [](PskAttentionCreateInfo& i) { i.flags = PSK_ATTENTION_REFERENCE_SCALING_BIT; },
     ARG, "REFERENCE_SCALING"},
    {"PolysketchSketchSize7", POLYSKETCH, [](PskAttentionCreateInfo& i) { i.sketchSize = 7; }, ARG, "sketchSize"},
    {"PolysketchSketchSize129", POLYSKETCH, [](PskAttentionCreateInfo& i) { i.sketchSize = 129; }, ARG, "sketchSize"},
    {"PolysketchBlockSize8", POLYSKETCH, [](PskAttentionCreateInfo& i) { i.blockSize = 8; }, ARG, "blockSize"},
    {"PolysketchBlockSize2048", POLYSKETCH, [](PskAttentionCreateInfo& i) { i.blockSize = 2048; }, ARG, "blockSize"},
    {"PolysketchSketchSource99", POLYSKETCH, [](PskAttentionCreateInfo& i) { setRaw(i.sketchSource, 99); },
     ARG, "sketchSource"},
    {"PolysketchSketchSource3", POLYSKETCH, [](PskAttentionCreateInfo& i) { setRaw(i.sketchSource, 3); },
     ARG, "sketchSource"},
    {"PolysketchSketchSourceNegative", POLYSKETCH, [](PskAttentionCreateInfo& i) { setRaw(i.sketchSource, -1); },
     ARG, "sketchSource"},
    {"PolysketchFileSourceWithoutFile", POLYSKETCH,
     [](PskAttentionCreateInfo& i) {
         i.sketchSource = PSK_SKETCH_SOURCE_FILE;
         i.sketchFile = nullptr;
     },
     ARG, "sketchFile"},
    {"PolysketchLearnedSourceWithoutFile", POLYSKETCH,
     [](PskAttentionCreateInfo& i) {
         i.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
         i.sketchFile = nullptr;
     },
     ARG, "sketchFile"},
    {"PolysketchTensorPrefixTooLong", POLYSKETCH,
     [](PskAttentionCreateInfo& i) {
         static const std::string longPrefix(256, 'x');
         i.tensorPrefix = longPrefix.c_str();
     },
     ARG, "tensorPrefix"},
    {"PolysketchLocalExactWithoutCausal", POLYSKETCH,
     [](PskAttentionCreateInfo& i) { i.flags = PSK_ATTENTION_LOCAL_EXACT_BIT; },
     ARG, "CAUSAL"},
    {"PolysketchMissingSketchFile", POLYSKETCH,
     [](PskAttentionCreateInfo& i) {
         i.sketchSource = PSK_SKETCH_SOURCE_FILE;
         i.sketchFile = "/nonexistent/psk_sketch.safetensors";
     },
     BAD_FILE, "psk_sketch.safetensors"},
    {"PolysketchMissingLearnedFile", POLYSKETCH,
     [](PskAttentionCreateInfo& i) {
         i.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
         i.sketchFile = "/nonexistent/psk_learned.safetensors";
     },
     BAD_FILE, "psk_learned.safetensors"},
    {"PolysketchLearnedDegree8", POLYSKETCH,
     [](PskAttentionCreateInfo& i) {
         i.degree = 8;
         i.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
         i.sketchFile = "/nonexistent/psk_learned.safetensors";
     },
     ARG, "degree 4"},
    {"PolysketchLearnedReferenceScaling", POLYSKETCH,
     [](PskAttentionCreateInfo& i) {
         i.flags = PSK_ATTENTION_REFERENCE_SCALING_BIT;
         i.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
         i.sketchFile = "/nonexistent/psk_learned.safetensors";
     },
     ARG, "REFERENCE_SCALING"},
    {"PolysketchSketchFileIsADirectory", POLYSKETCH,
     [](PskAttentionCreateInfo& i) {
         i.sketchSource = PSK_SKETCH_SOURCE_FILE;
         i.sketchFile = "/";
     },
     BAD_FILE, "not a regular file"},
    {"PolysketchQkNormFileIsADirectory", POLYSKETCH, [](PskAttentionCreateInfo& i) { i.qkNormFile = "/"; },
     BAD_FILE, "not a regular file"},
    {"PolysketchMissingQkNormFile", POLYSKETCH,
     [](PskAttentionCreateInfo& i) { i.qkNormFile = "/nonexistent/psk_norm.safetensors"; },
     BAD_FILE, "psk_norm.safetensors"},
};

INSTANTIATE_TEST_SUITE_P(Fields, CreateAttentionInvalidField, ::testing::ValuesIn(kCreateCases), caseName<CreateCase>);

// ---------------------------------------------------------------------------------------------
// pskAttentionForwardHost
// ---------------------------------------------------------------------------------------------

// The shape every forward case starts from: grouped-query heads so that q/out and k/v differ in
// size, and dv != h so that v/out differ from q/k.
constexpr uint32_t kB = 1, kHq = 2, kHkv = 1, kN = 4, kH = 16, kDv = 24;

/** One forward call's arrays and info; a case mutates it before the call. */
struct ForwardCall {
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    std::vector<uint8_t> q, k, v, out;
    PskTensorStrides qs{}, ks{}, vs{}, os{};
    PskForwardStats stats{};
    PskForwardHostInfo info{};

    size_t elemBytes() const { return type == PSK_DATA_TYPE_FLOAT32 ? 4 : 2; }

    explicit ForwardCall(PskDataType t) : type(t) {
        auto fill = [&](std::vector<uint8_t>& bytes, size_t count, uint64_t seed) {
            const std::vector<float> x = psk::test::randomNormal(count, seed);
            bytes.resize(count * elemBytes());
            for (size_t i = 0; i < count; ++i) {
                if (type == PSK_DATA_TYPE_FLOAT32) {
                    std::memcpy(&bytes[i * 4], &x[i], 4);
                } else {
                    // Small normals; a crude but finite 16-bit encoding (truncation) is enough here.
                    uint32_t bits;
                    std::memcpy(&bits, &x[i], 4);
                    uint16_t h16;
                    if (type == PSK_DATA_TYPE_BFLOAT16) {
                        h16 = uint16_t(bits >> 16);
                    } else {
                        const float a = std::min(std::fabs(x[i]), 4.0f);
                        const int e = a < 1.0f / 1024 ? -15 : int(std::floor(std::log2(a)));
                        const uint16_t sign = x[i] < 0 ? 0x8000 : 0;
                        h16 = e == -15 ? sign
                                       : uint16_t(sign | ((e + 15) << 10) | uint16_t((a / std::ldexp(1.0f, e) - 1.0f) * 1024));
                    }
                    std::memcpy(&bytes[i * 2], &h16, 2);
                }
            }
        };
        fill(q, size_t(kB) * kHq * kN * kH, 1);
        fill(k, size_t(kB) * kHkv * kN * kH, 2);
        fill(v, size_t(kB) * kHkv * kN * kDv, 3);
        out.resize(size_t(kB) * kHq * kN * kDv * elemBytes());
        fillOutSentinel();
        stats.gpuMilliseconds = -12345.0;
        stats.workspaceBytes = 0xDEADBEEF;
        qs = {uint64_t(kHq) * kN * kH, uint64_t(kN) * kH, kH};
        ks = {uint64_t(kHkv) * kN * kH, uint64_t(kN) * kH, kH};
        vs = {uint64_t(kHkv) * kN * kDv, uint64_t(kN) * kDv, kDv};
        os = {uint64_t(kHq) * kN * kDv, uint64_t(kN) * kDv, kDv};
        info.batchSize = kB;
        info.seqLen = kN;
        info.q = q.data();
        info.k = k.data();
        info.v = v.data();
        info.out = out.data();
        info.qBytes = q.size();
        info.kBytes = k.size();
        info.vBytes = v.size();
        info.outBytes = out.size();
        info.stats = &stats;
    }

    void fillOutSentinel() {
        for (size_t i = 0; i < out.size(); i += elemBytes()) {
            if (type == PSK_DATA_TYPE_FLOAT32)
                std::memcpy(&out[i], &kOutSentinelBits, 4);
            else
                std::memcpy(&out[i], &kOutSentinel16, 2);
        }
    }

    bool outUntouched() const {
        for (size_t i = 0; i < out.size(); i += elemBytes()) {
            if (type == PSK_DATA_TYPE_FLOAT32 ? std::memcmp(&out[i], &kOutSentinelBits, 4) != 0
                                              : std::memcmp(&out[i], &kOutSentinel16, 2) != 0)
                return false;
        }
        return true;
    }

    bool statsUntouched() const { return stats.gpuMilliseconds == -12345.0 && stats.workspaceBytes == 0xDEADBEEF; }

    /** Makes the arrays (and the default strides) hold `batch` batches; new elements are zero. */
    void growBatch(uint32_t batch) {
        q.resize(q.size() * batch);
        k.resize(k.size() * batch);
        v.resize(v.size() * batch);
        out.resize(out.size() * batch);
        fillOutSentinel();
        info.batchSize = batch;
        info.q = q.data();
        info.k = k.data();
        info.v = v.data();
        info.out = out.data();
        info.qBytes = q.size();
        info.kBytes = k.size();
        info.vBytes = v.size();
        info.outBytes = out.size();
    }

    void useExplicitStrides() {
        info.qStrides = &qs;
        info.kStrides = &ks;
        info.vStrides = &vs;
        info.outStrides = &os;
    }

    /** Writes a raw element (float bits or 16-bit pattern) at element index `i` of `bytes`. */
    void poke(std::vector<uint8_t>& bytes, size_t i, uint32_t bits) {
        if (type == PSK_DATA_TYPE_FLOAT32) {
            std::memcpy(&bytes[i * 4], &bits, 4);
        } else {
            const uint16_t b16 = uint16_t(bits);
            std::memcpy(&bytes[i * 2], &b16, 2);
        }
    }
    size_t elements(const std::vector<uint8_t>& bytes) const { return bytes.size() / elemBytes(); }
};

/** Plain double-precision softmax attention over the dense BHND arrays of a float32 ForwardCall. */
std::vector<double> softmaxReference(const ForwardCall& c, bool causal) {
    auto at = [](const std::vector<uint8_t>& bytes, size_t i) {
        float x;
        std::memcpy(&x, &bytes[i * 4], 4);
        return double(x);
    };
    const double s = 1.0 / std::sqrt(double(kH));
    std::vector<double> out(size_t(kB) * kHq * kN * kDv, 0.0);
    for (uint32_t b = 0; b < kB; ++b)
        for (uint32_t hq = 0; hq < kHq; ++hq) {
            const uint32_t hk = hq / (kHq / kHkv);
            for (uint32_t i = 0; i < kN; ++i) {
                std::vector<double> w(kN, 0.0);
                double m = -INFINITY;
                const uint32_t last = causal ? i : kN - 1;
                for (uint32_t j = 0; j <= last; ++j) {
                    double dot = 0;
                    for (uint32_t d = 0; d < kH; ++d)
                        dot += at(c.q, ((size_t(b) * kHq + hq) * kN + i) * kH + d) * at(c.k, ((size_t(b) * kHkv + hk) * kN + j) * kH + d);
                    w[j] = s * dot;
                    m = std::max(m, w[j]);
                }
                double sum = 0;
                for (uint32_t j = 0; j <= last; ++j) sum += (w[j] = std::exp(w[j] - m));
                for (uint32_t d = 0; d < kDv; ++d) {
                    double acc = 0;
                    for (uint32_t j = 0; j <= last; ++j) acc += w[j] * at(c.v, ((size_t(b) * kHkv + hk) * kN + j) * kDv + d);
                    out[((size_t(b) * kHq + hq) * kN + i) * kDv + d] = acc / sum;
                }
            }
        }
    return out;
}

class ForwardFixture : public ContextTest {
protected:
    PskAttention create(PskDataType type = PSK_DATA_TYPE_FLOAT32, PskAttentionCreateFlags flags = 0) {
        PskAttentionCreateInfo info{};
        info.kind = PSK_ATTENTION_KIND_SOFTMAX;
        info.flags = flags;
        info.numQueryHeads = kHq;
        info.numKeyValueHeads = kHkv;
        info.headDim = kH;
        info.valueDim = kDv;
        info.dataType = type;
        PskAttention attention = nullptr;
        const PskResult r = pskCreateAttention(ctx, &info, &attention);
        if (r == PSK_ERROR_UNSUPPORTED) {
            sharedLog().clear();
            return nullptr;
        }
        EXPECT_EQ(r, PSK_SUCCESS) << pskResultToString(r);
        return attention;
    }
    void TearDown() override {
        pskDestroyAttention(attention_);
        ContextTest::TearDown();
    }
    PskAttention attention_ = nullptr;
};

class ForwardMisuse : public ForwardFixture {};

TEST_F(ForwardMisuse, PositiveControl) {
    attention_ = create();
    ASSERT_NE(attention_, nullptr);
    for (bool explicitStrides : {false, true}) {
        ForwardCall call(PSK_DATA_TYPE_FLOAT32);
        if (explicitStrides) call.useExplicitStrides();
        ASSERT_EQ(pskAttentionForwardHost(attention_, &call.info), PSK_SUCCESS);
        const std::vector<double> want = softmaxReference(call, false);
        std::vector<float> got(want.size());
        std::memcpy(got.data(), call.out.data(), call.out.size());
        double err = 0;
        for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::fabs(double(got[i]) - want[i]));
        EXPECT_LT(err, 1e-4);
        EXPECT_FALSE(call.statsUntouched()) << "stats were not filled on success";
        EXPECT_GE(call.stats.gpuMilliseconds, 0.0);
    }
    expectNoError(sharedLog());
}

TEST_F(ForwardMisuse, ErrorsLeaveTheAttentionUsable) {
    attention_ = create();
    ASSERT_NE(attention_, nullptr);
    {
        ForwardCall bad(PSK_DATA_TYPE_FLOAT32);
        bad.poke(bad.q, 3, 0x7FC00000u);
        EXPECT_EQ(pskAttentionForwardHost(attention_, &bad.info), PSK_ERROR_NON_FINITE_INPUT);
        bad.info.seqLen = 1u << 31;
        EXPECT_EQ(pskAttentionForwardHost(attention_, &bad.info), PSK_ERROR_TOO_LARGE);
        EXPECT_TRUE(bad.outUntouched());
    }
    sharedLog().clear();
    ForwardCall good(PSK_DATA_TYPE_FLOAT32);
    ASSERT_EQ(pskAttentionForwardHost(attention_, &good.info), PSK_SUCCESS);
    const std::vector<double> want = softmaxReference(good, false);
    std::vector<float> got(want.size());
    std::memcpy(got.data(), good.out.data(), good.out.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
    expectNoError(sharedLog());
}

TEST_F(ForwardMisuse, NonFiniteInStridePaddingIsIgnored) {
    // Only elements of the tensors are checked: NaN in the gaps between rows is not an input.
    attention_ = create();
    ASSERT_NE(attention_, nullptr);
    ForwardCall call(PSK_DATA_TYPE_FLOAT32);
    const uint32_t pad = 3, row = kH + pad;
    std::vector<uint8_t> padded(size_t(kHq) * kN * row * 4);
    for (size_t r = 0; r < size_t(kHq) * kN; ++r) {
        std::memcpy(&padded[r * row * 4], &call.q[r * kH * 4], kH * 4);
        for (uint32_t g = 0; g < pad; ++g) call.poke(padded, r * row + kH + g, 0x7FC00000u);
    }
    call.qs = {uint64_t(kHq) * kN * row, uint64_t(kN) * row, row};
    call.info.qStrides = &call.qs;
    call.info.q = padded.data();
    call.info.qBytes = padded.size() - pad * 4;  // the last row's gap lies beyond the extent
    ASSERT_EQ(pskAttentionForwardHost(attention_, &call.info), PSK_SUCCESS);
    const std::vector<double> want = softmaxReference(call, false);  // call.q still holds the dense q
    std::vector<float> got(want.size());
    std::memcpy(got.data(), call.out.data(), call.out.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
    expectNoError(sharedLog());
}

struct ForwardCase {
    const char* name;
    PskDataType type;
    std::function<void(ForwardCall&)> mutate;
    PskResult code;
    const char* keyword;
};

void PrintTo(const ForwardCase& c, std::ostream* os) { *os << c.name; }

class ForwardInvalidCall : public ForwardFixture, public ::testing::WithParamInterface<ForwardCase> {};

TEST_P(ForwardInvalidCall, FailsWithCodeAndMessageAndWritesNothing) {
    const ForwardCase& c = GetParam();
    attention_ = create(c.type);
    if (!attention_ && c.type != PSK_DATA_TYPE_FLOAT32) GTEST_SKIP() << "16-bit storage unsupported on this device";
    ASSERT_NE(attention_, nullptr);
    ForwardCall call(c.type);
    c.mutate(call);
    const PskResult r = pskAttentionForwardHost(attention_, &call.info);
    EXPECT_EQ(r, c.code) << pskResultToString(r) << " instead of " << pskResultToString(c.code);
    EXPECT_TRUE(call.outUntouched()) << "the output array was written on error";
    EXPECT_TRUE(call.statsUntouched()) << "stats were written on error";
    expectOneError(sharedLog(), c.code, c.keyword);
}

/** maxStorageBufferRange of the shared context's device. */
uint64_t storageRange() {
    PskDeviceInfo info{};
    if (pskGetDeviceInfo(psk::test::sharedContext(), &info) != PSK_SUCCESS) return 1u << 27;
    return info.maxStorageBufferRange;
}

constexpr PskDataType F32 = PSK_DATA_TYPE_FLOAT32, F16 = PSK_DATA_TYPE_FLOAT16, BF16 = PSK_DATA_TYPE_BFLOAT16;

const ForwardCase kForwardCases[] = {
    // NULL arrays.
    {"QNull", F32, [](ForwardCall& c) { c.info.q = nullptr; }, ARG, "NULL"},
    {"KNull", F32, [](ForwardCall& c) { c.info.k = nullptr; }, ARG, "NULL"},
    {"VNull", F32, [](ForwardCall& c) { c.info.v = nullptr; }, ARG, "NULL"},
    {"OutNull", F32, [](ForwardCall& c) { c.info.out = nullptr; }, ARG, "NULL"},
    // Sizes.
    {"SeqLen0", F32, [](ForwardCall& c) { c.info.seqLen = 0; }, SHAPE, "seqLen"},
    {"QBytesOneElementShort", F32, [](ForwardCall& c) { c.info.qBytes -= 4; }, SMALL, "q holds"},
    {"KBytesOneElementShort", F32, [](ForwardCall& c) { c.info.kBytes -= 4; }, SMALL, "k holds"},
    {"VBytesOneElementShort", F32, [](ForwardCall& c) { c.info.vBytes -= 4; }, SMALL, "v holds"},
    {"OutBytesOneElementShort", F32, [](ForwardCall& c) { c.info.outBytes -= 4; }, SMALL, "out holds"},
    {"OutBytesOneByteShort", F32, [](ForwardCall& c) { c.info.outBytes -= 1; }, SMALL, "out holds"},
    {"QBytesZero", F32, [](ForwardCall& c) { c.info.qBytes = 0; }, SMALL, "q holds"},
    {"F16OutBytesOneElementShort", F16, [](ForwardCall& c) { c.info.outBytes -= 2; }, SMALL, "out holds"},
    {"BF16VBytesOneElementShort", BF16, [](ForwardCall& c) { c.info.vBytes -= 2; }, SMALL, "v holds"},
    {"BatchOfTwoWithArraysForOne", F32, [](ForwardCall& c) { c.info.batchSize = 2; }, SMALL, "holds"},
    // Non-finite inputs.
    {"NaNInQFirst", F32, [](ForwardCall& c) { c.poke(c.q, 0, 0x7FC00000u); }, NONFINITE, "q contains"},
    {"NaNInQLast", F32, [](ForwardCall& c) { c.poke(c.q, c.elements(c.q) - 1, 0xFFC00001u); }, NONFINITE, "q contains"},
    {"InfInV", F32, [](ForwardCall& c) { c.poke(c.v, 5, 0x7F800000u); }, NONFINITE, "v contains"},
    {"MinusInfInK", F32, [](ForwardCall& c) { c.poke(c.k, c.elements(c.k) - 1, 0xFF800000u); }, NONFINITE, "k contains"},
    {"F16NaNInQ", F16, [](ForwardCall& c) { c.poke(c.q, 7, 0x7E00); }, NONFINITE, "q contains"},
    {"F16NegativeNaNInK", F16, [](ForwardCall& c) { c.poke(c.k, 0, 0xFE00); }, NONFINITE, "k contains"},
    {"F16InfInV", F16, [](ForwardCall& c) { c.poke(c.v, c.elements(c.v) - 1, 0x7C00); }, NONFINITE, "v contains"},
    {"BF16NaNInQ", BF16, [](ForwardCall& c) { c.poke(c.q, 7, 0x7FC0); }, NONFINITE, "q contains"},
    {"BF16InfInK", BF16, [](ForwardCall& c) { c.poke(c.k, 3, 0xFF80); }, NONFINITE, "k contains"},
    {"BF16NaNInV", BF16, [](ForwardCall& c) { c.poke(c.v, c.elements(c.v) - 1, 0x7FC0); }, NONFINITE, "v contains"},
    // Strides.
    {"QTokenStrideZero", F32,
     [](ForwardCall& c) {
         c.useExplicitStrides();
         c.qs.token = 0;
     },
     SHAPE, "non-zero"},
    {"KHeadStrideZero", F32,
     [](ForwardCall& c) {
         c.useExplicitStrides();
         c.ks.head = 0;
     },
     SHAPE, "non-zero"},
    {"VBatchStrideZero", F32,
     [](ForwardCall& c) {
         c.useExplicitStrides();
         c.vs.batch = 0;
     },
     SHAPE, "non-zero"},
    {"OutAllStridesZero", F32,
     [](ForwardCall& c) {
         c.useExplicitStrides();
         c.os = {0, 0, 0};
     },
     SHAPE, "non-zero"},
    {"OutTokenStrideSmallerThanValueDim", F32,
     [](ForwardCall& c) {
         c.useExplicitStrides();
         c.os.token = kDv - 1;
     },
     SHAPE, "overlap"},
    {"OutHeadStrideCollidesWithTokens", F32,
     [](ForwardCall& c) {
         c.useExplicitStrides();
         c.os.head = c.os.token;  // head 1, token 0 == head 0, token 1
     },
     SHAPE, "overlap"},
    {"OutBatchStrideCollidesWithHeads", F32,
     [](ForwardCall& c) {
         c.growBatch(2);
         c.useExplicitStrides();
         c.os.batch = c.os.head;  // batch 1, head 0 == batch 0, head 1
     },
     SHAPE, "overlap"},
    // Too large for 32-bit indexing or for the device.
    {"SeqLen2Pow31", F32, [](ForwardCall& c) { c.info.seqLen = 1u << 31; }, LARGE, "seqLen"},
    {"SeqLenMax", F32, [](ForwardCall& c) { c.info.seqLen = 0xFFFFFFFFu; }, LARGE, "seqLen"},
    {"BatchSize2Pow31", F32, [](ForwardCall& c) { c.info.batchSize = 1u << 31; }, LARGE, "batchSize"},
    {"QTokenStride2Pow31", F32,
     [](ForwardCall& c) {
         c.useExplicitStrides();
         c.qs.token = uint64_t(1) << 31;  // 3 * 2^31 > 2^32
     },
     LARGE, "2^32"},
    {"KTokenStrideMaxUint64", F32,
     [](ForwardCall& c) {
         c.useExplicitStrides();
         c.ks.token = ~uint64_t(0);
     },
     LARGE, "2^32"},
    {"VBatchStride2Pow40", F32,
     [](ForwardCall& c) {
         c.growBatch(2);
         c.useExplicitStrides();
         c.vs.batch = uint64_t(1) << 40;
     },
     LARGE, "2^32"},
    {"OutHeadStrideExceedsStorageBufferRange", F32,
     [](ForwardCall& c) {
         c.useExplicitStrides();
         // One head step past the device's maxStorageBufferRange, yet under 2^32 elements.
         c.os.head = storageRange() / 4 + 1;
         c.os.batch = c.os.head * kHq;
     },
     LARGE, "maxStorageBufferRange"},
};

INSTANTIATE_TEST_SUITE_P(Calls, ForwardInvalidCall, ::testing::ValuesIn(kForwardCases), caseName<ForwardCase>);

// ---------------------------------------------------------------------------------------------
// NULL handles and pointers, every function
// ---------------------------------------------------------------------------------------------

/** What a call returned, and whether what it may write kept its sentinel. */
struct Outcome {
    PskResult result;
    bool untouched = true;
};

/**
 * A call with a NULL handle or pointer, on the shared context and a valid attention: it must return
 * INVALID_ARGUMENT, write nothing, and report one ERROR message naming `keyword`; with no handle to
 * report through (keyword NULL), no message at all, to this context or another.
 */
struct NullCase {
    const char* name;
    std::function<Outcome(PskContext, PskAttention)> call;
    const char* keyword;
};

void PrintTo(const NullCase& c, std::ostream* os) { *os << c.name; }

class NullArgument : public ContextTest, public ::testing::WithParamInterface<NullCase> {};

TEST_P(NullArgument, FailsWithCodeAndMessageAndWritesNothing) {
    const NullCase& c = GetParam();
    const PskAttentionCreateInfo info = validCreateInfo();
    PskAttention attention = nullptr;
    ASSERT_EQ(pskCreateAttention(ctx, &info, &attention), PSK_SUCCESS);
    const Outcome o = c.call(ctx, attention);
    EXPECT_EQ(o.result, ARG) << pskResultToString(o.result) << " instead of " << pskResultToString(ARG);
    EXPECT_TRUE(o.untouched) << "an output was written on error";
    if (c.keyword)
        expectOneError(sharedLog(), ARG, c.keyword);
    else
        expectNoError(sharedLog());
    pskDestroyAttention(attention);
}

PskAttentionInfo sentinelAttentionInfo() {
    PskAttentionInfo info;
    std::memset(&info, 0xAB, sizeof(info));
    return info;
}

const NullCase kNullCases[] = {
    {"EnumerateDevicesNullCount", [](PskContext, PskAttention) { return Outcome{pskEnumerateDevices(nullptr)}; }, nullptr},
    {"DeviceInfoNullContext",
     [](PskContext, PskAttention) {
         PskDeviceInfo info = sentinelDeviceInfo();
         const PskResult r = pskGetDeviceInfo(nullptr, &info);
         return Outcome{r, sameBytes(info, sentinelDeviceInfo())};
     },
     nullptr},
    {"DeviceInfoNullInfo", [](PskContext ctx, PskAttention) { return Outcome{pskGetDeviceInfo(ctx, nullptr)}; }, "pInfo"},
    {"CreateAttentionNullContext",
     [](PskContext, PskAttention) {
         const PskAttentionCreateInfo info = validCreateInfo();
         PskAttention attention = kAttentionSentinel;
         const PskResult r = pskCreateAttention(nullptr, &info, &attention);
         return Outcome{r, attention == kAttentionSentinel};
     },
     nullptr},
    {"CreateAttentionNullCreateInfo",
     [](PskContext ctx, PskAttention) {
         PskAttention attention = kAttentionSentinel;
         const PskResult r = pskCreateAttention(ctx, nullptr, &attention);
         return Outcome{r, attention == kAttentionSentinel};
     },
     "createInfo"},
    {"CreateAttentionNullOutHandle",
     [](PskContext ctx, PskAttention) {
         const PskAttentionCreateInfo info = validCreateInfo();
         return Outcome{pskCreateAttention(ctx, &info, nullptr)};
     },
     "pAttention"},
    {"AttentionPlanNullAttention",
     [](PskContext, PskAttention) {
         size_t size = 12345;
         const PskResult r = pskGetAttentionPlan(nullptr, nullptr, &size);
         return Outcome{r, size == 12345u};
     },
     nullptr},
    {"AttentionPlanNullSize", [](PskContext, PskAttention a) { return Outcome{pskGetAttentionPlan(a, nullptr, nullptr)}; },
     "pSize"},
    {"AttentionInfoNullAttention",
     [](PskContext, PskAttention) {
         PskAttentionInfo info = sentinelAttentionInfo();
         const PskResult r = pskGetAttentionInfo(nullptr, &info);
         const PskAttentionInfo sentinel = sentinelAttentionInfo();
         return Outcome{r, std::memcmp(&info, &sentinel, sizeof(info)) == 0};
     },
     nullptr},
    {"AttentionInfoNullInfo", [](PskContext, PskAttention a) { return Outcome{pskGetAttentionInfo(a, nullptr)}; }, "pInfo"},
    {"ForwardNullAttention",
     [](PskContext, PskAttention) {
         ForwardCall call(PSK_DATA_TYPE_FLOAT32);
         const PskResult r = pskAttentionForwardHost(nullptr, &call.info);
         return Outcome{r, call.outUntouched() && call.statsUntouched()};
     },
     nullptr},
    {"ForwardNullAttentionAndInfo", [](PskContext, PskAttention) { return Outcome{pskAttentionForwardHost(nullptr, nullptr)}; },
     nullptr},
    {"ForwardNullInfo", [](PskContext, PskAttention a) { return Outcome{pskAttentionForwardHost(a, nullptr)}; }, "info"},
};

INSTANTIATE_TEST_SUITE_P(Calls, NullArgument, ::testing::ValuesIn(kNullCases), caseName<NullCase>);

}  // namespace
