// Tuning tables (lib/forward/tuning_table.hpp): the parser (valid tables, malformed ones, unknown
// parameters and keys, mutated bytes), which table a device gets, and on the device that an entry
// changes the plan (the plan names it) while the output still matches the float64 reference, and
// that an entry that does not fit is ignored with its reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "forward/attention_config.hpp"
#include "vk/context.hpp"
#include "forward/polysketch_forward.hpp"
#include "forward/polysketch_plan.hpp"
#include "forward/tuning_table.hpp"
#include "io/safetensors.hpp"
#include "sketch/sketch_files.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/sketch_fixtures.hpp"
#include "reference/storage_types.hpp"
#include "sketch/philox.hpp"
#include "support/host_forward.hpp"
#include "support/test_context.hpp"
#include "support/scoped_env.hpp"
#include "util/error.hpp"

namespace {

using psk::test::ScopedEnv;

using psk::TuningParameter;

const char* kValid =
    "# measured on a test bench\n"
    "psk-tuning 1\r\n"
    "device vendor=0x10de id=0x2330 driver=0x8a4a4000 name=\"NVIDIA H100 # 80GB\" chip=\"GH100\" chip_ids=0x2331,0x2335   # a comment after the line\n"
    "\n"
    "output.feat_chunk 32 h=64 dv=64 r=32 type=f16 causal=1\n"
    "output.feat_chunk 48 h=64\n"
    "\toutput.wn 2\n"
    "states.walk_min_groups 144 h=64 dv=64 r=32 p=4 type=f16 causal=1 local=1 sketch=random\n"
    "features.rows 32 sketch=learned\n";

psk::TuningShape headline() {
    psk::TuningShape s;
    s.headDim = 64;
    s.valueDim = 64;
    s.sketchLength = 32;
    s.degree = 4;
    s.type = PSK_DATA_TYPE_FLOAT16;
    s.causal = true;
    s.localExact = true;
    return s;
}

/** The BAD_FILE error's message of parsing `text`, or "" when it parses. Fails the test on any other outcome. */
std::string parseError(const std::string& text) {
    try {
        psk::parseTuningTable(text, "t");
    } catch (const psk::Error& e) {
        EXPECT_EQ(e.code(), PSK_ERROR_BAD_FILE) << e.what();
        return e.what();
    }
    return "";
}

TEST(TuningTableParser, ReadsAValidTable) {
    const psk::TuningTable t = psk::parseTuningTable(kValid, "valid");
    EXPECT_FALSE(t.device.any);
    EXPECT_EQ(t.device.vendorId, 0x10deu);
    EXPECT_EQ(t.device.deviceId, 0x2330u);
    ASSERT_TRUE(t.device.driverVersion.has_value());
    EXPECT_EQ(*t.device.driverVersion, 0x8a4a4000u);
    EXPECT_EQ(t.device.name, "NVIDIA H100 # 80GB");  // '#' inside quotes is no comment
    EXPECT_EQ(t.device.chip, "GH100");
    EXPECT_EQ(t.device.chipIds, (std::vector<uint32_t>{0x2331, 0x2335}));
    EXPECT_TRUE(t.device.listsSibling(0x10de, 0x2335));
    EXPECT_FALSE(t.device.listsSibling(0x10de, 0x2330));  // its own id is not a sibling
    EXPECT_FALSE(t.device.listsSibling(0x1002, 0x2335));  // another vendor's device of that id is not
    EXPECT_FALSE(t.device.listsSibling(0x10de, 0x2336));
    ASSERT_EQ(t.entries.size(), 5u);
    EXPECT_EQ(t.entries[0].line, 5u);
    EXPECT_EQ(t.entries[2].parameter, TuningParameter::OutputWn);
    EXPECT_EQ(t.entries[3].key.describe(), "h=64 dv=64 r=32 p=4 type=f16 causal=1 local=1 sketch=random");

    // The most specific match wins; a key that differs excludes the entry; no key matches everything.
    psk::TuningShape s = headline();
    const psk::TuningEntry* chunk = t.find(TuningParameter::OutputFeatChunk, s);
    ASSERT_NE(chunk, nullptr);
    EXPECT_EQ(chunk->value, 32u);
    s.causal = false;
    chunk = t.find(TuningParameter::OutputFeatChunk, s);
    ASSERT_NE(chunk, nullptr);
    EXPECT_EQ(chunk->value, 48u);
    s.headDim = 128;
    EXPECT_EQ(t.find(TuningParameter::OutputFeatChunk, s), nullptr);
    EXPECT_NE(t.find(TuningParameter::OutputWn, s), nullptr);
    EXPECT_EQ(t.find(TuningParameter::FeaturesRows, s), nullptr);
    s.learned = true;
    EXPECT_NE(t.find(TuningParameter::FeaturesRows, s), nullptr);
    EXPECT_EQ(t.find(TuningParameter::FeaturesTile, s), nullptr);

    const psk::TuningTable any = psk::parseTuningTable("psk-tuning 1\ndevice any\n", "any");
    EXPECT_TRUE(any.device.any);
    EXPECT_TRUE(any.entries.empty());
}

TEST(TuningTableParser, WriterRoundTrips) {
    const psk::TuningTable t = psk::parseTuningTable(kValid, "valid");
    std::vector<psk::TuningTableLine> lines;
    for (const psk::TuningEntry& e : t.entries) lines.push_back({{"median 1.0 ms", "second line"}, e});
    const std::string text = psk::writeTuningTable(t.device, {"header"}, lines);
    const psk::TuningTable back = psk::parseTuningTable(text, "written");
    EXPECT_EQ(back.device.vendorId, t.device.vendorId);
    EXPECT_EQ(back.device.deviceId, t.device.deviceId);
    EXPECT_EQ(back.device.driverVersion, t.device.driverVersion);
    EXPECT_EQ(back.device.name, "NVIDIA H100  80GB");  // the writer drops what a quoted word cannot hold
    EXPECT_EQ(back.device.chip, "GH100");
    EXPECT_EQ(back.device.chipIds, t.device.chipIds);
    ASSERT_EQ(back.entries.size(), t.entries.size());
    for (size_t i = 0; i < t.entries.size(); ++i) {
        EXPECT_EQ(back.entries[i].parameter, t.entries[i].parameter);
        EXPECT_EQ(back.entries[i].value, t.entries[i].value);
        EXPECT_TRUE(back.entries[i].key == t.entries[i].key) << back.entries[i].key.describe();
    }
}

// Each malformed table fails with PSK_ERROR_BAD_FILE, its message naming the line and the problem.
TEST(TuningTableParser, RejectsMalformedTables) {
    const std::string head = "psk-tuning 1\ndevice any\n";
    const struct {
        std::string text, message;
    } cases[] = {
        {"", "empty"},
        {"# only a comment\n", "empty"},
        {"psk-tuning 2\n", "line 1: format version 2"},
        {"tuning 1\n", "line 1: expected 'psk-tuning 1'"},
        {"psk-tuning 1\n", "no device line"},
        {"psk-tuning 1\noutput.wn 2\n", "line 2: expected the device line"},
        {"psk-tuning 1\ndevice vendor=0x10de\n", "needs vendor= and id="},
        {"psk-tuning 1\ndevice vendor=0x10de id=1 color=red\n", "not 'color'"},
        {"psk-tuning 1\ndevice vendor=0x1g id=1\n", "vendor '0x1g' is not"},
        {"psk-tuning 1\ndevice vendor=1 id=1 name=\"open\n", "quote is not closed"},
        {"psk-tuning 1\ndevice vendor=1 id=1 chip_ids=2,3,2\n", "chip id 0x2 is listed twice"},
        {"psk-tuning 1\ndevice vendor=1 id=1 chip_ids=2,1\n", "lists the table's own id 0x1"},
        {"psk-tuning 1\ndevice vendor=1 id=1 chip_ids=2,,3\n", "a chip id '' is not"},
        {"psk-tuning 1\ndevice vendor=1 id=1 chip_ids=\n", "a chip id '' is not"},
        {"psk-tuning 1\ndevice vendor=1 id=1 chip_ids=0x2g\n", "a chip id '0x2g' is not"},
        {"psk-tuning 1\ndevice vendor=1 id=1 chip_ids=2 chip_ids=3\n", "not 'chip_ids'"},
        {"psk-tuning 1\ndevice vendor=1 id=1 chip_ids=" + [] {
             std::string ids;
             for (int i = 2; i < 2 + 65; ++i) ids += (ids.empty() ? "" : ",") + std::to_string(i);
             return ids;
         }() + "\n",
         "chip_ids lists more than 64 ids"},
        {head + "device any\n", "line 3: a second device line"},
        {head + "output.feat_chunks 32\n", "line 3: unknown parameter 'output.feat_chunks'"},
        {head + "output.feat_chunk\n", "needs a value"},
        {head + "output.feat_chunk 32 color=1\n", "unknown key 'color'"},
        {head + "output.feat_chunk 32 h64\n", "'h64' is not key=value"},
        {head + "output.feat_chunk 32 =64\n", "'=64' is not key=value"},
        {head + "output.feat_chunk 32 h=64 h=64\n", "key 'h' given twice"},
        {head + "output.feat_chunk 32 type=f64\n", "type takes f32, f16 or bf16"},
        {head + "output.feat_chunk 32 causal=yes\n", "causal takes 0 or 1"},
        {head + "output.feat_chunk 32 sketch=fixed\n", "sketch takes random or learned"},
        {head + "output.feat_chunk 0\n", "takes 1 to 1024, not 0"},
        {head + "output.feat_chunk -1\n", "'-1' is not a 32-bit unsigned number"},
        {head + "states.walk_min_groups 4294967296\n", "is not a 32-bit unsigned number"},
        {head + "output.wn 2 h=64\noutput.wn 3 h=64\n", "line 4: output.wn for the same shapes as line 3"},
        {head + "output.wn 2\x01\n", "control character"},
        {head + std::string("output.wn 2\0\n", 13), "control character"},
    };
    for (const auto& c : cases) {
        const std::string message = parseError(c.text);
        EXPECT_NE(message.find(c.message), std::string::npos) << "table:\n" << c.text << "\nmessage: " << message;
    }
    EXPECT_NE(parseError(head + std::string(1u << 20, '#')).find("bytes, more than a table may have"), std::string::npos);
}

// Fuzz-style: random byte flips, insertions and truncations of a valid table either parse or fail
// with PSK_ERROR_BAD_FILE, never anything else (a crash, another exception).
TEST(TuningTableParser, MutatedTablesFailCleanly) {
    std::mt19937 rng(20261127);
    const std::string base = kValid;
    const char alphabet[] = "\n\r\t \"#=xX0123456789abcdefhpr.-_";
    uint32_t parsed = 0, rejected = 0;
    for (int i = 0; i < 3000; ++i) {
        std::string t = base;
        const int edits = 1 + int(rng() % 4);
        for (int e = 0; e < edits && !t.empty(); ++e) {
            const size_t at = rng() % t.size();
            switch (rng() % 4) {
                case 0: t[at] = char(rng() % 256); break;
                case 1: t[at] = alphabet[rng() % (sizeof alphabet - 1)]; break;
                case 2: t.insert(at, 1, alphabet[rng() % (sizeof alphabet - 1)]); break;
                default: t.resize(at); break;
            }
        }
        try {
            psk::parseTuningTable(t, "mutated");
            ++parsed;
        } catch (const psk::Error& e) {
            ASSERT_EQ(e.code(), PSK_ERROR_BAD_FILE) << e.what();
            ++rejected;
        }
    }
    EXPECT_GT(parsed, 0u);
    EXPECT_GT(rejected, 0u);
}

std::string writeFile(const std::string& name, const std::string& text) {
    const std::string path = testing::TempDir() + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

TEST(TuningTableSelection, ChoosesByDeviceAndDriver) {
    psk::TuningDeviceIdentity h100{0x10de, 0x2330, 0x8a4a4000, "H100"};
    const std::string a = "psk-tuning 1\ndevice vendor=0x10de id=0x2330 driver=0x1\noutput.wn 1\n";
    const std::string b = "psk-tuning 1\ndevice vendor=0x10de id=0x2330 driver=0x8a4a4000\noutput.wn 2\n";
    const std::string other = "psk-tuning 1\ndevice vendor=0x1002 id=0x740f\noutput.wn 3\n";
    const std::string any = "psk-tuning 1\ndevice any\noutput.wn 4\n";
    auto embedded = [](const char* name, const std::string& text) {
        return psk::EmbeddedTuningTable{name, reinterpret_cast<const unsigned char*>(text.data()), text.size()};
    };
    // Built in: the same driver's table wins over another driver's; another device's or an
    // any-device table is never taken.
    const std::vector<psk::EmbeddedTuningTable> builtIn = {embedded("a.tuning", a), embedded("other.tuning", other),
                                                           embedded("b.tuning", b), embedded("any.tuning", any)};
    psk::TuningSelection s = psk::selectTuningTable("", "test", h100, builtIn);
    ASSERT_TRUE(s.table);
    EXPECT_EQ(s.table->source, "tuning/devices/b.tuning");
    EXPECT_EQ(s.description.find("driver"), std::string::npos) << s.description;
    s = psk::selectTuningTable("", "test", h100, {builtIn[0], builtIn[1], builtIn[3]});
    ASSERT_TRUE(s.table);
    EXPECT_EQ(s.table->entries.at(0).value, 1u);
    EXPECT_NE(s.description.find("measured with driver 0x1, this device runs 0x8a4a4000: applied"), std::string::npos) << s.description;
    s = psk::selectTuningTable("", "test", psk::TuningDeviceIdentity{0x8086, 1, 1, "other"}, builtIn);
    EXPECT_FALSE(s.table);
    EXPECT_NE(s.description.find("none built in for this device"), std::string::npos) << s.description;
    // "none": no table even where one is built in.
    s = psk::selectTuningTable("none", "PSK_TUNING_TABLE", h100, builtIn);
    EXPECT_FALSE(s.table);
    EXPECT_NE(s.description.find("PSK_TUNING_TABLE = none"), std::string::npos) << s.description;
    // A path: for this device or any device it applies; for another device it does not.
    s = psk::selectTuningTable(writeFile("any.tuning", any), "PSK_TUNING_TABLE", h100, builtIn);
    ASSERT_TRUE(s.table);
    EXPECT_EQ(s.table->entries.at(0).value, 4u);
    s = psk::selectTuningTable(writeFile("other.tuning", other), "PSK_TUNING_TABLE", h100, builtIn);
    EXPECT_FALSE(s.table);
    EXPECT_NE(s.description.find("not this device"), std::string::npos) << s.description;
    try {
        psk::selectTuningTable(testing::TempDir() + "no-such-table.tuning", "test", h100, builtIn);
        ADD_FAILURE() << "a missing file was accepted";
    } catch (const psk::Error& e) {
        EXPECT_EQ(e.code(), PSK_ERROR_BAD_FILE);
        EXPECT_NE(std::string(e.what()).find("cannot be opened"), std::string::npos) << e.what();
    }
}

// A table applies to the other devices of its chip that its device line lists, after their own
// tables and with a note; never to a device it does not list, nor to another vendor's.
TEST(TuningTableSelection, ASiblingsTableAppliesWhereADeviceHasNone) {
    const psk::TuningDeviceIdentity h100{0x10de, 0x2330, 0x8a4a4000, "H100"};
    const std::string h200 =
        "psk-tuning 1\ndevice vendor=0x10de id=0x2335 driver=0x8a4a4000 name=\"NVIDIA H200\" chip=\"GH100\" chip_ids=0x2331,0x2330\noutput.wn 1\n";
    const std::string h200OtherDriver = "psk-tuning 1\ndevice vendor=0x10de id=0x2335 driver=0x1 chip_ids=0x2330\noutput.wn 2\n";
    const std::string ownOtherDriver = "psk-tuning 1\ndevice vendor=0x10de id=0x2330 driver=0x1\noutput.wn 3\n";
    const std::string amdListsIt = "psk-tuning 1\ndevice vendor=0x1002 id=0x740f chip_ids=0x2330\noutput.wn 4\n";
    auto embedded = [](const char* name, const std::string& text) {
        return psk::EmbeddedTuningTable{name, reinterpret_cast<const unsigned char*>(text.data()), text.size()};
    };
    psk::TuningSelection s = psk::selectTuningTable("", "test", h100, {embedded("amd.tuning", amdListsIt), embedded("h200.tuning", h200)});
    ASSERT_TRUE(s.table) << s.description;
    EXPECT_EQ(s.table->source, "tuning/devices/h200.tuning");
    EXPECT_NE(s.description.find("measured on NVIDIA H200 (id 0x2335), a GH100 as this device (id 0x2330): applied, re-run psk tune"),
              std::string::npos)
        << s.description;
    EXPECT_EQ(s.description.find("driver"), std::string::npos) << s.description;  // the same driver: no second note
    // Of two siblings' tables, this driver's; the device's own table, even of another driver, before both.
    s = psk::selectTuningTable("", "test", h100, {embedded("x.tuning", h200OtherDriver), embedded("h200.tuning", h200)});
    ASSERT_TRUE(s.table);
    EXPECT_EQ(s.table->entries.at(0).value, 1u);
    s = psk::selectTuningTable("", "test", h100, {embedded("x.tuning", h200OtherDriver)});
    ASSERT_TRUE(s.table);
    EXPECT_NE(s.description.find("the same chip as this device (id 0x2330): applied"), std::string::npos) << s.description;  // no chip name
    EXPECT_NE(s.description.find("measured with driver 0x1, this device runs 0x8a4a4000"), std::string::npos) << s.description;
    s = psk::selectTuningTable("", "test", h100, {embedded("h200.tuning", h200), embedded("own.tuning", ownOtherDriver)});
    ASSERT_TRUE(s.table);
    EXPECT_EQ(s.table->source, "tuning/devices/own.tuning");
    // Not listed, or another vendor's: none.
    s = psk::selectTuningTable("", "test", psk::TuningDeviceIdentity{0x10de, 0x2336, 0x8a4a4000, "other"}, {embedded("h200.tuning", h200)});
    EXPECT_FALSE(s.table) << s.description;
    s = psk::selectTuningTable("", "test", psk::TuningDeviceIdentity{0x1002, 0x2330, 0x8a4a4000, "amd"}, {embedded("h200.tuning", h200)});
    EXPECT_FALSE(s.table) << s.description;
    // A path: a sibling's table applies with the note; one that does not list this device does not.
    s = psk::selectTuningTable(writeFile("h200.tuning", h200), "PSK_TUNING_TABLE", h100, {});
    ASSERT_TRUE(s.table) << s.description;
    EXPECT_NE(s.description.find("a GH100 as this device (id 0x2330): applied"), std::string::npos) << s.description;
    s = psk::selectTuningTable(writeFile("h200.tuning", h200), "PSK_TUNING_TABLE", psk::TuningDeviceIdentity{0x10de, 0x2336, 1, "x"}, {});
    EXPECT_FALSE(s.table);
    EXPECT_NE(s.description.find("not this device"), std::string::npos) << s.description;
}

// The committed example of the format (tuning/example.tuning) is a valid table.
TEST(TuningTableSelection, ExampleTableParses) {
    const psk::TuningTable t = psk::loadTuningTable(std::string(PSK_SOURCE_DIR) + "/tuning/example.tuning");
    EXPECT_EQ(t.entries.size(), 2u);
}

// Every table built into the library parses (a broken one would fail every context on its device).
TEST(TuningTableSelection, BuiltInTablesParse) {
    for (const psk::EmbeddedTuningTable& e : psk::embeddedTuningTables()) {
        EXPECT_NO_THROW(psk::parseTuningTable(std::string_view(reinterpret_cast<const char*>(e.text), e.size), e.name)) << e.name;
    }
}

// The H200's built-in table (tuning/devices/nvidia-h200.tuning): the generic output for float16 at
// h = dv = 64 (measured faster there), the FlashAttention-2 tiling 3 for the softmax baseline, no
// walking block states;
// float32, bfloat16 and h = 128 keep the model's choices.
TEST(TuningTableSelection, TheH200TableIsChosenForAnH200) {
    const psk::TuningDeviceIdentity h200{0x10de, 0x2335, 0x9127c100, "NVIDIA H200"};
    const psk::TuningSelection s = psk::selectTuningTable("", "test", h200, psk::embeddedTuningTables());
    ASSERT_TRUE(s.table) << s.description;
    EXPECT_EQ(s.table->source, "tuning/devices/nvidia-h200.tuning");
    psk::TuningShape shape = headline();
    const psk::TuningEntry* e = s.table->find(psk::TuningParameter::OutputCooperative, shape);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->value, 0u);
    e = s.table->find(psk::TuningParameter::BaselinesTile, shape);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->value, 3u);
    e = s.table->find(psk::TuningParameter::StatesWalkMinGroups, shape);  // the walk lost at 144 and 576 workgroups
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->value, UINT32_MAX);
    shape.type = PSK_DATA_TYPE_BFLOAT16;
    EXPECT_EQ(s.table->find(psk::TuningParameter::OutputCooperative, shape), nullptr);
    shape.type = PSK_DATA_TYPE_FLOAT16;
    shape.headDim = shape.valueDim = 128;
    EXPECT_EQ(s.table->find(psk::TuningParameter::OutputCooperative, shape), nullptr);
}

