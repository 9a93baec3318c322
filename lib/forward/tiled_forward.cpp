#include "forward/tiled_forward.hpp"
#include "kernels/kernel_pipeline.hpp"

#include "forward/coopmat_switches.hpp"
#include "kernels/coop_variants.hpp"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string_view>

#include "forward/polysketch_plan.hpp"
#include "forward/workspace.hpp"
#include "util/error.hpp"
#include "util/sizes.hpp"
#include "vk/context.hpp"
#include "forward/coopmat_selection.hpp"
#include "vk/device_caps.hpp"

namespace psk {

uint32_t attentionTiledCoopMatSharedBytes(const kernel::AttentionTiledCoopMatSpec& s, bool emulated) {
    // Mirrors the shader's pools: operand rows padded by 8 elements, 4-byte operands when emulated.
    const uint32_t tileM = s.SG_M * s.CM_M, nc = ceilDiv(s.VALUE_DIM, s.CM_N) * s.CM_N, pad = 8;
    const uint32_t subgroups = s.SG_M * s.SG_N;
    const uint32_t operands = tileM * (s.WIDTH_CHUNK + pad) + s.KEY_TILE * (s.WIDTH_CHUNK + pad) + tileM * (s.KEY_TILE + pad) +
                              s.KEY_TILE * (nc + pad);
    const uint32_t fPool = std::max(tileM * (s.KEY_TILE + 4), subgroups * s.CM_M * s.CM_N);
    const uint32_t exchange = emulated ? subgroups * (s.CM_M * s.CM_K + s.CM_K * s.CM_N) : 0;  // coopmat.glsl's cm_scratch
    // range_bits: RANGE_SLOTS = 3 words, declared as 4 (CM_SHARED_COUNT: whole 16 bytes).
    return (emulated ? 4 : 2) * operands + 4 * (fPool + tileM * s.VALUE_DIM + 4 * tileM + 4 + exchange);
}

uint32_t attentionTiledCoopMatEmulatedIterationsPerKeyTile(const kernel::AttentionTiledCoopMatSpec& s, uint32_t subgroupSize) {
    // The emulated backend walks matrix elements in per-lane loops: a load of an r x c matrix costs
    // r c / lanes iterations, a product (M K + K N + M N) / lanes. Counted per invocation and key
    // tile, with every loop of the kernel that is not unrolled.
    const uint32_t lanes = std::max<uint32_t>(1, subgroupSize), m = s.CM_M, n = s.CM_N, k = s.CM_K;
    const uint32_t loadA = ceilDiv(m * k, lanes), loadB = ceilDiv(k * n, lanes);
    const uint32_t product = ceilDiv(m * k + k * n + m * n, lanes), tile = ceilDiv(m * n, lanes);
    const uint32_t nt = ceilDiv(s.VALUE_DIM, n), wn = std::min(s.WN, nt), su = ceilDiv(s.KEY_TILE / n, s.SG_N);
    const uint32_t scores = ceilDiv(s.HEAD_DIM, s.WIDTH_CHUNK) + ceilDiv(s.HEAD_DIM, k) * (loadA + su * (loadB + product)) + su * tile;
    const uint32_t weighted = s.KEY_TILE / k * (loadA + wn * (loadB + product)) + wn * 2 * tile;
    // The element-wise loops over the key tile (maxima, V and K staging; Q when it takes several
    // width steps), strided by the workgroup.
    const uint32_t threads = s.SG_M * s.SG_N * lanes, tileM = s.SG_M * s.CM_M, steps = ceilDiv(s.HEAD_DIM, s.WIDTH_CHUNK);
    const uint32_t staging = ceilDiv(s.KEY_TILE * s.HEAD_DIM, threads) + ceilDiv(s.KEY_TILE * s.VALUE_DIM, threads) +
                             ceilDiv(s.KEY_TILE * nt * n, threads) +
                             steps * (ceilDiv(s.KEY_TILE * s.WIDTH_CHUNK, threads) + (steps > 1 ? ceilDiv(tileM * s.WIDTH_CHUNK, threads) : 0));
    return 1 + scores + weighted + staging;
}

uint32_t attentionTiledCoopMatEmulatedIterationsPerDispatch(const kernel::AttentionTiledCoopMatSpec& s, uint32_t subgroupSize) {
    // Once per dispatch: the row state in, the query maxima (and Q once), the output or state out.
    const uint32_t threads = s.SG_M * s.SG_N * std::max<uint32_t>(1, subgroupSize), tileM = s.SG_M * s.CM_M;
    return ceilDiv(tileM * (2 * s.VALUE_DIM + 2 * s.HEAD_DIM), threads);
}

uint32_t attentionFlashCoopMatSharedBytes(const kernel::AttentionFlashCoopMatSpec& s, bool emulated) {
    // Mirrors the shader's pools: operand rows padded by 8 elements (Q, or the subgroups' P tiles,
    // then K and V), 2 bytes each packed eight to a uvec4 (emulated too); the float32 score scratch
    // per subgroup, a float per invocation for the row reductions, and the emulation's exchange
    // region (cm_scratch).
    const uint32_t tileM = s.SG_M * s.ROW_TILES * s.CM_M, pad = 8;
    const uint32_t hp = ceilDiv(s.HEAD_DIM, s.CM_K) * s.CM_K, nc = ceilDiv(s.VALUE_DIM, s.CM_N) * s.CM_N;
    const uint32_t operands = std::max(tileM * (hp + pad), tileM * (s.KEY_TILE + pad)) + s.KEY_TILE * (hp + pad) + s.KEY_TILE * (nc + pad);
    const uint32_t exchange = emulated ? s.SG_M * (s.CM_M * s.CM_K + s.CM_K * s.CM_N) : 0;
    const uint32_t floats = tileM * (s.KEY_TILE + 4) + s.THREADS + exchange;
    return 2 * operands + 4 * floats;
}

namespace {

/** The emulated backend's per-lane loop iterations of one matrix operation (coopmat.glsl). */
struct EmulatedLoopCosts {
    uint32_t loadA, loadB, product, tile;
    EmulatedLoopCosts(uint32_t m, uint32_t n, uint32_t k, uint32_t lanes)
        : loadA(ceilDiv(m * k, lanes)), loadB(ceilDiv(k * n, lanes)), product(ceilDiv(m * k + k * n + m * n, lanes)),
          tile(ceilDiv(m * n, lanes)) {}
};

}  // namespace

uint32_t attentionFlashCoopMatEmulatedIterationsPerKeyTile(const kernel::AttentionFlashCoopMatSpec& s) {
    // Per invocation and key tile, every loop of the emulated variant (the shader's TILE_LOOPs are
    // loops there): the key-tile loop; K and V staged and fetched in chunks of 8; the scores (tile,
    // width and row-tile loops, the emulation's loads and products), stored; a row's keys read and
    // weighed (rows per lane x keys per lane, twice); the rescale of O counted as if it ran on every
    // tile; P V (key steps, row tiles, value tiles).
    const uint32_t lanes = std::max<uint32_t>(1, s.THREADS / s.SG_M), rt = std::max<uint32_t>(1, s.ROW_TILES);
    const EmulatedLoopCosts c(s.CM_M, s.CM_N, s.CM_K, lanes);
    const uint32_t ksteps = ceilDiv(s.HEAD_DIM, s.CM_K), st = s.KEY_TILE / s.CM_N, psteps = s.KEY_TILE / s.CM_K;
    const uint32_t nt = ceilDiv(s.VALUE_DIM, s.CM_N), sgRows = rt * s.CM_M;
    const uint32_t lanesPerRow = lanes >= sgRows ? lanes / sgRows : 1, rowsPerLane = ceilDiv(sgRows, lanes / lanesPerRow);
    const uint32_t chunks = ceilDiv(s.KEY_TILE * ksteps * s.CM_K / 8, s.THREADS) + ceilDiv(s.KEY_TILE * nt * s.CM_N / 8, s.THREADS);
    const uint32_t scores = st * (1 + rt + ksteps * (1 + c.loadB + rt * (1 + c.product)) + rt * (1 + c.tile));
    const uint32_t rows = rowsPerLane * 2 * (s.KEY_TILE / lanesPerRow);
    const uint32_t rescale = nt * (1 + 2 * rt * (1 + c.tile) + rowsPerLane * s.CM_N / lanesPerRow);
    const uint32_t weighted = psteps * (1 + rt * (1 + c.loadA) + nt * (1 + c.loadB + rt * (1 + c.product)));
    return 1 + 2 * chunks + scores + rows + rescale + weighted;
}

uint32_t attentionFlashCoopMatEmulatedIterationsPerDispatch(const kernel::AttentionFlashCoopMatSpec& s) {
    // Once per dispatch: the shared-memory poisoning, Q staged, Q's operands, the state in, the output out.
    const uint32_t lanes = std::max<uint32_t>(1, s.THREADS / s.SG_M), rt = std::max<uint32_t>(1, s.ROW_TILES);
    const EmulatedLoopCosts c(s.CM_M, s.CM_N, s.CM_K, lanes);
    const uint32_t tileM = s.SG_M * rt * s.CM_M, hp = ceilDiv(s.HEAD_DIM, s.CM_K) * s.CM_K, nt = ceilDiv(s.VALUE_DIM, s.CM_N);
    const uint32_t poison = ceilDiv(attentionFlashCoopMatSharedBytes(s, true) / 4, s.THREADS);
    const uint32_t perTile = 1 + rt * (1 + c.tile) + rt * s.CM_M * s.CM_N / lanes;  // state in or output out
    return poison + ceilDiv(tileM * hp / 8, s.THREADS) + rt * hp / s.CM_K * c.loadA + 2 * nt * perTile;
}

namespace {

// Loop iterations per invocation the emulated cooperative kernels may take on a CPU driver: half of
// llvmpipe's 65535 (the count is an estimate), as polysketch_plan.cpp's budget.
constexpr uint32_t kEmulatedLoopBudget = 32768;

/**
 * Tiling of attention_tiled_coopmat.comp for one M x N x K shape. Emulated (lavapipe): one row
 * group of 16 rows, the value tiles over up to 8 subgroups (the emulated product costs per element
 * and llvmpipe counts every loop iteration), keys 32 at a time. Hardware: 4 row groups (64 query
 * rows) down to 1, 64 keys per step, the value tiles over subgroups of up to 4 tiles each (an
 * initial tiling, not yet tuned on a GPU). Shrinks (value-tile subgroups, row groups, key tile,
 * width step) until the shared memory fits; false if nothing does.
 */
bool planAttentionTiledCoopMat(uint32_t m, uint32_t n, uint32_t k, uint32_t subgroupSize, uint32_t maxInvocations, bool emulated,
                               bool smallTiles, const AttentionConfig& c, uint32_t sharedBytes, kernel::AttentionTiledCoopMatSpec& spec) {
    spec.HEAD_DIM = c.headDim;
    spec.VALUE_DIM = c.valueDim;
    spec.DEGREE = c.degree;
    spec.CAUSAL = c.causal ? 1u : 0u;
    spec.CM_M = m;
    spec.CM_N = n;
    spec.CM_K = k;
    const uint32_t nt = ceilDiv(c.valueDim, n);
    const uint32_t keyStep = n % k == 0 ? n : k % n == 0 ? k : n * k;  // KEY_TILE: a multiple of CM_N and CM_K
    const uint32_t keyMax = std::max(keyStep, (smallTiles ? 32u : 64u) / keyStep * keyStep);
    const uint32_t widthMax = std::min(ceilDiv(c.headDim, k) * k, std::max(k, (smallTiles ? 64u : 128u) / k * k));
    auto shrink = [](uint32_t v, uint32_t step) { return v / 2 >= step && (v / 2) % step == 0 ? v / 2 : v - step; };
    // Subgroups along the value tiles: emulated up to 8 (one tile each), fewer when shared memory
    // is short (each subgroup has its exchange region); hardware, up to 4 tiles per subgroup.
    for (uint32_t sgN = smallTiles ? std::min<uint32_t>(nt, 8) : ceilDiv(nt, 4); sgN >= 1; sgN /= 2) {
        spec.WN = ceilDiv(nt, sgN);
        spec.SG_N = ceilDiv(nt, spec.WN);
        for (uint32_t sg = smallTiles ? 1 : 4; sg >= 1; sg /= 2) {
            spec.SG_M = sg;
            spec.THREADS = sg * spec.SG_N * subgroupSize;
            if (spec.THREADS > maxInvocations) continue;
            for (uint32_t kt = keyMax; kt >= keyStep; kt = shrink(kt, keyStep)) {
                for (uint32_t wc = widthMax; wc >= k; wc = shrink(wc, k)) {
                    spec.KEY_TILE = kt;
                    spec.WIDTH_CHUNK = wc;
                    if (attentionTiledCoopMatSharedBytes(spec, emulated) <= sharedBytes) return true;
                }
            }
        }
    }
    return false;
}

}  // namespace

namespace {

/**
 * Tiling of attention_flash_coopmat.comp: (row groups SG_M, row tiles ROW_TILES of CM_M query rows
 * per subgroup, keys per step), the first entry of its table whose shared memory fits. The GPU
 * table's first eight entries have one row tile per subgroup (the kernel as first built: indices
 * 0-7 keep their meaning in tuning tables): query tiles of 128 and 64 rows with 64 keys (K and V
 * staged once for more rows, fewer barriers per key), then shorter key tiles and fewer rows for
 * large head dims (h = 128 with 48 KiB: 64 x 32; h = 256: 32 x 16). Entries 8-13 give each subgroup
 * two row tiles (each K^T and V operand read from shared memory serves 32 rows: docs/MODEL.md, "The
 * FlashAttention-2 softmax with row tiles"); they are there for psk tune (baselines.tile) until a
 * GPU measures them, and the model's first choice stays entry 0's family.
 * The emulated backend's own table (PSK_COOPMAT_EMULATION=1) is one row group and 32 or 16 keys:
 * its products cost per element and llvmpipe counts every loop iteration. PSK_COOPMAT_EMULATION=
 * gpu-tiles runs the GPU table within lavapipe's 32 KiB (several row groups where the head dims
 * allow it, e.g. 32 x 32 at h = 64). False if nothing fits. onlyTile >= 0 tries
 * that entry of the table alone (a tuning table's baselines.tile); *chosen gets the entry's index.
 */
struct FlashTiling {
    uint32_t rowGroups, rowTiles, keyTile;
};
constexpr FlashTiling kFlashGpuTable[] = {{8, 1, 64}, {4, 1, 64}, {4, 1, 32}, {2, 1, 64}, {2, 1, 32}, {2, 1, 16}, {1, 1, 32},
                                          {1, 1, 16}, {4, 2, 64}, {2, 2, 64}, {4, 2, 32}, {2, 2, 32}, {1, 2, 32}, {1, 2, 16}};
constexpr FlashTiling kFlashEmulatedTable[] = {{1, 1, 32}, {1, 1, 16}};
// The model's choice searches the first entries only (one row tile per subgroup).
constexpr size_t kFlashModelEntries = 8;

bool planAttentionFlashCoopMat(uint32_t m, uint32_t n, uint32_t k, uint32_t subgroupSize, uint32_t maxInvocations, bool emulated,
                               bool smallTiles, const AttentionConfig& c, uint32_t sharedBytes, kernel::AttentionFlashCoopMatSpec& spec,
                               int onlyTile = -1, uint32_t* chosen = nullptr) {
    spec.HEAD_DIM = c.headDim;
    spec.VALUE_DIM = c.valueDim;
    spec.DEGREE = c.degree;
    spec.CAUSAL = c.causal ? 1u : 0u;
    spec.CM_M = m;
    spec.CM_N = n;
    spec.CM_K = k;
    const FlashTiling* table = smallTiles ? kFlashEmulatedTable : kFlashGpuTable;
    const size_t count = smallTiles ? std::size(kFlashEmulatedTable) : onlyTile >= 0 ? std::size(kFlashGpuTable) : kFlashModelEntries;
    for (size_t i = 0; i < count; ++i) {
        if (onlyTile >= 0 && i != size_t(onlyTile)) continue;
        const FlashTiling t = table[i];
        // The per-row steps split a row over subgroupSize / (ROW_TILES CM_M) lanes (their keys and
        // columns strided), or give a lane several rows.
        const uint32_t sgRows = t.rowTiles * m;
        const uint32_t lanesPerRow = subgroupSize >= sgRows ? subgroupSize / sgRows : 1;
        if (n % lanesPerRow != 0 || (subgroupSize < sgRows && sgRows % subgroupSize != 0)) continue;
        // A lane weighs runs of 8 keys of its row (one 16-byte store of P each).
        if (t.keyTile % n != 0 || t.keyTile % k != 0 || (t.keyTile / lanesPerRow) % 8 != 0) continue;
        spec.SG_M = t.rowGroups;
        spec.ROW_TILES = t.rowTiles;
        spec.KEY_TILE = t.keyTile;
        spec.THREADS = t.rowGroups * subgroupSize;
        if (spec.THREADS > maxInvocations) continue;
        if (attentionFlashCoopMatSharedBytes(spec, emulated) <= sharedBytes) {
            if (chosen) *chosen = uint32_t(i);
            return true;
        }
    }
    return false;
}

}  // namespace

/** Entries of the FlashAttention-2 kernel's tiling table (planAttentionFlashCoopMat). */
uint32_t attentionFlashCoopMatTilings(bool smallTiles) {
    return uint32_t(smallTiles ? std::size(kFlashEmulatedTable) : std::size(kFlashGpuTable));
}

namespace {

/**
 * Tilings of attention_flash_fp32.comp (rows x keys per step, invocations sharing a row group, rows
 * per invocation). The model's entries (kFlashFp32ModelEntries, in order) are taken where they fit
 * the device's shared memory and keep the register tiles within 64 accumulators each (scores,
 * output): 0 at h, dv <= 64 on 48 KiB (35 KiB; the most multiply-adds per byte through the
 * shared-memory data path), 1 where 0 does not fit (h = 64 on lavapipe's 32 KiB), 3 where the 8-row
 * tiles' output accumulators do not fit (h = 128), 6 below, 8 and 9 at h = 256 (one key per
 * invocation's scores, 16 invocations per row group so that dv = 256 stays within 64 accumulators;
 * docs/MODEL.md, "The FP32 FlashAttention-2 baseline"). The others are psk tune's to measure where
 * they fit (baselines.fp32_tile).
 */
struct Fp32FlashTiling {
    uint32_t rows, keyTile, keyGroups, rowsPerInvocation;
};
constexpr Fp32FlashTiling kFlashFp32Table[] = {
    {32, 64, 8, 8},   // 0: one warp, 8 x 8 register tiles
    {32, 32, 8, 8},   // 1: one warp, 8 x 4
    {64, 32, 8, 4},   // 2
    {32, 32, 8, 4},   // 3
    {64, 64, 16, 4},  // 4: 54 KiB at h = 64
    {32, 64, 16, 4},  // 5
    {16, 32, 8, 4},   // 6
    {64, 64, 8, 8},   // 7: two warps, 8 x 8; 53 KiB at h = 64
    {16, 16, 16, 4},  // 8: h = 256 on 48 KiB (35 KiB): 4 x 1 scores, 4 x 16 output columns
    {8, 16, 16, 4},   // 9: h = 256 on 32 KiB (26 KiB)
    {8, 32, 16, 4},   // 10: short query blocks over a KV cache (n <= 8: a speculative decoding's drafted tokens)
};
constexpr uint32_t kFlashFp32ShortBlockEntry = 10;
constexpr uint32_t kFlashFp32ModelEntries[] = {0, 1, 3, 6, 8, 9};

kernel::AttentionFlashFp32Spec flashFp32Spec(const Fp32FlashTiling& t, const AttentionConfig& c) {
    kernel::AttentionFlashFp32Spec spec;
    spec.ROWS = t.rows;
    spec.KEY_TILE = t.keyTile;
    spec.KEY_GROUPS = t.keyGroups;
    spec.ROWS_PER_INVOCATION = t.rowsPerInvocation;
    spec.THREADS = t.rows / t.rowsPerInvocation * t.keyGroups;
    spec.HEAD_DIM = c.headDim;
    spec.VALUE_DIM = c.valueDim;
    spec.DEGREE = c.degree;
    spec.CAUSAL = c.causal ? 1u : 0u;
    return spec;
}

/** Output accumulators per invocation of attention_flash_fp32.comp: its rows x its vec4 columns. */
uint32_t flashFp32Accumulators(const kernel::AttentionFlashFp32Spec& s) {
    return s.ROWS_PER_INVOCATION * 4 * ceilDiv(ceilDiv(s.VALUE_DIM, 4), s.KEY_GROUPS);
}

/** Why tiling `s` cannot run here, or "" when it can. */
std::string flashFp32Misfit(const kernel::AttentionFlashFp32Spec& s, const DeviceCaps& caps) {
    if (attentionFlashFp32SharedBytes(s) > caps.limits().maxComputeSharedMemorySize)
        return cat(attentionFlashFp32SharedBytes(s), " bytes of shared memory (the device has ", caps.limits().maxComputeSharedMemorySize, ")");
    if (s.THREADS > caps.limits().maxComputeWorkGroupInvocations) return cat(s.THREADS, " invocations");
    if (flashFp32Accumulators(s) > 64) return cat(flashFp32Accumulators(s), " output accumulators per invocation (64 at most)");
    if (s.ROWS_PER_INVOCATION * (s.KEY_TILE / s.KEY_GROUPS) > 64)
        return cat(s.ROWS_PER_INVOCATION * (s.KEY_TILE / s.KEY_GROUPS), " score accumulators per invocation (64 at most)");
    return "";
}

}  // namespace

uint32_t attentionFlashFp32SharedBytes(const kernel::AttentionFlashFp32Spec& s) {
    // Q (ROWS rows) and K or V (KEY_TILE rows), rows of vec4s, Q and K padded by one; P (a vec4 per
    // key and row group); one float per row and key group (maxima, then the denominators).
    const uint32_t h4 = ceilDiv(s.HEAD_DIM, 4), v4 = ceilDiv(s.VALUE_DIM, 4);
    const uint32_t vec4s = s.ROWS * (h4 + 1) + s.KEY_TILE * std::max(h4 + 1, v4) + s.KEY_TILE * (s.ROWS / 4);
    return 16 * vec4s + 4 * s.ROWS * s.KEY_GROUPS;
}

uint32_t attentionFlashFp32Tilings() { return uint32_t(std::size(kFlashFp32Table)); }

std::optional<kernel::AttentionFlashFp32Spec> shortBlockFlashFp32Spec(const AttentionConfig& c, const DeviceCaps& caps) {
    const kernel::AttentionFlashFp32Spec spec = flashFp32Spec(kFlashFp32Table[kFlashFp32ShortBlockEntry], c);
    if (!flashFp32Misfit(spec, caps).empty()) return std::nullopt;
    return spec;
}

std::optional<kernel::AttentionFlashFp32Spec> modelFlashFp32Spec(const AttentionConfig& c, const DeviceCaps& caps, uint32_t* entry,
                                                                  std::string* misfits) {
    for (uint32_t e : kFlashFp32ModelEntries) {
        const kernel::AttentionFlashFp32Spec spec = flashFp32Spec(kFlashFp32Table[e], c);
        const std::string why = flashFp32Misfit(spec, caps);
        if (why.empty()) {
            if (entry) *entry = e;
            return spec;
        }
        if (misfits) *misfits += cat(misfits->empty() ? "" : ", ", "tiling ", e, ": ", why);
    }
    return std::nullopt;
}

namespace {

/** The shape class a tuning table's baselines entries are keyed by (softmax: degree 0). */
TuningShape baselineTuningShape(const AttentionConfig& c) {
    TuningShape shape;
    shape.headDim = c.headDim;
    shape.valueDim = c.valueDim;
    shape.degree = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0 : c.degree;
    shape.type = c.dataType;
    shape.causal = c.causal;
    return shape;
}

/**
 * Which cooperative baseline kernel 16-bit storage takes: PSK_COOPMAT_BASELINE=flash (default,
 * attention_flash_coopmat where the operand type is the storage type) or tiled
 * (attention_tiled_coopmat always: the kernel before the FlashAttention-2 one, kept for comparison
 * and for bfloat16 storage on float16-only backends). Throws on any other value.
 */
bool flashBaselineRequested() {
    const char* v = std::getenv("PSK_COOPMAT_BASELINE");
    if (v == nullptr || *v == '\0' || std::string_view(v) == "flash") return true;
    if (std::string_view(v) == "tiled") return false;
    fail(PSK_ERROR_INVALID_ARGUMENT, "PSK_COOPMAT_BASELINE='", v, "': use flash or tiled");
}

}  // namespace

std::optional<kernel::AttentionFlashFp32Spec> tunedFlashFp32Spec(const AttentionConfig& c, const DeviceCaps& caps, const TuningTable* tuning,
                                                                  uint32_t* entry, std::string* note) {
    const TuningEntry* e = tuning ? tuning->find(TuningParameter::BaselinesFp32Tile, baselineTuningShape(c)) : nullptr;
    if (!e) return std::nullopt;
    const std::string name = cat("tuning table ", tuning->source, " line ", e->line, " (baselines.fp32_tile ", e->value, ")");
    std::string why;
    if (e->value >= attentionFlashFp32Tilings()) {
        why = cat("the tiling table has ", attentionFlashFp32Tilings(), " entries");
    } else if (const std::string misfit = flashFp32Misfit(flashFp32Spec(kFlashFp32Table[e->value], c), caps); !misfit.empty()) {
        why = cat("tiling ", e->value, " needs ", misfit);
    }
    if (!why.empty()) {
        if (note) *note = cat("; ", name, " ignored: ", why);
        return std::nullopt;
    }
    if (entry) *entry = e->value;
    if (note) *note = cat("; baselines.fp32_tile=", e->value, " from ", name);
    return flashFp32Spec(kFlashFp32Table[e->value], c);
}

bool flashFp32Requested() {
    const char* v = std::getenv("PSK_FP32_BASELINE");
    if (v == nullptr || *v == '\0' || std::string_view(v) == "flash") return true;
    if (std::string_view(v) == "rows") return false;
    fail(PSK_ERROR_INVALID_ARGUMENT, "PSK_FP32_BASELINE='", v, "': use flash or rows");
}

TiledAttentionPlan planTiledAttention(const AttentionConfig& c, const DeviceCaps& caps, const TuningTable* tuning) {
    TiledAttentionPlan plan;
    const bool softmax = c.kind == PSK_ATTENTION_KIND_SOFTMAX;
    const char* kind = softmax ? "softmax" : "polynomial";
    plan.maxGroupsX = caps.limits().maxComputeWorkGroupCount[0];

    // Cooperative matrices under the polysketch stages' rules (polysketch_plan.cpp): 16-bit storage
    // only (float32 storage promises float32 operands and keeps the FP32 kernel), emulated when
    // PSK_COOPMAT_EMULATION asks for it, else the device's KHR or NV path where
    // selectCoopMatForDevice finds a usable shape (the switches of forward/coopmat_switches.hpp
    // choose or turn off the backend and stage).
    const PskDataType type = c.dataType;
    const CoopMatEmulation emulation = coopMatEmulationMode();
    const bool emulate = emulation != CoopMatEmulation::Off;
    std::string whyNotCoop;
    const CoopMatSwitches switches = coopMatSwitches();
    if (type != PSK_DATA_TYPE_FLOAT32 && !(switches.stages & c.coopStages & kCoopBaselines)) {
        whyNotCoop = cat("; not the cooperative kernel: ", stageOffReason(switches, c, kCoopBaselines));
    } else if (type != PSK_DATA_TYPE_FLOAT32) {
        const CoopMatChoice coop = selectCoopMatWithSwitches(caps, switches).forDataType(type);
        std::optional<CoopVariant> variant = coopVariantFor(coop, emulate, type, caps);
        if (!emulate && coop.path == CoopMatPath::Scalar)
            whyNotCoop = cat("; not the cooperative kernel: ", coop.reason);
        else if (!variant)
            whyNotCoop = "; not the emulated cooperative kernel: it needs a fixed subgroup size of 4 or more";
        const CoopMatShapeChoice shape = emulate ? coopMatEmulationShape() : coop.shape;
        const uint32_t m = shape.m, n = shape.n, k = shape.k;
        // The FlashAttention-2 kernel (attention_flash_coopmat.comp) takes q, k and v as operands
        // exactly as stored, so it needs the operand type to be the storage type: float16 data, or
        // bfloat16 data where the backend has bfloat16 operands (KHR with GL_EXT_bfloat16, the
        // emulation). bfloat16 data on a float16-only backend (NV, KHR without bfloat16) needs the
        // range scaling of attention_tiled_coopmat.comp.
        std::string whyNotFlash;
        const bool operandIsStorage =
            variant && (variant->operand == CoopOperand::F16 ? type == PSK_DATA_TYPE_FLOAT16 : type == PSK_DATA_TYPE_BFLOAT16);
        if (variant && operandIsStorage && flashBaselineRequested()) {
            kernel::AttentionFlashCoopMatSpec spec;
            // Hardware: the device's shared memory (48 KiB on NVIDIA's Vulkan driver); emulated, 32 KiB.
            const uint32_t shared = std::min<uint32_t>(caps.limits().maxComputeSharedMemorySize, emulate ? 32768 : UINT32_MAX);
            const bool smallTiles = emulation == CoopMatEmulation::SmallTiles;
            // The first entry of the tiling table that fits (onlyTile < 0), or entry onlyTile alone.
            auto planFlash = [&](kernel::AttentionFlashCoopMatSpec& s, int onlyTile, uint32_t* chosen) {
                return planAttentionFlashCoopMat(m, n, k, caps.subgroupSize, caps.limits().maxComputeWorkGroupInvocations, emulate,
                                                 smallTiles, c, shared, s, onlyTile, chosen);
            };
            if (findCoopVariant(KernelId::AttentionFlashCoopMat, *variant, kind, type) == nullptr) {
                whyNotFlash = cat("; not the FlashAttention-2 kernel: this build has no ",
                                  coopVariantName(KernelId::AttentionFlashCoopMat, *variant, kind, type));
            } else if (uint32_t tile = 0; !planFlash(spec, -1, &tile)) {
                whyNotFlash = "; not the FlashAttention-2 kernel: no tiling fits this device's shared memory";
            } else {
                // A measured tiling instead of the table's first that fits (psk tune, baselines.tile).
                std::string tuned;
                if (const TuningEntry* e = tuning ? tuning->find(TuningParameter::BaselinesTile, baselineTuningShape(c)) : nullptr) {
                    const std::string entry = cat("tuning table ", tuning->source, " line ", e->line, " (baselines.tile ", e->value, ")");
                    kernel::AttentionFlashCoopMatSpec candidate = spec;
                    if (e->value >= attentionFlashCoopMatTilings(smallTiles)) {
                        tuned = cat("; ", entry, " ignored: the tiling table has ", attentionFlashCoopMatTilings(smallTiles), " entries");
                    } else if (!planFlash(candidate, int(e->value), nullptr)) {
                        tuned = cat("; ", entry, " ignored: tiling ", e->value, " does not fit this device's shared memory or invocations, or its shape");
                    } else {
                        spec = candidate;
                        tile = e->value;
                        tuned = cat("; baselines.tile=", e->value, " from ", entry);
                    }
                }
                std::string detail;
                if (emulate && caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
                    // llvmpipe ends every loop of an invocation after 65535 iterations in all: the
                    // key chunks (one dispatch each, the state carried between them) bound the key tiles.
                    const uint32_t perTile = attentionFlashCoopMatEmulatedIterationsPerKeyTile(spec);
                    const uint32_t fixed = attentionFlashCoopMatEmulatedIterationsPerDispatch(spec);
                    const uint32_t tiles = std::max<uint32_t>(1, (kEmulatedLoopBudget - std::min(fixed, kEmulatedLoopBudget / 2)) / perTile);
                    plan.keysPerDispatch = std::min<uint32_t>(plan.keysPerDispatch, tiles * spec.KEY_TILE);
                    detail = cat("; about ", perTile, " loop iterations per invocation and key tile: ", plan.keysPerDispatch,
                                 " keys per dispatch");
                }
                plan.rows = spec.SG_M * spec.ROW_TILES * spec.CM_M;
                plan.kernel = coopKernelChoice<KernelId::AttentionFlashCoopMat>(
                    *variant, kind, type, spec,
                    cat(emulate ? coopMatEmulationLabel() : cat("cooperative kernel: ", coop.reason),
                        "; FlashAttention-2 style: operands as stored, float32 scores and sums", detail, tuned, "; tunable: baselines.tile=", tile));
                plan.kernel.requiredSubgroupSize = caps.minSubgroupSize != caps.maxSubgroupSize ? caps.subgroupSize : 0;
                plan.faultInjected = (switches.faultStages & kCoopBaselines) != 0;
                return plan;
            }
        } else if (variant && !operandIsStorage) {
            whyNotFlash = "; not the FlashAttention-2 kernel: bfloat16 data on float16 operands";
        } else if (variant) {
            whyNotFlash = "; PSK_COOPMAT_BASELINE=tiled";
        }
        if (variant && findCoopVariant(KernelId::AttentionTiledCoopMat, *variant, kind, type) == nullptr) {
            whyNotCoop = cat("; not the cooperative kernel: this build has no ", coopVariantName(KernelId::AttentionTiledCoopMat, *variant, kind, type));
            variant.reset();
        }
        kernel::AttentionTiledCoopMatSpec spec;
        // Hardware: the device's shared memory up to 48 KiB (the usual compute limit); emulated, 32 KiB
        // as the polysketch stages.
        const uint32_t shared = std::min<uint32_t>(caps.limits().maxComputeSharedMemorySize, emulate ? 32768 : 49152);
        if (variant && !planAttentionTiledCoopMat(m, n, k, caps.subgroupSize, caps.limits().maxComputeWorkGroupInvocations, emulate,
                                                  emulation == CoopMatEmulation::SmallTiles, c,
                                                  shared, spec)) {
            variant.reset();
            whyNotCoop = "; not the cooperative kernel: no tiling fits this device's shared memory";
        }
        if (variant) {
            std::string detail;
            if (emulate && caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
                // llvmpipe ends every loop of an invocation after 65535 iterations in all: the key
                // chunks (one dispatch each, the state carried between them) bound the key tiles.
                const uint32_t perTile = attentionTiledCoopMatEmulatedIterationsPerKeyTile(spec, caps.subgroupSize);
                const uint32_t fixed = attentionTiledCoopMatEmulatedIterationsPerDispatch(spec, caps.subgroupSize);
                const uint32_t tiles = std::max<uint32_t>(1, (kEmulatedLoopBudget - std::min(fixed, kEmulatedLoopBudget / 2)) / perTile);
                plan.keysPerDispatch = std::min<uint32_t>(plan.keysPerDispatch, tiles * spec.KEY_TILE);
                detail = cat("; about ", perTile, " loop iterations per invocation and key tile: ", plan.keysPerDispatch,
                             " keys per dispatch");
            }
            plan.rows = spec.SG_M * spec.CM_M;
            plan.kernel = coopKernelChoice<KernelId::AttentionTiledCoopMat>(
                *variant, kind, type, spec,
                emulate ? cat(coopMatEmulationLabel(), ": float16/bfloat16 operands, float32 sums", whyNotFlash, detail)
                        : cat("cooperative kernel: ", coop.reason, whyNotFlash));
            plan.kernel.requiredSubgroupSize = caps.minSubgroupSize != caps.maxSubgroupSize ? caps.subgroupSize : 0;
            plan.faultInjected = (switches.faultStages & kCoopBaselines) != 0;
            return plan;
        }
    }

    // The register-tiled FlashAttention-2 kernel on the FP32 units (attention_flash_fp32.comp)
    // where a tiling fits (GPUs and CPU drivers alike: on lavapipe it ran 1.9-2.7x faster than the
    // one-row kernel, docs/PERFORMANCE.md); else the one-row kernel below.
    // A device's table may keep the one-row kernel (baselines.fp32_rows 1: on the H200 the
    // FlashAttention-2 FP32 kernel's 8 x 8 tiles took 255 registers and ran 4.7x slower than it).
    std::string whyNotFlashFp32;
    const TuningEntry* rowsEntry = tuning ? tuning->find(TuningParameter::BaselinesFp32Rows, baselineTuningShape(c)) : nullptr;
    if (!flashFp32Requested()) {
        whyNotFlashFp32 = "; the one-row kernel: PSK_FP32_BASELINE=rows";
    } else if (rowsEntry && rowsEntry->value == 1) {
        whyNotFlashFp32 = cat("; baselines.fp32_rows=1 from tuning table ", tuning->source, " line ", rowsEntry->line,
                              " (baselines.fp32_rows 1): the one-row kernel; tunable: baselines.fp32_rows=1");
    } else {
        std::string misfits;
        uint32_t modelEntry = 0;
        std::optional<uint32_t> chosen;
        if (modelFlashFp32Spec(c, caps, &modelEntry, &misfits)) chosen = modelEntry;
        std::string tuned;
        if (uint32_t entry = 0; tunedFlashFp32Spec(c, caps, tuning, &entry, &tuned)) chosen = entry;
        if (chosen) {
            const kernel::AttentionFlashFp32Spec spec = flashFp32Spec(kFlashFp32Table[*chosen], c);
            plan.rows = spec.ROWS;
            plan.kernel = KernelChoice::make<KernelId::AttentionFlashFp32>(
                kind, type, spec,
                cat("FlashAttention-2 style on the FP32 units: per invocation ", spec.ROWS_PER_INVOCATION, " rows x ",
                    spec.KEY_TILE / spec.KEY_GROUPS, " keys of scores and ", spec.ROWS_PER_INVOCATION, " rows x ",
                    flashFp32Accumulators(spec) / spec.ROWS_PER_INVOCATION, " value columns of output in registers",
                    type == PSK_DATA_TYPE_FLOAT32 ? " (float32 storage keeps float32 operands)" : "", whyNotCoop, tuned,
                    "; tunable: baselines.fp32_tile=", *chosen, " baselines.fp32_rows=0"));
            return plan;
        }
        whyNotFlashFp32 = cat("; the one-row kernel: no FlashAttention-2 FP32 tiling fits (", misfits, ")");
    }

    plan.rows = std::min<uint32_t>(64, caps.limits().maxComputeWorkGroupInvocations);
    // Stage as many keys as fit in 32 KiB (or the device's shared memory, if less), up to 64.
    const uint32_t budget = std::min<uint32_t>(caps.limits().maxComputeSharedMemorySize, 32768);
    const uint32_t bytesPerKey = (c.headDim + c.valueDim) * 4;
    if (bytesPerKey > budget) fail(PSK_ERROR_UNSUPPORTED, "head dims too large for this device's shared memory");
    kernel::AttentionTiledSpec spec;
    spec.ROWS = plan.rows;
    spec.HEAD_DIM = c.headDim;
    spec.VALUE_DIM = c.valueDim;
    spec.KEY_TILE = std::min<uint32_t>(64, floorPow2(budget / bytesPerKey));
    spec.DEGREE = c.degree;
    spec.CAUSAL = c.causal ? 1u : 0u;
    plan.kernel = KernelChoice::make<KernelId::AttentionTiled>(
        kind, type, spec,
        cat("the FP32 kernel of ", softmax ? "softmax" : "exact polynomial", " attention",
            type == PSK_DATA_TYPE_FLOAT32 ? " (float32 storage keeps float32 operands)" : "", whyNotCoop, whyNotFlashFp32,
            "; key tile = keys of h + dv floats that fit min(shared memory, 32 KiB), <= 64"));
    return plan;
}

uint32_t tiledKeyChunks(const TiledAttentionPlan& plan, uint32_t tokens) {
    return (tokens + plan.keysPerDispatch - 1) / plan.keysPerDispatch;
}

WorkspaceLayout tiledWorkspaceLayout(const TiledAttentionPlan& plan, const AttentionConfig& c, const DeviceCaps& caps,
                                     const ForwardGeometry& g) {
    // One region at offset 0; no end padding, so its bytes are the state's (pskGetWorkspaceSize).
    WorkspaceLayout L;
    L.alignment = std::max<VkDeviceSize>(4, caps.limits().minStorageBufferOffsetAlignment);
    L.padEnd = false;
    if (tiledKeyChunks(plan, g.tokens) <= 1) return L;
    const uint64_t floats = uint64_t(g.batch) * c.numQueryHeads * g.tokens * (c.valueDim + 2);
    if (floats >= (uint64_t(1) << 32) || floats * 4 > caps.limits().maxStorageBufferRange)
        fail(PSK_ERROR_TOO_LARGE, "the ", floats * 4, "-byte key-chunk state exceeds maxStorageBufferRange (",
             caps.limits().maxStorageBufferRange, "); use a smaller batch per call");
    L.regions.push_back({"key-chunk state", floats * 4});
    return L;
}

void recordTiledAttention(Recorder& recorder, const KernelPipeline& pipeline, const TiledAttentionPlan& plan,
                          const AttentionConfig& c, const BoundTensors& t) {
    kernel::AttentionTiledPush push{};
    push.n = t.geometry.tokens;
    push.head_ratio = c.numQueryHeads / c.numKeyValueHeads;
    push.scale = c.scale;
    push.num_q_heads = c.numQueryHeads;
    push.q_strides = kernel::pushStrides(t.geometry.q.strides);
    push.k_strides = kernel::pushStrides(t.geometry.k.strides);
    push.v_strides = kernel::pushStrides(t.geometry.v.strides);
    push.o_strides = kernel::pushStrides(t.geometry.out.strides);
    const uint32_t groupsX = (t.geometry.tokens + plan.rows - 1) / plan.rows;
    if (groupsX > plan.maxGroupsX)
        fail(PSK_ERROR_TOO_LARGE, "seqLen ", t.geometry.tokens, " needs ", groupsX, " workgroups; the device allows ", plan.maxGroupsX);
    // The FlashAttention-2 kernel reads rows 16 bytes at a time where every row starts on a 16-byte
    // boundary: h and dv multiples of 8 elements, every stride too, the bindings 16-byte aligned.
    uint32_t rowFlags = 0;
    if (plan.kernel.kernel == KernelId::AttentionFlashCoopMat && c.headDim % 8 == 0 && c.valueDim % 8 == 0) {
        bool aligned = true;
        for (const TensorGeometry* g : {&t.geometry.q, &t.geometry.k, &t.geometry.v})
            aligned = aligned && g->strides.batch % 8 == 0 && g->strides.head % 8 == 0 && g->strides.token % 8 == 0;
        for (const BufferRange* r : {&t.q, &t.k, &t.v}) aligned = aligned && r->offset % 16 == 0;
        if (aligned) rowFlags = kernel::FLAG_ALIGNED_ROWS;
    }
    const uint32_t chunks = tiledKeyChunks(plan, t.geometry.tokens);
    // The key-chunk state as a GPU may hand it over: each chunk must write what the next one reads.
    if (plan.poisonWorkspace && chunks > 1) recorder.fill(t.workspace[0], fillableBytes(t.workspace[0]), kWorkspacePoisonBits);
    for (uint32_t chunk = 0; chunk < chunks; ++chunk) {
        const bool last = chunk + 1 == chunks;
        push.key_begin = chunk * plan.keysPerDispatch;
        push.key_limit = last ? t.geometry.tokens : push.key_begin + plan.keysPerDispatch;
        push.flags = (chunk > 0 ? kernel::FLAG_LOAD_STATE : 0) | (last ? 0 : kernel::FLAG_STORE_STATE) | rowFlags;
        kernel::AttentionTiledBindings b;
        b.Q = t.q;
        b.K = t.k;
        b.V = t.v;
        b.OUT = last ? kernel::Bound(t.out) : kernel::unwritten(t.out);
        // Without chunks the state binding is never touched; the output stands in for it.
        b.STATE = chunks > 1 ? kernel::Bound(t.workspace[0]) : kernel::unwritten(t.out);
        recordKernel(recorder, pipeline, b, push, groupsX, c.numQueryHeads, t.geometry.batch);
    }
    if (plan.faultInjected) recorder.fill(t.out, fillableBytes(t.out), 0x7F800000u);  // tests of the self-test
}

TiledForward::TiledForward(PskContext_T* context, const AttentionConfig& config, const TuningTable* tuning)
    : context_(context), config_(config), plan_(planTiledAttention(config, context->caps(), tuning)) {
    plan_.poisonWorkspace = poisonWorkspaceFromEnvironment();
    pipeline_ = kernelPipeline(context->pipelines(), plan_.kernel);
}

WorkspaceLayout TiledForward::workspaceLayout(const ForwardGeometry& geometry) const {
    return tiledWorkspaceLayout(plan_, config_, context_->caps(), geometry);
}

void TiledForward::record(Recorder& recorder, const BoundTensors& tensors) const {
    recorder.beginStage(PSK_FORWARD_STAGE_OUTPUT);  // one stage: the whole attention
    recordTiledAttention(recorder, pipeline_, plan_, config_, tensors);
}

}  // namespace psk
