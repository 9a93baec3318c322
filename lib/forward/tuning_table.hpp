// Tuning tables: measured overrides of the planner's tile choices, per device. The planner
// (forward/polysketch_plan.hpp) picks every tile from a model of the hardware; a table written by
// `psk tune` on a device replaces a choice where a measurement found a faster one, for the shape
// classes it measured, and the plan names the entry that made each choice. Without a table, or
// where it has no entry, the model's choice stands.
//
// A table is a small text file (docs/PERFORMANCE.md, "Tuning"):
//
//   # comments start with '#', anywhere on a line
//   psk-tuning 1
//   device vendor=0x10de id=0x2330 driver=0x8a4a4000 name="NVIDIA H100 80GB HBM3" chip="GH100" chip_ids=0x2331,0x2335
//   output.feat_chunk 32 h=64 dv=64 r=32 type=f16 causal=1
//
// The first line that is not blank or a comment names the format and its version; then one
// `device` line (`device any` applies to every device; `chip_ids`, optional, lists the other device
// ids of the same chip, which the table also applies to where they have no table of their own:
// the choices it records are set by the chip's registers, compiler and units far more than by its
// memory or clocks, and a note says to re-run psk tune there); then one entry per line: a parameter, its
// value, and the shape class it applies to as key=value pairs (a key left out matches every value).
// Where several entries of a parameter match a call, the one with the most keys wins, then the
// first in the file. Anything else (an unknown parameter or key, a value out of range, a repeated
// entry) makes the whole table invalid: PSK_ERROR_BAD_FILE naming the line, never a guess.
//
// Self-contained on purpose (the public header and psk::Error only, no Vulkan): psk tune writes its
// tables with the same code and parses them back before it reports them written.
#pragma once

#include <polysketch/polysketch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace psk {

/** What a table entry may set. Each names one choice of polysketch_plan.cpp. */
enum class TuningParameter : uint32_t {
    StatesWalkMinGroups,  // states.walk_min_groups: PolysketchTiles::statesWalkMinGroups (cooperative block states)
    OutputFeatChunk,      // output.feat_chunk: the cooperative output's FEAT_CHUNK
    OutputKeyTile,        // output.key_tile: the cooperative output's KEY_TILE
    OutputWn,             // output.wn: the cooperative output's column tiles per subgroup (WN)
    FeaturesTile,         // features.tile: index into the cooperative feature map's tile list
    FeaturesRows,         // features.rows: rows per workgroup of the generic feature map
    BaselinesTile,        // baselines.tile: index into the FlashAttention-2 kernel's tiling table (softmax, polynomial)
    OutputCooperative,    // output.cooperative: 1 the cooperative output where the plan can take it, 0 the generic one
    OutputSgM,            // output.sg_m: the cooperative output's row groups (SG_M; TILE_M = SG_M x CM_M query rows)
    FeaturesLearnedTile,  // features.learned_tile: the generic learned feature map's hidden units per chunk (LEARNED_TILE; 0: one row per invocation)
    BaselinesFp32Tile,    // baselines.fp32_tile: index into the FP32 FlashAttention-2 kernel's tiling table (softmax, polynomial)
    Float32Cooperative,   // float32.cooperative: 1 float32 storage on the polysketch cooperative kernels (hi + lo operands), 0 the FP32 kernels
    BaselinesFp32Rows,    // baselines.fp32_rows: 1 the one-row FP32 baseline kernel, 0 the FP32 FlashAttention-2 kernel where a tiling fits
    OutputStageBatch,     // output.stage_batch: the cooperative output's loads in flight per invocation (STAGE_BATCH)
    StatesSgM,            // states.sg_m: the cooperative block states' row groups (SG_M; invocations SG_M x SG_N x subgroup)
    OutputZPacked,        // output.z_packed: 1 the cooperative output loads Z as operands packed once per block (Z_PACKED), 0 it stages Z per workgroup
    OutputGenericRows,    // output.generic_rows: 1 the generic output's row kernel where its tiles fit, 0 its register tiles
    GenericStageRolled,   // generic.stage_rolled: 1 the generic kernels stage their tiles one batch of loads at a time (STAGE_ROLLED), 0 unrolled
    PrefixPackMinGroups,  // prefix.pack_min_groups: the packed Z's walking form (prefix and packing in one pass) from this many workgroups (ZOperandsPlan::walkMinGroups)
    Count
};
inline constexpr uint32_t kTuningParameterCount = uint32_t(TuningParameter::Count);

/** "states.walk_min_groups", ... as tables and plans spell them. */
const char* tuningParameterName(TuningParameter parameter);
/** The parameter spelled `name`; nullopt when there is none. */
std::optional<TuningParameter> tuningParameterNamed(std::string_view name);