// An H100 (SXM5, id 0x2330: the GH100 chip of the H200) has no table of its own and takes the
// H200's, with the note that says so.
TEST(TuningTableSelection, AnH100TakesTheH200Table) {
    const psk::TuningDeviceIdentity h100{0x10de, 0x2330, 0x9127c100, "NVIDIA H100 80GB HBM3"};
    const psk::TuningSelection s = psk::selectTuningTable("", "test", h100, psk::embeddedTuningTables());
    ASSERT_TRUE(s.table) << s.description;
    EXPECT_EQ(s.table->source, "tuning/devices/nvidia-h200.tuning");
    EXPECT_NE(s.description.find("measured on NVIDIA H200 (id 0x2335), a GH100 as this device (id 0x2330)"), std::string::npos)
        << s.description;
    psk::TuningShape shape = headline();
    const psk::TuningEntry* e = s.table->find(psk::TuningParameter::OutputCooperative, shape);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->value, 0u);
}

// ---- On the device ------------------------------------------------------------------------------

struct Shape {
    uint32_t Hq = 2, Hkv = 1, n = 77, h = 16, dv = 24, r = 16, b = 32;
    bool learned = false;  // a learned sketch (random weights) instead of the seeded random one
};

PskAttentionCreateInfo createInfo(const Shape& s, PskDataType type, uint64_t seed) {
    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = PSK_ATTENTION_CAUSAL_BIT;
    info.degree = 4;
    info.scale = 1.0f / std::sqrt(float(s.h));
    info.numQueryHeads = s.Hq;
    info.numKeyValueHeads = s.Hkv;
    info.headDim = s.h;
    info.valueDim = s.dv;
    info.dataType = type;
    info.sketchSize = s.r;
    info.blockSize = s.b;
    info.seed = seed;
    return info;
}

/** The polysketch plan of `s` in storage `type` under the environment and tuning table in effect
 *  (planning alone: nothing compiles). */
psk::PolysketchPlan planShape(PskContext ctx, const Shape& s, PskDataType type) {
    const psk::ResolvedAttention resolved = psk::resolveAttention(createInfo(s, type, 1), ctx->caps());
    const psk::TuningSelection tuning = ctx->tuningSelection();
    return psk::planPolysketch(resolved.config, *resolved.sketch, ctx->caps(), &tuning);
}

/** "variant constants: reason" of one kernel of a plan. */
std::string kernelText(const psk::KernelChoice& k) { return k.variant + " " + k.constants.describe() + ": " + k.reason; }

std::string planOf(PskAttention attn) {
    size_t size = 0;
    std::string plan;
    if (pskGetAttentionPlan(attn, nullptr, &size) == PSK_SUCCESS) {
        plan.assign(size, '\0');
        pskGetAttentionPlan(attn, plan.data(), &size);
    }
    return plan;
}

/** Creates the attention, runs it on seeded inputs and returns the plan and the conformance error against the float64 reference. */
struct Outcome {
    std::string plan;
    double error = -1;
    PskResult created = PSK_ERROR_INTERNAL;
};
Outcome runCase(PskContext ctx, const Shape& s, PskDataType type) {
    Outcome o;
    const uint64_t seed = 20261127;
    PskAttentionCreateInfo info = createInfo(s, type, seed);
    psk::test::TempFile sketchFile("psk_tuning_sketch");
    const psk::LearnedSketchWeights learned = psk::test::randomLearnedSketch(s.h, s.r, seed + 4);
    if (s.learned) {
        psk::writeSafeTensors(sketchFile.path(), psk::learnedSketchToSafeTensors(learned));
        info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
        info.sketchFile = sketchFile.path().c_str();
    }
    PskAttention attn = nullptr;
    o.created = pskCreateAttention(ctx, &info, &attn);
    if (o.created != PSK_SUCCESS) return o;
    o.plan = planOf(attn);
    const auto q = psk::storage::quantize(psk::test::randomNormal(size_t(s.Hq) * s.n * s.h, seed + 1), type);
    const auto k = psk::storage::quantize(psk::test::randomNormal(size_t(s.Hkv) * s.n * s.h, seed + 2), type);
    const auto v = psk::storage::quantize(psk::test::randomNormal(size_t(s.Hkv) * s.n * s.dv, seed + 3), type);
    psk::test::HostForward forward;
    forward.layout = {1, s.n, PSK_LAYOUT_BHND, 0};
    forward.type = type;
    forward.Hq = s.Hq;
    forward.Hkv = s.Hkv;
    forward.h = s.h;
    forward.dv = s.dv;
    const std::vector<float> got = forward.run(attn, q, k, v);
    pskDestroyAttention(attn);
    if (got.empty()) return o;
    const psk::ref::Shape shape{1, int(s.Hq), int(s.Hkv), int(s.n), int(s.h), int(s.dv)};
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want;
    psk::ref::PolysketchConfig config;
    config.sketch = s.learned ? psk::ref::sketchFunction(psk::test::toReference(learned))
                              : psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(seed, 4, s.h, s.r)));
    config.degree = 4;
    config.scale = info.scale;
    config.causal = true;
    config.blockSize = int(s.b);
    psk::ref::polysketchAttention(shape, qd, kd, vd, config, want);
    o.error = psk::test::relativeMaxError(got, want);
    return o;
}