/** The shape class of one attention object, as entries key it. */
struct TuningShape {
    uint32_t headDim = 0, valueDim = 0, sketchLength = 0, degree = 0;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    bool causal = false, localExact = false, learned = false;
};

/** Which shapes an entry applies to: each key that is set must equal the shape's. */
struct TuningKey {
    std::optional<uint32_t> headDim, valueDim, sketchLength, degree;  // h, dv, r, p
    std::optional<PskDataType> type;                                  // type = f32 | f16 | bf16
    std::optional<bool> causal, localExact, learned;                  // causal, local = 0 | 1; sketch = random | learned
    bool matches(const TuningShape& shape) const;
    /** How many keys are set: the more, the more specific. */
    uint32_t specificity() const;
    /** "h=64 dv=64 r=32 type=f16 causal=1" (the keys that are set, in this order; "" for none). */
    std::string describe() const;
    bool operator==(const TuningKey& other) const;
};
/** The key that names exactly `shape` (every key set). */
TuningKey tuningKeyOf(const TuningShape& shape);

struct TuningEntry {
    TuningParameter parameter = TuningParameter::Count;
    uint32_t value = 0;
    TuningKey key;
    uint32_t line = 0;  // where it is in its table (1-based)
};

/** The device a table was measured on. */
struct TuningDevice {
    bool any = false;  // `device any`: every device
    uint32_t vendorId = 0, deviceId = 0;
    std::optional<uint32_t> driverVersion;
    std::string name;              // informative only
    std::string chip;              // informative only: the chip `chipIds` share (e.g. "GH100")
    std::vector<uint32_t> chipIds;  // other device ids of the same vendor and chip the table applies to, after their own tables
    /** Whether `deviceId` is one of chipIds (not the table's own id). */
    bool listsSibling(uint32_t vendor, uint32_t deviceId) const;
};

struct TuningTable {
    std::string source;  // where it came from: a path, or "tuning/devices/NAME" for a table built into the library
    TuningDevice device;
    std::vector<TuningEntry> entries;
    /** The entry of `parameter` for `shape`: the most specific match, then the first; null when none. */
    const TuningEntry* find(TuningParameter parameter, const TuningShape& shape) const;
};

/** Parses a table; throws psk::Error(PSK_ERROR_BAD_FILE) naming `source` and the line when it is not a valid one. */
TuningTable parseTuningTable(std::string_view text, const std::string& source);
/** Reads and parses the file at `path`; PSK_ERROR_BAD_FILE when it cannot be read or is not a valid table. */
TuningTable loadTuningTable(const std::string& path);

/** Writes a table that parseTuningTable reads back: the device line, then each entry with its comment lines before it. */
struct TuningTableLine {
    std::vector<std::string> comments;  // written as "# ..." lines before the entry
    TuningEntry entry;
};
std::string writeTuningTable(const TuningDevice& device, const std::vector<std::string>& header,
                             const std::vector<TuningTableLine>& lines);

/** The device a context runs on, as tables are matched against it. */
struct TuningDeviceIdentity {
    uint32_t vendorId = 0, deviceId = 0, driverVersion = 0;
    std::string name;
};

/** A table chosen for a context's device (or none), and how it was chosen: the plans print it. */
struct TuningSelection {
    std::shared_ptr<const TuningTable> table;  // null: the model's choices everywhere
    std::string description;
};

/** A table built into the library (tuning/devices/ in the source tree, embedded at build time). */
struct EmbeddedTuningTable {
    const char* name;
    const unsigned char* text;
    size_t size;
};
/** Every built-in table (generated: tuning_tables.cpp in the build folder). */
std::vector<EmbeddedTuningTable> embeddedTuningTables();

/**
 * The table for a device: `request` is a path, "none" (no table at all), or empty (the built-in
 * table of the device, if any); `origin` says where the request came from (for the description,
 * e.g. "PSK_TUNING_TABLE"). A table for another device is not applied (the description says so)
 * unless its device line lists this device among its chip's ids: then it is, with a note; a table
 * for another driver version of the same device is, with a note; among built-in tables, the
 * device's own wins over a sibling's, and then one of the same driver version over another. `builtIn` is the list to choose from
 * (embeddedTuningTables() but in tests). Throws PSK_ERROR_BAD_FILE for a path that is not a valid table.
 */
TuningSelection selectTuningTable(const std::string& request, const char* origin, const TuningDeviceIdentity& device,
                                  const std::vector<EmbeddedTuningTable>& builtIn);

}  // namespace psk