using TuningOnDevice = psk::test::ContextTest;

// The generic feature map (team kernels off) with features.rows from a table named by
// PSK_TUNING_TABLE: the kernel runs 16 rows per workgroup, its reason names the entry, the plan's
// comment names the table, and the output still matches the float64 reference; without the table
// the model's 64 rows stand.
TEST_F(TuningOnDevice, EntryChangesThePlanAndStillMatchesTheReference) {
    ScopedEnv team("PSK_DISABLE_TEAM_KERNELS", "1");
    const Shape s;
    const std::string path = writeFile("rows.tuning", "psk-tuning 1\ndevice any\n# a comment line\nfeatures.rows 16 h=16 type=f32\n");
    {
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT32);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_NE(o.plan.find("sketch_features.random.f32 (generic) ROWS=16 "), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("features.rows=16 from tuning table " + path + " line 4 (features.rows 16 h=16 type=f32); tunable: features.rows=16"),
                  std::string::npos)
            << o.plan;
        EXPECT_NE(o.plan.find("# tuning table: " + path + " (PSK_TUNING_TABLE, 1 entry, any device)"), std::string::npos) << o.plan;
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kPolysketchFloat32);
    }
    {
        ScopedEnv table("PSK_TUNING_TABLE", "none");
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT32);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_NE(o.plan.find("sketch_features.random.f32 (generic) ROWS=64 "), std::string::npos) << o.plan;
        EXPECT_EQ(o.plan.find("from tuning table"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("# tuning table: none (PSK_TUNING_TABLE = none)"), std::string::npos) << o.plan;
    }
}

// The emulated cooperative output (float16) with FEAT_CHUNK, KEY_TILE and STAGE_BATCH from a table
// (3 loads in flight: the staging rounds end inside a batch): applied where they fit, one that is
// not a multiple of the product shape and one that needs more shared memory than the device has
// are ignored with their reasons, and the output still matches the float64 reference.
TEST_F(TuningOnDevice, CooperativeOutputEntriesAppliedOrIgnoredWithAReason) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    ScopedEnv stages("PSK_COOPMAT_STAGES", "output");  // the other stages' emulated kernels only cost compile time here
    const Shape s;
    {
        const std::string path =
            writeFile("output.tuning", "psk-tuning 1\ndevice any\noutput.feat_chunk 16 type=f16\noutput.key_tile 16\noutput.stage_batch 3\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT16);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_NE(o.plan.find("FEAT_CHUNK=16"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("KEY_TILE=16"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("output.feat_chunk=16 from tuning table " + path + " line 3"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("output.key_tile=16 from tuning table " + path + " line 4"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find(" STAGE_BATCH=3"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("output.stage_batch=3 from tuning table " + path + " line 5"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("output.sg_m=1 output.stage_batch=3"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("tunable: output.feat_chunk=16 output.key_tile=16 output.wn="), std::string::npos) << o.plan;
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kFloat16);
    }
    {
        // A chunk that neither divides nor is a multiple of the workgroup's invocations (48 against
        // 32): phi(q)'s expansion cannot decode each invocation's pairs once per chunk (A_FIXED in
        // polysketch_output_coopmat.comp) and takes them element by element, on the GPU's tiling
        // under the emulation (32 invocations), as a table may ask of a GPU (the emulation's own
        // tilings, 24 invocations for 32 features, take that path in every emulated case).
        ScopedEnv gpuTiles("PSK_COOPMAT_EMULATION", "gpu-tiles");
        const std::string path = writeFile("chunk48.tuning", "psk-tuning 1\ndevice any\noutput.feat_chunk 48 type=f16\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT16);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_NE(o.plan.find("FEAT_CHUNK=48"), std::string::npos) << o.plan;
        const size_t line = o.plan.find("polysketch_output_coopmat"), at = o.plan.find("THREADS=", line);
        ASSERT_NE(at, std::string::npos) << o.plan;
        const unsigned threads = unsigned(std::stoul(o.plan.substr(at + 8)));
        EXPECT_TRUE(threads % 48 != 0 && 48 % threads != 0) << "THREADS=" << threads << ": the pairs' fixed path, not the fallback";
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kFloat16);
    }
    {
        // Entries that do not fit: the plan alone (planPolysketch compiles nothing; a forward would
        // compile the model's tiling of the emulated output once more, a minute on a cold cache).
        const std::string path = writeFile("misfit.tuning", "psk-tuning 1\ndevice any\noutput.feat_chunk 24\noutput.key_tile 1024\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const psk::PolysketchPlan plan = planShape(ctx, s, PSK_DATA_TYPE_FLOAT16);
        const std::string text = kernelText(plan.outputKernel);
        EXPECT_NE(text.find("line 3 (output.feat_chunk 24) ignored: FEAT_CHUNK must be a multiple of CM_K = 16"), std::string::npos) << text;
        EXPECT_NE(text.find("line 4 (output.key_tile 1024) ignored: needs "), std::string::npos) << text;
        EXPECT_NE(text.find("tunable: output.feat_chunk=32 output.key_tile=32 "), std::string::npos) << text;  // the model's
        EXPECT_NE(text.find("FEAT_CHUNK=32"), std::string::npos) << text;
    }
}

// output.sg_m re-plans the cooperative output around that many row groups (emulated, float16: its
// own tiling has one): the plan names the entry and runs SG_M=2, the output matches the float64
// reference; row groups beyond the block are ignored with the reason.
TEST_F(TuningOnDevice, CooperativeOutputRowGroupsFromTheTable) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
    const Shape s;
    {
        const std::string path = writeFile("output-sgm.tuning", "psk-tuning 1\ndevice any\noutput.sg_m 2 type=f16\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT16);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_NE(o.plan.find("polysketch_output_coopmat"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find(" SG_M=2 "), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("output.sg_m=2 from tuning table " + path + " line 3"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("output.cooperative=1 output.sg_m=2"), std::string::npos) << o.plan;
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kFloat16);
    }
    {
        const std::string path = writeFile("output-sgm-big.tuning", "psk-tuning 1\ndevice any\noutput.sg_m 16\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const psk::PolysketchPlan plan = planShape(ctx, s, PSK_DATA_TYPE_FLOAT16);
        const std::string text = kernelText(plan.outputKernel);
        EXPECT_NE(text.find("line 3 (output.sg_m 16) ignored: 16 row groups of 16 rows exceed the block of 32"), std::string::npos) << text;
        EXPECT_NE(text.find("SG_M=1 "), std::string::npos) << text;
    }
}

// output.sg_m where the query side's pool (x = s LN(q), TILE_M x h floats) leaves no tiling of that
// many row groups: the plan takes the feature map's q rows instead (FUSED_QUERY=0, the feature map
// for q and k), says why, and the output still matches the float64 reference. Without the entry the
// same shape computes the query side in the output (FUSED_QUERY=2). On an H200 (48 KiB) this is
// what makes 8 row groups, 512 invocations, a tiling at all.
TEST_F(TuningOnDevice, CooperativeOutputRowGroupsWithoutRoomForTheQuerySide) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
    Shape s;
    s.b = 64;  // room for 4 row groups of 16 rows
    {
        ScopedEnv table("PSK_TUNING_TABLE", "none");
        const psk::PolysketchPlan plan = planShape(ctx, s, PSK_DATA_TYPE_FLOAT16);
        const std::string text = kernelText(plan.outputKernel);
        EXPECT_NE(text.find(" FUSED_QUERY=2 "), std::string::npos) << text;
        EXPECT_TRUE(plan.fusedQuery) << text;
    }
    const std::string path = writeFile("output-sgm-unfused.tuning", "psk-tuning 1\ndevice any\noutput.sg_m 4 type=f16\n");
    ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
    const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT16);
    ASSERT_EQ(o.created, PSK_SUCCESS);
    EXPECT_NE(o.plan.find(" SG_M=4 "), std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find(" FUSED_QUERY=0 "), std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find("S(q) and q' from the feature map's rows (4 row groups leave no room for the query side's pool in shared memory)"),
              std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find("output.sg_m=4 from tuning table " + path + " line 3"), std::string::npos) << o.plan;
    EXPECT_EQ(o.plan.find("for k alone"), std::string::npos) << o.plan;
    EXPECT_GE(o.error, 0.0);
    EXPECT_LE(o.error, psk::conformance::kFloat16);
}

// states.sg_m re-plans the cooperative block states (the GPU's tiling, emulated: lavapipe's 32 KiB
// and 4-byte operands) around that many row groups: 1 row group of 4 matrices (64 features, where
// the model has 2 x 2) is applied, named, runs and matches the float64 reference; 4 row groups
// need more shared memory than lavapipe has and are ignored with the bytes; under the emulation's
// own small tiles the entry is ignored, and no tunable is offered.
TEST_F(TuningOnDevice, CooperativeStatesRowGroupsFromTheTable) {
    ScopedEnv stages("PSK_COOPMAT_STAGES", "states");
    const Shape s;
    {
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", "gpu-tiles");
        const std::string path = writeFile("states-sgm.tuning", "psk-tuning 1\ndevice any\nstates.sg_m 1 type=f16\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT16);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_NE(o.plan.find("block_states_coopmat.emu_f16.f16 (cooperative) THREADS=16 "), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find(" SG_M=1 SG_N=2 WM=4 "), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("states.sg_m=1 from tuning table " + path + " line 3"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("tunable: states.sg_m=1"), std::string::npos) << o.plan;
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kFloat16);
    }
    auto statesText = [&](const char* mode, const char* entry) {
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", mode);
        const std::string path = writeFile("states-sgm-misfit.tuning", std::string("psk-tuning 1\ndevice any\n") + entry + "\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        return kernelText(planShape(ctx, s, PSK_DATA_TYPE_FLOAT16).statesKernel);
    };
    const std::string misfit = statesText("gpu-tiles", "states.sg_m 4");
    EXPECT_NE(misfit.find("line 3 (states.sg_m 4) ignored: needs "), std::string::npos) << misfit;
    EXPECT_NE(misfit.find(" SG_M=2 SG_N=2 WM=2 "), std::string::npos) << misfit;  // the model's
    EXPECT_NE(misfit.find("tunable: states.sg_m=2"), std::string::npos) << misfit;
    const std::string small = statesText("1", "states.sg_m 1");
    EXPECT_NE(small.find("line 3 (states.sg_m 1) ignored: the emulation's small tiles"), std::string::npos) << small;
    EXPECT_EQ(small.find("tunable: states.sg_m"), std::string::npos) << small;
}

// The most row groups, run: an H200's psk tune tries output.sg_m 8 and states.sg_m 8 first (512
// invocations, 16 subgroups), which lavapipe's 32 KiB cannot hold at 16 x 16 x 16; at the 8 x 8 x 16
// shape (PSK_COOPMAT_EMULATION_SHAPE) the GPU's tiling with both entries does: the block states with
// 8 x 2 subgroups, the output with 8 row groups, and the forward matches the float64 reference.
TEST_F(TuningOnDevice, MostRowGroupsRunUnderTheEmulation) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "gpu-tiles");
    ScopedEnv shape("PSK_COOPMAT_EMULATION_SHAPE", "8x8x16");
    ScopedEnv stages("PSK_COOPMAT_STAGES", "states,output");
    Shape s;
    s.n = 200;
    s.h = s.dv = 16;
    s.r = 8;
    s.b = 128;
    const std::string path = writeFile("row-groups-8.tuning", "psk-tuning 1\ndevice any\noutput.sg_m 8\nstates.sg_m 8\n");
    ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
    const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT16);
    ASSERT_EQ(o.created, PSK_SUCCESS);
    EXPECT_NE(o.plan.find("block_states_coopmat.emu_f16.f16 (cooperative) THREADS=128 "), std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find(" SG_M=8 SG_N=2 WM=1 "), std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find("states.sg_m=8 from tuning table " + path + " line 4"), std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find("polysketch_output_coopmat.emu_f16.f16 (cooperative) THREADS=64 "), std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find("output.sg_m=8 from tuning table " + path + " line 3"), std::string::npos) << o.plan;
    EXPECT_GE(o.error, 0.0);
    EXPECT_LE(o.error, psk::conformance::kFloat16);
}

// Z as operands packed once per block (output.z_packed): the model packs (z_operands.comp before
// the output, whose Z_PACKED loads its B fragments from the records); a table's output.z_packed 0
// stages Z in each workgroup again, named in the reason; PSK_COOPMAT_Z_PACKED=off wins over a
// table's 1. Both paths run and match the float64 reference, the packed one with several chunks
// of features and a short last one (r = 16: F = 136, chunks of 32), in float16 and bfloat16.
TEST_F(TuningOnDevice, ZOperandsPackedOrStagedFromTheTable) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
    const Shape s;
    for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16}) {
        const bool f16 = type == PSK_DATA_TYPE_FLOAT16;
        const Outcome o = runCase(ctx, s, type);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_NE(o.plan.find(f16 ? "z_operands.f16.f32 (generic) " : "z_operands.bf16.f32 (generic) "), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find(" FEAT_CHUNK=32 NC=32 WALK=0: "), std::string::npos) << o.plan;  // dv + 1 = 25 columns in 2 tiles of 16
        EXPECT_NE(o.plan.find(" Z_PACKED=1: "), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("; Z as operands packed once per block (z_operands after the prefix)"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find(" output.z_packed=1"), std::string::npos) << o.plan;
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, f16 ? psk::conformance::kFloat16 : psk::conformance::kBFloat16);
    }
    {
        const std::string path = writeFile("z-staged.tuning", "psk-tuning 1\ndevice any\noutput.z_packed 0\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT16);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_EQ(o.plan.find("z_operands"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find(" Z_PACKED=0: "), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("; Z staged per workgroup; output.z_packed=0 from tuning table " + path + " line 3"), std::string::npos)
            << o.plan;
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kFloat16);
    }
    {
        const std::string path = writeFile("z-packed.tuning", "psk-tuning 1\ndevice any\noutput.z_packed 1\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        ScopedEnv off("PSK_COOPMAT_Z_PACKED", "off");
        const psk::PolysketchPlan plan = planShape(ctx, s, PSK_DATA_TYPE_FLOAT16);
        EXPECT_TRUE(plan.zOperands.kernel.empty());
        EXPECT_EQ(plan.zOperands.record, 0u);
        EXPECT_NE(kernelText(plan.outputKernel).find(" Z_PACKED=0: "), std::string::npos) << kernelText(plan.outputKernel);
        EXPECT_NE(plan.outputKernel.reason.find("; Z staged per workgroup (PSK_COOPMAT_Z_PACKED=off)"), std::string::npos)
            << plan.outputKernel.reason;
    }
}

// The prefix and the packing in one pass (prefix.pack_min_groups; z_operands.comp's WALK = 1): the
// model plans the walking form beside the packing kernel, for calls of at least 64 packing
// workgroups (chunks x B x Hkv: 5 here, so the model's plan runs the scan and the packing pass);
// a table's 1 walks every call, whose output then reads records of the walk's prefix. Both match
// the float64 reference: 3 and 10 blocks (the walk's three shared maxima cycled), a short last
// block, GQA, a short last chunk of features, float16 and bfloat16.
TEST_F(TuningOnDevice, ZOperandsWalkFromTheTable) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
    {
        const psk::PolysketchPlan plan = planShape(ctx, Shape{}, PSK_DATA_TYPE_FLOAT16);
        ASSERT_FALSE(plan.zOperands.walkKernel.empty());
        EXPECT_EQ(plan.zOperands.walkMinGroups, psk::kZOperandsWalkMinGroups);
        const std::string text = kernelText(plan.zOperands.walkKernel);
        EXPECT_NE(text.find(" WALK=1: the prefix and the packing in one pass"), std::string::npos) << text;
        EXPECT_NE(text.find("with at least 64 workgroups (chunks x B x Hkv); tunable: prefix.pack_min_groups=64"), std::string::npos)
            << text;
        // The cooperative self-test's probe (a few blocks of one sequence) walks whatever the threshold.
        psk::ResolvedAttention probe = psk::resolveAttention(createInfo(Shape{}, PSK_DATA_TYPE_FLOAT16, 1), ctx->caps());
        probe.config.selfTestProbe = true;
        const psk::TuningSelection tuning = ctx->tuningSelection();
        const psk::PolysketchPlan probed = psk::planPolysketch(probe.config, *probe.sketch, ctx->caps(), &tuning);
        EXPECT_EQ(probed.zOperands.walkMinGroups, 1u);
        EXPECT_NE(probed.zOperands.walkKernel.reason.find("; the self-test's probe walks every call"), std::string::npos)
            << probed.zOperands.walkKernel.reason;
    }
    const std::string path = writeFile("z-walk.tuning", "psk-tuning 1\ndevice any\nprefix.pack_min_groups 1\n");
    ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
    for (uint32_t n : {77u, 300u})
        for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16}) {
            Shape s;
            s.n = n;
            const Outcome o = runCase(ctx, s, type);
            ASSERT_EQ(o.created, PSK_SUCCESS);
            EXPECT_NE(o.plan.find(" WALK=1: the prefix and the packing in one pass"), std::string::npos) << o.plan;
            EXPECT_NE(o.plan.find("; prefix.pack_min_groups=1 from tuning table " + path + " line 3"), std::string::npos) << o.plan;
            EXPECT_GE(o.error, 0.0);
            EXPECT_LE(o.error, type == PSK_DATA_TYPE_FLOAT16 ? psk::conformance::kFloat16 : psk::conformance::kBFloat16)
                << "n = " << n;
        }
    // Full attention has no prefix: the packing kernel alone.
    PskAttentionCreateInfo info = createInfo(Shape{}, PSK_DATA_TYPE_FLOAT16, 1);
    info.flags = 0;
    const psk::ResolvedAttention resolved = psk::resolveAttention(info, ctx->caps());
    const psk::TuningSelection tuning = ctx->tuningSelection();
    const psk::PolysketchPlan full = psk::planPolysketch(resolved.config, *resolved.sketch, ctx->caps(), &tuning);
    EXPECT_FALSE(full.zOperands.kernel.empty());
    EXPECT_TRUE(full.zOperands.walkKernel.empty());
}

// The records are larger than Z (NT x CM_N columns, hi + lo): where they alone exceed what one
// binding can address, the call fails TOO_LARGE (nothing recorded), and the message names the
// region and the way out, Z staged by the output.
TEST_F(TuningOnDevice, ZOperandsTooLargeForABindingSaysHowToStageZ) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
    const Shape s;
    psk::PolysketchPlan plan = planShape(ctx, s, PSK_DATA_TYPE_FLOAT16);
    ASSERT_FALSE(plan.zOperands.kernel.empty());
    const psk::ResolvedAttention resolved = psk::resolveAttention(createInfo(s, PSK_DATA_TYPE_FLOAT16, 1), ctx->caps());
    psk::ForwardGeometry g;
    g.tokens = 4096;
    plan.maxRange = VkDeviceSize(1) << 40;
    const psk::PolysketchWorkspace ws = psk::polysketchWorkspace(plan, resolved.config, g);
    ASSERT_GT(ws.zOperands.size, ws.states.size);
    plan.maxRange = (ws.states.size + ws.zOperands.size) / 2;  // the states fit, the records do not
    try {
        psk::polysketchWorkspace(plan, resolved.config, g);
        ADD_FAILURE() << "no error for records of " << ws.zOperands.size << " bytes in a binding of " << plan.maxRange;
    } catch (const psk::Error& e) {
        EXPECT_EQ(e.code(), PSK_ERROR_TOO_LARGE);
        const std::string what = e.what();
        EXPECT_NE(what.find("polysketch z operands needs " + std::to_string(ws.zOperands.size) + " bytes"), std::string::npos) << what;
        EXPECT_NE(what.find("or Z staged by the output (PSK_COOPMAT_Z_PACKED=off)"), std::string::npos) << what;
    }
}

// output.cooperative 0 turns the cooperative output the plan would take (emulated, float16) into
// the generic one, named in its reason with the value psk tune would try back; 1 keeps it; the
// output still matches the float64 reference.
TEST_F(TuningOnDevice, CooperativeOutputSwitchedOffByTheTable) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
    const Shape s;
    {
        const std::string path = writeFile("output-off.tuning", "psk-tuning 1\ndevice any\noutput.cooperative 0 h=16 type=f16\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT16);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_EQ(o.plan.find("polysketch_output_coopmat"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("; not the cooperative output (the tuning table's choice); output.cooperative=0 from tuning table " + path +
                              " line 3 (output.cooperative 0 h=16 type=f16); tunable: output.cooperative=0"),
                  std::string::npos)
            << o.plan;
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kFloat16);
    }
    {
        // The plan alone: 1 is the model's choice, applied and named; no cooperative output for
        // float32, so there the entry is ignored with the reason.
        const std::string path = writeFile("output-on.tuning", "psk-tuning 1\ndevice any\noutput.cooperative 1\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_FLOAT32}) {
            const psk::PolysketchPlan plan = planShape(ctx, s, type);
            const std::string text = plan.outputKernel.variant + " " + plan.outputKernel.reason;
            if (type == PSK_DATA_TYPE_FLOAT16) {
                EXPECT_EQ(plan.outputKernel.kernel, psk::KernelId::PolysketchOutputCoopMat) << text;
                EXPECT_NE(text.find(" output.cooperative=1 output.sg_m=1 output.stage_batch=8 output.z_packed=1; output.cooperative=1 from tuning table " + path + " line 3"), std::string::npos) << text;
            } else {
                EXPECT_NE(plan.outputKernel.kernel, psk::KernelId::PolysketchOutputCoopMat) << text;
                EXPECT_NE(text.find("line 3 (output.cooperative 1) ignored: no cooperative output for this plan"), std::string::npos) << text;
            }
        }
    }
}

// output.generic_rows chooses the generic output's kernel (the plan without team kernels, as a
// GPU's): 1, the model's choice at h, dv <= 64, the row kernel; 0 the register tiles, named with
// the entry and the value psk tune would try; PSK_GENERIC_OUTPUT wins over the table; the
// cooperative output names the parameter too (psk tune learns of it from the model's plan); the
// tiles' output still matches the float64 reference.
TEST_F(TuningOnDevice, GenericOutputKernelChosenByTheTable) {
    ScopedEnv team("PSK_DISABLE_TEAM_KERNELS", "1");
    ScopedEnv generic("PSK_GENERIC_OUTPUT", nullptr);
    const Shape s;
    {
        ScopedEnv none("PSK_TUNING_TABLE", "none");
        const psk::PolysketchPlan plan = planShape(ctx, s, PSK_DATA_TYPE_FLOAT32);
        const std::string text = kernelText(plan.outputKernel);
        EXPECT_EQ(plan.outputKernel.kernel, psk::KernelId::PolysketchOutputRows) << text;
        EXPECT_NE(text.find("; the row kernel: h, dv <= 64 (faster than the tiles there on an H200; PSK_GENERIC_OUTPUT); tunable: output.generic_rows=1"),
                  std::string::npos)
            << text;
    }
    const std::string path = writeFile("tiles.tuning", "psk-tuning 1\ndevice any\noutput.generic_rows 0 h=16\n");
    {
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT32);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_EQ(o.plan.find("polysketch_output_rows"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("; register tiles; output.generic_rows=0 from tuning table " + path +
                              " line 3 (output.generic_rows 0 h=16); tunable: output.generic_rows=0"),
                  std::string::npos)
            << o.plan;
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kPolysketchFloat32);
    }
    {
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        ScopedEnv rows("PSK_GENERIC_OUTPUT", "rows");
        const psk::PolysketchPlan plan = planShape(ctx, s, PSK_DATA_TYPE_FLOAT32);
        const std::string text = kernelText(plan.outputKernel);
        EXPECT_EQ(plan.outputKernel.kernel, psk::KernelId::PolysketchOutputRows) << text;
        EXPECT_NE(text.find("; the row kernel (PSK_GENERIC_OUTPUT=rows)"), std::string::npos) << text;
        EXPECT_EQ(text.find("output.generic_rows"), std::string::npos) << text;
    }
    {
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
        ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
        ScopedEnv none("PSK_TUNING_TABLE", "none");
        const psk::PolysketchPlan plan = planShape(ctx, s, PSK_DATA_TYPE_FLOAT16);
        const std::string text = kernelText(plan.outputKernel);
        EXPECT_EQ(plan.outputKernel.kernel, psk::KernelId::PolysketchOutputCoopMat) << text;
        EXPECT_NE(text.find("; tunable: output.generic_rows=1"), std::string::npos) << text;
    }
}

// generic.stage_rolled (shaders/staging.glsl, STAGE_ROLLED) reaches every generic kernel that
// stages (the feature map, block states and both outputs) where its key matches, each naming the
// entry; elsewhere the model's 0 stands, named as a tunable. (The sweeps through the rolled
// staging, `generic_output_*_rolled.Sweeps`, check the results.)
TEST_F(TuningOnDevice, GenericStagingRolledByTheTable) {
    ScopedEnv team("PSK_DISABLE_TEAM_KERNELS", "1");
    const Shape s;
    const std::string path = writeFile("rolled.tuning", "psk-tuning 1\ndevice any\ngeneric.stage_rolled 1 type=f32\n");
    ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
    for (const char* output : {"rows", "tiles"}) {
        SCOPED_TRACE(output);
        ScopedEnv generic("PSK_GENERIC_OUTPUT", output);
        for (PskDataType type : {PSK_DATA_TYPE_FLOAT32, PSK_DATA_TYPE_FLOAT16}) {
            const psk::PolysketchPlan plan = planShape(ctx, s, type);
            const bool rolled = type == PSK_DATA_TYPE_FLOAT32;
            for (const psk::KernelChoice* k : {&plan.featureKernel, &plan.statesKernel, &plan.outputKernel}) {
                const std::string text = kernelText(*k);
                EXPECT_NE(text.find(": generic kernel"), std::string::npos) << text;
                EXPECT_NE(text.find(rolled ? " STAGE_ROLLED=1" : " STAGE_ROLLED=0"), std::string::npos) << text;
                EXPECT_NE(text.find(rolled ? "generic.stage_rolled=1 from tuning table " + path + " line 3 (generic.stage_rolled 1 type=f32)"
                                           : std::string("tunable: generic.stage_rolled=0")),
                          std::string::npos)
                    << text;
            }
        }
    }
    // PSK_STAGE_ROLLED wins over the table (the GPU check's way to roll the staging with a device's
    // built-in table in effect); anything but 0 or 1 is refused.
    {
        ScopedEnv env("PSK_STAGE_ROLLED", "0");
        const std::string text = kernelText(planShape(ctx, s, PSK_DATA_TYPE_FLOAT32).statesKernel);
        EXPECT_NE(text.find(" STAGE_ROLLED=0"), std::string::npos) << text;
        EXPECT_NE(text.find("; staging rolled 0 (PSK_STAGE_ROLLED)"), std::string::npos) << text;
        EXPECT_EQ(text.find("generic.stage_rolled"), std::string::npos) << text;
    }
    {
        ScopedEnv env("PSK_STAGE_ROLLED", "yes");
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT32);
        EXPECT_EQ(o.created, PSK_ERROR_INVALID_ARGUMENT);
    }
}

/** The plan of `s` in storage `type` under the environment and table in effect: kernelText per stage. */
std::string stagePlans(PskContext ctx, const Shape& s, PskDataType type) {
    const psk::PolysketchPlan plan = planShape(ctx, s, type);
    std::string text;
    for (const psk::KernelChoice* k : {&plan.featureKernel, &plan.statesKernel, &plan.outputKernel}) text += kernelText(*k) + "\n";
    return text;
}

// Float32 storage on the cooperative kernels, every operand split into float16 hi + lo
// (docs/MATH.md, "Products on 16-bit matrix units"): only where asked (PSK_COOPMAT_FLOAT32=on)
// or where a device's table measured it faster (float32.cooperative 1); then the float32 variants
// with the split constants on, 16-bit storage with them off, and the output within the float32
// threshold. Without either, the FP32 kernels with the reason and the value psk tune would try.
TEST_F(TuningOnDevice, Float32SplitProductsOnlyWhereAskedOrMeasured) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    ScopedEnv none("PSK_TUNING_TABLE", "none");
    const Shape s;
    {
        ScopedEnv unset("PSK_COOPMAT_FLOAT32", nullptr);
        const std::string text = stagePlans(ctx, s, PSK_DATA_TYPE_FLOAT32);
        EXPECT_EQ(text.find("_coopmat."), std::string::npos) << text;
        EXPECT_NE(text.find("; not the cooperative kernels: float32 storage keeps the FP32 kernels (not measured faster on this device); "
                            "tunable: float32.cooperative=0"),
                  std::string::npos)
            << text;
    }
    {
        ScopedEnv off("PSK_COOPMAT_FLOAT32", "off");
        const std::string text = stagePlans(ctx, s, PSK_DATA_TYPE_FLOAT32);
        EXPECT_EQ(text.find("_coopmat."), std::string::npos) << text;
        EXPECT_NE(text.find("float32 storage keeps the FP32 kernels (PSK_COOPMAT_FLOAT32=off)"), std::string::npos) << text;
    }
    {
        ScopedEnv on("PSK_COOPMAT_FLOAT32", "on");
        const std::string f32 = stagePlans(ctx, s, PSK_DATA_TYPE_FLOAT32);
        EXPECT_NE(f32.find("sketch_features_coopmat.emu_f16_random.f32 "), std::string::npos) << f32;
        EXPECT_NE(f32.find("block_states_coopmat.emu_f16.f32 "), std::string::npos) << f32;
        EXPECT_NE(f32.find("polysketch_output_coopmat.emu_f16.f32 "), std::string::npos) << f32;
        EXPECT_NE(f32.find(" SPLIT_V=1"), std::string::npos) << f32;
        EXPECT_NE(f32.find(" SPLIT_LOCAL=1"), std::string::npos) << f32;
        EXPECT_NE(f32.find("float32 storage on hi + lo products (PSK_COOPMAT_FLOAT32=on)"), std::string::npos) << f32;
        for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16}) {
            const std::string text = stagePlans(ctx, s, type);
            EXPECT_NE(text.find(" SPLIT_V=0"), std::string::npos) << text;
            EXPECT_NE(text.find(" SPLIT_LOCAL=0"), std::string::npos) << text;
            EXPECT_EQ(text.find("float32 storage"), std::string::npos) << text;
        }
    }
    {
        ScopedEnv bad("PSK_COOPMAT_FLOAT32", "sometimes");
        const PskAttentionCreateInfo info = createInfo(s, PSK_DATA_TYPE_FLOAT32, 1);
        PskAttention attn = nullptr;
        EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_ERROR_INVALID_ARGUMENT);
        EXPECT_EQ(attn, nullptr);
        std::string errors;
        for (const std::string& e : psk::test::sharedLog().errors) errors += e + "\n";
        EXPECT_NE(errors.find("PSK_COOPMAT_FLOAT32=sometimes: expected auto, on or off"), std::string::npos) << errors;
        psk::test::sharedLog().clear();
    }
    {
        // A table's entry, run end to end: the split kernels' output within the float32 threshold.
        ScopedEnv unset("PSK_COOPMAT_FLOAT32", nullptr);
        const std::string path = writeFile("float32-on.tuning", "psk-tuning 1\ndevice any\nfloat32.cooperative 1 type=f32\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT32);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_NE(o.plan.find("polysketch_output_coopmat.emu_f16.f32"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("block_states_coopmat.emu_f16.f32"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find("; float32.cooperative=1 from tuning table " + path + " line 3 (float32.cooperative 1 type=f32); tunable: float32.cooperative=1"),
                  std::string::npos)
            << o.plan;
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kPolysketchFloat32);
    }
}

// A table for another device is not applied; a bad table is an error where it is named: at context
// creation for the create info's, at attention creation for PSK_TUNING_TABLE's.
TEST_F(TuningOnDevice, OtherDevicesAndBadFiles) {
    ScopedEnv team("PSK_DISABLE_TEAM_KERNELS", "1");
    const Shape s;
    const std::string other = writeFile("other-device.tuning", "psk-tuning 1\ndevice vendor=0xffff id=0xffff\nfeatures.rows 16\n");
    {
        ScopedEnv table("PSK_TUNING_TABLE", other.c_str());
        const PskAttentionCreateInfo info = createInfo(s, PSK_DATA_TYPE_FLOAT32, 1);
        PskAttention attn = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
        const std::string plan = planOf(attn);
        pskDestroyAttention(attn);
        EXPECT_NE(plan.find("ROWS=64 "), std::string::npos) << plan;
        EXPECT_NE(plan.find("is for vendor 0xffff id 0xffff, not this device"), std::string::npos) << plan;
    }
    const std::string bad = writeFile("bad.tuning", "psk-tuning 1\ndevice any\nfeatures.rows many\n");
    {
        ScopedEnv table("PSK_TUNING_TABLE", bad.c_str());
        const PskAttentionCreateInfo info = createInfo(s, PSK_DATA_TYPE_FLOAT32, 1);
        PskAttention attn = nullptr;
        EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_ERROR_BAD_FILE);
        EXPECT_EQ(attn, nullptr);
        psk::test::MessageLog& log = psk::test::sharedLog();
        ASSERT_FALSE(log.errors.empty());
        EXPECT_NE(log.errors.back().find("line 3: the value 'many' is not a 32-bit unsigned number"), std::string::npos) << log.errors.back();
        log.clear();
    }
    // The create info's table: read once, at context creation, and it wins over PSK_TUNING_TABLE.
    psk::test::MessageLog log;
    PskContextCreateInfo ci{};
    ci.messageCallback = &psk::test::MessageLog::callback;
    ci.messageUserData = &log;
    ci.tuningTable = bad.c_str();
    PskContext own = nullptr;
    EXPECT_EQ(pskCreateContext(&ci, &own), PSK_ERROR_BAD_FILE);
    EXPECT_EQ(own, nullptr);
    ASSERT_FALSE(log.errors.empty());
    EXPECT_NE(log.errors.back().find("bad.tuning line 3"), std::string::npos) << log.errors.back();
    const std::string rows = writeFile("rows32.tuning", "psk-tuning 1\ndevice any\nfeatures.rows 32\n");
    ci.tuningTable = rows.c_str();
    ASSERT_EQ(pskCreateContext(&ci, &own), PSK_SUCCESS);
    {
        ScopedEnv table("PSK_TUNING_TABLE", bad.c_str());
        const PskAttentionCreateInfo info = createInfo(s, PSK_DATA_TYPE_FLOAT32, 1);
        PskAttention attn = nullptr;
        ASSERT_EQ(pskCreateAttention(own, &info, &attn), PSK_SUCCESS);
        const std::string plan = planOf(attn);
        pskDestroyAttention(attn);
        EXPECT_NE(plan.find("ROWS=32 "), std::string::npos) << plan;
        EXPECT_NE(plan.find("(PskContextCreateInfo::tuningTable, 1 entry, any device)"), std::string::npos) << plan;
    }
    pskDestroyContext(own);
}

// features.learned_tile sets the generic learned feature map's form: 16 hidden units per chunk
// (tiled, even on a CPU driver, whose model choice is the row form), 0 the row form; 6 (not a
// multiple of 4) is ignored with the reason; the output matches the float64 reference each time.
TEST_F(TuningOnDevice, LearnedFeatureMapFormFromTheTable) {
    ScopedEnv team("PSK_DISABLE_TEAM_KERNELS", nullptr);
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", nullptr);
    Shape s;
    s.learned = true;
    s.h = 32;
    struct Want {
        const char* entry;
        const char* spec;
        const char* reason;
    };
    for (const Want& w : {Want{"16", " LEARNED_TILE=16", "learned products tiled: 4 rows x 4 hidden units"},
                          Want{"0", " LEARNED_TILE=0", "learned products one row per invocation; features.learned_tile=0 from tuning table"},
                          Want{"6", "", "(features.learned_tile 6) ignored: not a multiple of 4"}}) {
        const std::string path = writeFile(std::string("learned-") + w.entry + ".tuning",
                                           std::string("psk-tuning 1\ndevice any\nfeatures.learned_tile ") + w.entry + "\n");
        ScopedEnv table("PSK_TUNING_TABLE", path.c_str());
        const Outcome o = runCase(ctx, s, PSK_DATA_TYPE_FLOAT32);
        ASSERT_EQ(o.created, PSK_SUCCESS);
        EXPECT_NE(o.plan.find("sketch_features.learned.f32 (generic)"), std::string::npos) << o.plan;
        EXPECT_NE(o.plan.find(w.spec), std::string::npos) << w.entry << "\n" << o.plan;
        EXPECT_NE(o.plan.find(w.reason), std::string::npos) << w.entry << "\n" << o.plan;
        EXPECT_NE(o.plan.find("features.learned_tile="), std::string::npos) << o.plan;  // named as tunable
        EXPECT_GE(o.error, 0.0);
        EXPECT_LE(o.error, psk::conformance::kPolysketchFloat32) << w.entry;
    }
}

}  // namespace
