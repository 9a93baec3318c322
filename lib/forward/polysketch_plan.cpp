#include "forward/polysketch_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "forward/coopmat_switches.hpp"
#include "forward/workspace.hpp"
#include "kernels/coop_variants.hpp"
#include "kernels/team_kernels.hpp"
#include "forward/coopmat_selection.hpp"
#include "util/error.hpp"
#include "util/sizes.hpp"

namespace psk {

CoopMatEmulation coopMatEmulationMode() {
    if (coopMatSwitches().backend != CoopBackendRequest::Emulated) return CoopMatEmulation::Off;
    const char* env = std::getenv("PSK_COOPMAT_EMULATION");
    return env && std::strcmp(env, "gpu-tiles") == 0 ? CoopMatEmulation::GpuTiles : CoopMatEmulation::SmallTiles;
}

bool coopMatEmulationRequested() { return coopMatEmulationMode() != CoopMatEmulation::Off; }

CoopMatShapeChoice coopMatEmulationShape() {
    const char* env = std::getenv("PSK_COOPMAT_EMULATION_SHAPE");
    if (!env || !*env) return {16, 16, 16};
    unsigned m = 0, n = 0, k = 0;
    char tail = 0;
    auto usable = [](unsigned d) { return d >= 8 && d <= 64 && d % 8 == 0; };
    if (std::sscanf(env, "%ux%ux%u%c", &m, &n, &k, &tail) != 3 || !usable(m) || !usable(n) || !usable(k) || m * n > 256 ||
        m * k > 256 || k * n > 256)
        fail(PSK_ERROR_INVALID_ARGUMENT, "PSK_COOPMAT_EMULATION_SHAPE=", env,
             ": want MxNxK, each a multiple of 8 from 8 to 64, with M N, M K and K N at most 256 (e.g. 8x16x16)");
    return {m, n, k};
}

const char* coopMatEmulationLabel() {
    return coopMatEmulationMode() == CoopMatEmulation::GpuTiles ? "cooperative kernel, emulated with the GPU's tiling (PSK_COOPMAT_EMULATION=gpu-tiles)"
                                                                : "cooperative kernel, emulated (PSK_COOPMAT_EMULATION is set)";
}

namespace {

// Loop iterations per invocation the emulated cooperative kernels may take on a CPU driver: half
// of llvmpipe's 65535 (their counts are estimates, e.g. sketchFeaturesCoopMatEmulatedLoopIterations).
constexpr uint32_t kEmulatedLoopBudget = 32768;
// The emulated cooperative output's own budget, 5/8 of llvmpipe's 65535: its count walks every loop
// of the kernel (polysketchOutputCoopMatEmulatedLoopIterations), and since phi(q) is two operands
// (three products per step) the GPU tilings of the test shapes with r = 32 count ~33500 (a loop
// llvmpipe cut short would show as a conformance failure, not pass unnoticed).
constexpr uint32_t kEmulatedOutputLoopBudget = 40960;
// Loop iterations one invocation of the emulated walking block states runs per key tile, counted
// from shaders/coopmat.glsl at 8 lanes (llvmpipe): per 16 keys a B load (32), and for A's high and
// low parts an A load (32) and a product (3 x 32), 576 for a 32-key tile, plus the normalizer's
// loop over the keys (32).
constexpr uint32_t kEmulatedWalkIterationsPerTile = 640;

/**
 * The cooperative-matrix block-state kernel on a device that has no cooperative matrices
 * (COOPMAT_EMULATED in shaders/coopmat.glsl): m x n x k products (coopMatEmulationShape: 16 x 16 x
 * 16 unless asked otherwise), 1 x 4 subgroups of one matrix each (an m x 4n tile: the emulated
 * product costs per element, so one matrix per subgroup keeps the per-invocation work, and
 * llvmpipe's loop budget, small), keys 32 at a time or fewer when shared memory is short. Operands
 * stay float in shared memory (4 bytes). One subgroup along the features makes the workgroup (4 x
 * 8 lanes) wider than its m features (16, or 8), so two (four) invocations share each feature's
 * normalizer sum, as on a GPU (128 invocations, 64 features); the GPU's tiling under the emulation
 * has the other case (32 invocations, 64 features).
 */
kernel::BlockStatesCoopMatSpec planEmulatedBlockStates(uint32_t m, uint32_t n, uint32_t k, uint32_t subgroupSize, uint32_t R, uint32_t dv,
                                                       uint32_t zStride, uint32_t sharedBytes, bool splitV) {
    kernel::BlockStatesCoopMatSpec spec;
    spec.CM_M = m;
    spec.CM_N = n;
    spec.CM_K = k;
    spec.SG_M = 1;
    spec.SG_N = 4;
    spec.WM = spec.WN = 1;
    spec.THREADS = spec.SG_M * spec.SG_N * subgroupSize;
    spec.SKETCH = R;
    spec.VALUE_DIM = dv;
    spec.Z_STRIDE = zStride;
    spec.SPLIT_V = splitV ? 1 : 0;
    const uint32_t tileM = m, tileN = 4 * n, subgroups = 4;
    auto bytes = [&](uint32_t keyTile) {
        return 4 * keyTile * R + 2 * 4 * keyTile * (tileM + 8) + (1 + spec.SPLIT_V) * 4 * keyTile * (tileN + 8) +
               4 * subgroups * m * n + 4 * subgroups * (m * k + k * n) +
               8 * spec.THREADS;  // sketch rows, A (hi + lo), B (hi, and lo when split), C scratch,
                                  // product scratch, range maxima and normalizer partials
    };
    // Key tiles are whole steps of k keys.
    spec.KEY_TILE = std::max(k, 32 / k * k);
    if (bytes(spec.KEY_TILE) > sharedBytes) spec.KEY_TILE = k;
    if (bytes(spec.KEY_TILE) > sharedBytes) fail(PSK_ERROR_UNSUPPORTED, "sketch too long for this device's shared memory");
    return spec;
}

}  // namespace

std::string stageOffReason(const CoopMatSwitches& switches, const AttentionConfig& c, uint32_t stage) {
    if (!(switches.stages & stage)) return cat("PSK_COOPMAT_STAGES leaves out ", coopStageName(stage));
    if (!(c.coopStages & stage)) return "the cooperative kernel failed its self-test on this device (forward/coopmat_self_test.hpp)";
    return "allowed";
}

uint32_t polysketchOutputCoopMatSharedBytes(const kernel::PolysketchOutputCoopMatSpec& s, bool emulated) {
    // Mirrors the shader's pools: operand rows padded by 8 elements, 4-byte operands when emulated.
    const uint32_t tileM = s.SG_M * s.CM_M, nc = (s.VALUE_DIM + s.CM_N) / s.CM_N * s.CM_N, pad = 8;
    const uint32_t subgroups = s.SG_M * s.SG_N;
    // A hi, A lo, B hi, B lo (Z_PACKED: B is loaded from z_operands.comp's records, not staged).
    const uint32_t opInter = 2 * tileM * (s.FEAT_CHUNK + pad) + (s.Z_PACKED ? 0 : 2 * s.FEAT_CHUNK * (nc + pad));
    // Q, K, W, V; each with its low parts too when SPLIT_LOCAL.
    const uint32_t opLocal = s.CAUSAL ? (1 + s.SPLIT_LOCAL) * (tileM * (s.WIDTH_CHUNK + pad) + s.KEY_TILE * (s.WIDTH_CHUNK + pad) +
                                                               tileM * (s.KEY_TILE + pad) + s.KEY_TILE * (nc + pad))
                                      : 0;
    const uint32_t operandBytes = emulated ? 4 : 2;
    // FUSED_QUERY: x = s q after the S(q) rows in step 1 (degree 4), the scores after the S(q)
    // rows in step 3 (a sketched local part reads them there).
    const uint32_t sq = tileM * s.SKETCH, x = s.FUSED_QUERY == 2 ? tileM * s.HEAD_DIM : 0;
    const uint32_t scoresAt = s.FUSED_QUERY != 0 && !s.LOCAL_EXACT ? sq : 0;
    const uint32_t fPool = std::max({sq + x, scoresAt + tileM * s.KEY_TILE, subgroups * s.CM_M * s.CM_N});
    const uint32_t exchange = emulated ? subgroups * (s.CM_M * s.CM_K + s.CM_K * s.CM_N) : 0;  // coopmat.glsl's cm_scratch
    const uint32_t lnRows = s.FUSED_QUERY != 0 ? 2 * tileM : 0;  // ln_row: a row's LayerNorm mean and inverse deviation
    // range_bits: RANGE_SLOTS = 7 words, declared as 8 (CM_SHARED_COUNT: whole 16 bytes).
    return operandBytes * std::max(opInter, opLocal) + 4 * (fPool + tileM + 8 + exchange + lnRows);
}

uint32_t polysketchOutputCoopMatEmulatedLoopIterations(const kernel::PolysketchOutputCoopMatSpec& s, uint32_t subgroupSize,
                                                       uint32_t features, uint32_t blockSize) {
    // The emulated backend walks matrix elements in per-lane loops: a load of an r x c matrix
    // costs r c / lanes iterations, a product (M K + K N + M N) / lanes. Counted per invocation,
    // with every loop of the kernel that is not unrolled.
    const uint32_t lanes = std::max<uint32_t>(1, subgroupSize), m = s.CM_M, n = s.CM_N, k = s.CM_K;
    const uint32_t loadA = ceilDiv(m * k, lanes), loadB = ceilDiv(k * n, lanes);
    const uint32_t product = ceilDiv(m * k + k * n + m * n, lanes), tile = ceilDiv(m * n, lanes);
    const uint32_t nt = (s.VALUE_DIM + n) / n, wn = std::min(s.WN, nt), su = ceilDiv(s.KEY_TILE / n, s.SG_N);
    const uint32_t keyWidth = s.LOCAL_EXACT ? s.HEAD_DIM : s.SKETCH;
    const uint32_t threads = s.SG_M * s.SG_N * lanes;
    // phi(q)^T Z: A (phi(q)) and B (the Z chunk) as hi + lo, two A loads, two B loads and three
    // products per column tile.
    uint64_t total = uint64_t(ceilDiv(features, s.FEAT_CHUNK)) + uint64_t(ceilDiv(features, k)) * (2 * loadA + wn * (2 * loadB + 3 * product));
    if (s.CAUSAL) {
        const uint64_t keyTiles = ceilDiv(blockSize, s.KEY_TILE), widthSteps = ceilDiv(keyWidth, s.WIDTH_CHUNK);
        // SPLIT_LOCAL: three score passes (lo x hi, hi x lo, hi x hi) and three weighted products.
        const uint64_t parts = s.SPLIT_LOCAL ? 3 : 1;
        const uint64_t scores = parts * ceilDiv(keyWidth, k) * (loadA + su * (loadB + product)) + su * tile;
        const uint64_t weighted = uint64_t(s.KEY_TILE / k) * (parts == 3 ? 2 * loadA : loadA) + uint64_t(s.KEY_TILE / k) * wn * parts * (loadB + product);
        total += keyTiles * (1 + widthSteps + scores + weighted);
        total += ceilDiv(blockSize * (keyWidth + s.VALUE_DIM) + s.SG_M * s.CM_M * s.HEAD_DIM, threads);  // maxima passes
    }
    total += (wn + 1) * (2 * tile + ceilDiv(m, lanes));  // output
    if (s.FUSED_QUERY == 2) total += ceilDiv(s.SG_M * s.CM_M / 4 * s.SKETCH, threads);  // S(q) from q, 4 rows per step (its inner loops unrolled)
    return uint32_t(std::min<uint64_t>(total, UINT32_MAX));
}

namespace {

/** The constants every output variant shares: the shapes, the degree, causal / local exact, the state rows' stride. */
template <typename OutputSpec>
void setOutputShape(OutputSpec& spec, const AttentionConfig& c, uint32_t R, uint32_t stateStride) {
    spec.SKETCH = R;
    spec.HEAD_DIM = c.headDim;
    spec.VALUE_DIM = c.valueDim;
    spec.DEGREE = c.degree;
    spec.CAUSAL = c.causal ? 1u : 0u;
    spec.LOCAL_EXACT = c.localExact ? 1u : 0u;
    spec.Z_STRIDE = stateStride;
}

}  // namespace

bool planPolysketchOutputCoopMat(uint32_t m, uint32_t n, uint32_t k, uint32_t subgroupSize, bool emulated, bool smallTiles,
                                 const AttentionConfig& c,
                                 uint32_t R, uint32_t stateStride, uint32_t sharedBytes, kernel::PolysketchOutputCoopMatSpec& spec,
                                 uint32_t sgM) {
    setOutputShape(spec, c, R, stateStride);
    spec.SPLIT_LOCAL = c.dataType == PSK_DATA_TYPE_FLOAT32 ? 1 : 0;  // float32 storage: hi + lo local operands
    spec.CM_M = m;
    spec.CM_N = n;
    spec.CM_K = k;
    // Column tiles over SG_N subgroups, WN each. Emulated (lavapipe): one row group of 16 rows and
    // one column tile per subgroup (up to 8 subgroups, then WN grows), so that an invocation walks
    // few matrix elements (the emulated product costs per element and llvmpipe counts every loop
    // iteration); 32 features and 32 keys per step. Hardware: 2 row groups x up to 2 column
    // groups, 64 features and 64 keys per step (an initial tiling, not yet tuned on a GPU).
    const uint32_t nt = (c.valueDim + n) / n;
    const uint32_t keyWidth = c.localExact ? c.headDim : R;
    const uint32_t keyStep = n % k == 0 ? n : k % n == 0 ? k : n * k;  // KEY_TILE: a multiple of CM_N and CM_K
    const uint32_t sgMax = smallTiles ? 1 : 2, sgNMax = smallTiles ? 8 : 2;
    const uint32_t featMax = std::max(k, (smallTiles ? 32u : 64u) / k * k);
    const uint32_t keyMax = std::max(keyStep, (smallTiles ? 32u : 64u) / keyStep * keyStep);
    const uint32_t widthMax = std::min(ceilDiv(keyWidth, k) * k, std::max(k, (smallTiles ? 64u : 128u) / k * k));
    auto shrink = [](uint32_t v, uint32_t step) { return v / 2 >= step && (v / 2) % step == 0 ? v / 2 : v - step; };
    for (uint32_t wn = ceilDiv(nt, sgNMax); wn <= nt; ++wn) {
        spec.WN = wn;
        spec.SG_N = ceilDiv(nt, wn);
        for (uint32_t sg = sgM ? sgM : sgMax; sg >= 1 && (!sgM || sg == sgM); sg /= 2) {
            for (uint32_t fk = featMax; fk >= k; fk = shrink(fk, k)) {
                for (uint32_t kt = keyMax; kt >= keyStep; kt = shrink(kt, keyStep)) {
                    for (uint32_t wc = widthMax; wc >= k; wc = shrink(wc, k)) {
                        spec.SG_M = sg;
                        spec.THREADS = sg * spec.SG_N * subgroupSize;
                        spec.FEAT_CHUNK = fk;
                        spec.KEY_TILE = kt;
                        spec.WIDTH_CHUNK = wc;
                        if (polysketchOutputCoopMatSharedBytes(spec, emulated) <= sharedBytes) return true;
                    }
                }
            }
        }
    }
    return false;
}

uint32_t sketchFeaturesCoopMatSharedBytes(const kernel::SketchFeaturesCoopMatSpec& s, bool learned, bool emulated) {
    // Mirrors the shader's pools: operand rows padded by 8 elements, 4-byte operands when emulated.
    const uint32_t tileM = s.SG_M * s.CM_M, pad = 8;
    const uint32_t ka = ceilDiv(learned ? std::max(s.HEAD_DIM, s.SKETCH) : s.HEAD_DIM, s.CM_K) * s.CM_K;
    const uint32_t ldr = ceilDiv(s.SKETCH, s.N_CHUNK) * s.N_CHUNK;
    // Every operand twice: its high and its low part.
    const uint32_t ops = 2 * (tileM * (ka + pad) + (learned ? tileM * (s.N_CHUNK + pad) : 0) + s.K_CHUNK * (s.N_CHUNK + pad));
    const uint32_t floats = tileM * s.HEAD_DIM + (learned ? tileM * s.N_CHUNK + 2 * tileM * ldr : 2 * tileM * s.N_CHUNK);
    const uint32_t exchange = emulated ? s.SG_M * s.SG_N * (s.CM_M * s.CM_K + s.CM_K * s.CM_N) : 0;  // coopmat.glsl's cm_scratch
    return (emulated ? 4 : 2) * ops + 4 * (floats + 4 + exchange);  // x_max_bits: one word, declared as 4 (CM_SHARED_COUNT)
}

uint32_t sketchFeaturesCoopMatEmulatedLoopIterations(const kernel::SketchFeaturesCoopMatSpec& s, bool learned, uint32_t subgroupSize) {
    // Per-lane loops of the emulated backend as in polysketchOutputCoopMatEmulatedLoopIterations,
    // for the busiest subgroup (WN column tiles per step), plus the step loops and the per-row
    // loops (rows per invocation x passes over h or r).
    const uint32_t lanes = std::max<uint32_t>(1, subgroupSize), m = s.CM_M, n = s.CM_N, k = s.CM_K;
    const uint32_t loadA = ceilDiv(m * k, lanes), loadB = ceilDiv(k * n, lanes), tile = ceilDiv(m * n, lanes);
    const uint32_t product = ceilDiv(m * k + k * n + m * n, lanes);
    const uint32_t threads = s.SG_M * s.SG_N * lanes, tileM = s.SG_M * m;
    const uint32_t wn = ceilDiv(s.N_CHUNK / n, s.SG_N);
    const uint32_t rowsPerInvocation = ceilDiv(tileM, threads);
    // One GEMM step over kLen rows of weights: staging steps, products, accumulators out (and in).
    auto gemm = [&](uint32_t kLen, bool accumulate) {
        const uint64_t steps = ceilDiv(kLen, s.K_CHUNK);
        // PRODUCT_TERMS products per column tile (three: see the shader's "Precision"), each
        // loading its A and its B operand.
        const uint64_t terms = s.PRODUCT_TERMS ? s.PRODUCT_TERMS : 3;
        return steps * (1 + uint64_t(s.K_CHUNK / k) * wn * terms * (loadA + loadB + product + 1)) + wn * tile * (accumulate ? 2 : 1);
    };
    const uint32_t h = s.HEAD_DIM, r = s.SKETCH;
    uint64_t total = uint64_t(rowsPerInvocation) * 8 * h;  // local LayerNorm, q/k LayerNorm, scale
    if (learned) {
        const uint64_t chunks = ceilDiv(s.HIDDEN, s.N_CHUNK), columnSteps = ceilDiv(r, s.N_CHUNK);
        for (uint32_t in : {h, r}) {
            total += 2 * (uint64_t(rowsPerInvocation) * 3 * in +  // the level's LayerNorm, per branch
                          chunks * (1 + gemm(ceilDiv(in, k) * k, false) + columnSteps * gemm(s.N_CHUNK, true)));
        }
    } else {
        total += uint64_t(ceilDiv(r, s.N_CHUNK)) * (1 + 2 * gemm(ceilDiv(h, k) * k, false));
    }
    return uint32_t(std::min<uint64_t>(total, UINT32_MAX));
}

bool planSketchFeaturesCoopMat(uint32_t m, uint32_t n, uint32_t k, uint32_t subgroupSize, bool emulated, bool smallTiles,
                               const PackedSketch& sketch,
                               uint32_t headDim, uint32_t sharedBytes, uint32_t maxInvocations, kernel::SketchFeaturesCoopMatSpec& spec,
                               int onlyTile, uint32_t* chosenTile) {
    spec.HEAD_DIM = headDim;
    spec.SKETCH = sketch.sketchLength;
    spec.HIDDEN = sketch.hidden;
    spec.CM_M = m;
    spec.CM_N = n;
    spec.CM_K = k;
    // Product columns per step: a multiple of CM_N and of CM_K (the hidden chunk is the next
    // product's depth), no wider than the widest product (r, or the hidden units).
    const uint32_t step = std::max(n, k) % std::min(n, k) == 0 ? std::max(n, k) : n * k;
    const uint32_t widest = ceilDiv(sketch.learned ? sketch.hidden : sketch.sketchLength, step) * step;
    const FeatureCoopMatTile* first = smallTiles ? std::begin(kFeatureCoopMatEmulatedTiles) : std::begin(kFeatureCoopMatTiles);
    const FeatureCoopMatTile* last = smallTiles ? std::end(kFeatureCoopMatEmulatedTiles) : std::end(kFeatureCoopMatTiles);
    if (onlyTile >= 0) {
        if (onlyTile >= last - first) return false;
        first += onlyTile;
        last = first + 1;
    }
    for (const FeatureCoopMatTile* it = first; it != last; ++it) {
        const FeatureCoopMatTile& t = *it;
        spec.SG_M = t.sgM;
        spec.SG_N = t.sgN;
        spec.THREADS = t.sgM * t.sgN * subgroupSize;
        spec.N_CHUNK = std::min(widest, std::max(step, t.nChunk / step * step));
        spec.K_CHUNK = std::max(k, t.kChunk / k * k);
        if (spec.THREADS <= maxInvocations && sketchFeaturesCoopMatSharedBytes(spec, sketch.learned, emulated) <= sharedBytes) {
            if (chosenTile) *chosenTile = uint32_t(it - (smallTiles ? std::begin(kFeatureCoopMatEmulatedTiles) : std::begin(kFeatureCoopMatTiles)));
            return true;
        }
    }
    return false;
}

namespace {

/** The tuning table's entry of `parameter` for this call's shape class; null without a table or an entry. */
const TuningEntry* tuningEntry(const PolysketchPlanInputs& in, TuningParameter parameter) {
    return in.tuning ? in.tuning->find(parameter, in.tuningShape) : nullptr;
}

/** "tuning table SOURCE line N (output.feat_chunk 32 h=64 ...)": how a plan names an entry. */
std::string entryName(const PolysketchPlanInputs& in, const TuningEntry& e) {
    const std::string key = e.key.describe();
    return cat("tuning table ", in.tuning->source, " line ", e.line, " (", tuningParameterName(e.parameter), " ", e.value,
               key.empty() ? "" : " ", key, ")");
}

/** The reason's note for an entry that set a choice. */
std::string tunedNote(const PolysketchPlanInputs& in, const TuningEntry& e) {
    return cat("; ", tuningParameterName(e.parameter), "=", e.value, " from ", entryName(in, e));
}

/** The reason's note for an entry that was not applied, and why. */
std::string ignoredNote(const PolysketchPlanInputs& in, const TuningEntry& e, const std::string& why) {
    return cat("; ", entryName(in, e), " ignored: ", why);
}

/** "; tunable: NAME=VALUE ...": what a table could set for a kernel, with the values in effect. */
std::string tunableNote(std::initializer_list<std::pair<TuningParameter, uint32_t>> values) {
    std::string s = "; tunable:";
    for (const auto& [p, v] : values) s += cat(" ", tuningParameterName(p), "=", v);
    return s;
}

/**
 * generic.stage_rolled for the generic kernels (shaders/staging.glsl, STAGE_ROLLED): PSK_STAGE_ROLLED
 * (0 or 1) where set, else the table's value, else the model's 0 (the whole batches unrolled, so
 * that a compiler may issue a whole tile's loads at once); `note` gets which one decided.
 */
uint32_t genericStageRolled(const PolysketchPlanInputs& in, std::string& note) {
    const char* env = std::getenv("PSK_STAGE_ROLLED");
    if (env && *env) {
        if (std::strcmp(env, "0") != 0 && std::strcmp(env, "1") != 0)
            fail(PSK_ERROR_INVALID_ARGUMENT, "PSK_STAGE_ROLLED=", env, " is not 0 or 1");
        note += cat("; staging rolled ", env, " (PSK_STAGE_ROLLED)");
        return env[0] == '1' ? 1 : 0;
    }
    const TuningEntry* e = tuningEntry(in, TuningParameter::GenericStageRolled);
    note += e ? tunedNote(in, *e) : tunableNote({{TuningParameter::GenericStageRolled, 0}});
    return e ? e->value : 0;
}

}  // namespace

PolysketchPlanInputs polysketchPlanInputs(const AttentionConfig& c, const PackedSketch& sketch, const DeviceCaps& caps,
                                          const TuningTable* tuning) {
    const PolysketchTiles& tiles = kPolysketchTiles;
    const VkPhysicalDeviceLimits& limits = caps.limits();
    PolysketchPlanInputs in{c, sketch, caps};
    in.type = c.dataType;
    in.R = sketch.sketchLength;
    in.dv = c.valueDim;
    in.features = sketch.features();
    in.invocations = limits.maxComputeWorkGroupInvocations;  // >= 128 (Vulkan minimum)
    in.shared = std::min<uint32_t>(limits.maxComputeSharedMemorySize, tiles.sharedBytesCap);

    // --- Eligibility of the lane-team variants (team_kernels.hpp): CPU devices with 8-lane
    // subgroups; 8 teams of 8 lanes per workgroup; a lane owns C4 vec4s of value columns
    // (C4 = ceil(dv / 32), so dv <= 128 keeps the 16 x 4 C4 accumulators of its team's rows in
    // registers or close by); sketch rows are read as vec4s (R % 4 == 0). Each stage falls back to
    // its generic variant on its own.
    TeamEligibility& team = in.team;
    team.c4 = (in.dv + 31) / 32;
    const bool teamDevice = useTeamKernels(caps);
    const bool teamShapes = in.dv % 4 == 0 && team.c4 <= 4 && in.R % 4 == 0;
    team.any = teamDevice && teamShapes;
    team.whyNot = !teamDevice ? teamKernelsUnusedReason(caps) : "dv % 4 != 0, dv > 128 or r % 4 != 0";
    team.states = team.any && findKernelVariant(KernelId::BlockStatesTeam, "", in.type) != nullptr;
    team.output = team.any && (!c.localExact || (c.headDim % 4 == 0 && c.headDim <= 128)) &&
                  findKernelVariant(KernelId::PolysketchOutputTeam, "", in.type) != nullptr;
    team.features = team.any && !sketch.learned && sketch.levels == 1 && c.headDim % 4 == 0 && c.headDim <= 128 &&
                    findKernelVariant(KernelId::SketchFeaturesTeam, "", in.type) != nullptr;

    // State rows: dv values and the normalizer, zero-padded to whole vec4s, or to 8 floats where
    // the team output reads Z 8 floats (one u64vec4) at a time.
    const uint32_t stateAlign = team.output ? 8 : 4;
    in.stateStride = (in.dv + 1 + stateAlign - 1) / stateAlign * stateAlign;

    in.tuning = tuning;
    TuningShape& shape = in.tuningShape;
    shape.headDim = c.headDim;
    shape.valueDim = c.valueDim;
    shape.sketchLength = in.R;
    shape.degree = c.degree;
    shape.type = in.type;
    shape.causal = c.causal;
    shape.localExact = c.localExact;
    shape.learned = sketch.learned;
    in.stageRolled = genericStageRolled(in, in.stageRolledNote);

    // --- Which stages may take cooperative matrices: emulated when asked for (the conformance
    // suite runs the cooperative kernels' logic on devices without them), else the device's KHR or
    // NV path where selectCoopMatForDevice finds a usable shape. 16-bit storage takes them where
    // they are. Float32 storage promises the generic kernels' accuracy: the cooperative kernels
    // then split every operand into float16 hi + lo, three products each (docs/MATH.md, "Products
    // on 16-bit matrix units"), which meets the float32 thresholds but costs 1.5-3x the
    // matrix work of 16-bit storage; on the one GPU measured (an NVIDIA H200) even the 16-bit
    // cooperative output ran 1.9x slower than the FP32 row kernel. So float32 takes them where a
    // device's tuning table measured them faster (float32.cooperative 1) or PSK_COOPMAT_FLOAT32=on
    // asks (the conformance suite's emulated float32 run, a GPU check); else the FP32 kernels.
    // PSK_COOPMAT_STAGES and the self-test (config.coopStages) say which stages may take them
    // (forward/coopmat_switches.hpp).
    CoopEligibility& coop = in.coop;
    coop.switches = coopMatSwitches();
    coop.stages = coop.switches.stages & c.coopStages;
    const CoopMatEmulation emulation = coopMatEmulationMode();
    coop.emulate = emulation != CoopMatEmulation::Off;
    coop.smallTiles = emulation == CoopMatEmulation::SmallTiles;
    coop.shared = std::min<uint32_t>(limits.maxComputeSharedMemorySize, coop.emulate ? tiles.sharedBytesCap : tiles.coopSharedBytesCap);
    coop.choice = selectCoopMatWithSwitches(caps, coop.switches).forDataType(in.type);
    // The variant the stages could take; float32 storage keeps it only where split products are chosen.
    coop.variant = coopVariantFor(coop.choice, coop.emulate, in.type, caps, /*splitFloat32=*/true);
    if (in.type == PSK_DATA_TYPE_FLOAT32) {
        const TuningEntry* entry = tuningEntry(in, TuningParameter::Float32Cooperative);
        const Float32Request request = coop.switches.float32;
        const bool splitFloat32 = request == Float32Request::On || (request == Float32Request::Auto && entry && entry->value != 0);
        const bool possible = coop.variant.has_value();
        if (!splitFloat32) coop.variant.reset();
        if (possible && splitFloat32) {
            coop.float32Note = request == Float32Request::On
                                   ? std::string("; float32 storage on hi + lo products (PSK_COOPMAT_FLOAT32=on)")
                                   : tunedNote(in, *entry) + tunableNote({{TuningParameter::Float32Cooperative, 1}});
        } else if (possible) {
            coop.float32Note = cat("; not the cooperative kernels: float32 storage keeps the FP32 kernels",
                                   request == Float32Request::Off ? std::string(" (PSK_COOPMAT_FLOAT32=off)")
                                   : entry                        ? tunedNote(in, *entry)
                                                                  : std::string(" (not measured faster on this device)"),
                                   tunableNote({{TuningParameter::Float32Cooperative, 0}}));
        } else if (entry) {
            coop.float32Note = ignoredNote(in, *entry, "no cooperative-matrix path for this device and storage type");
        }
    }
    const CoopMatShapeChoice matrix = coop.emulate ? coopMatEmulationShape() : coop.choice.shape;
    coop.m = matrix.m;
    coop.n = matrix.n;
    coop.k = matrix.k;
    coop.cpuDevice = caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    coop.requiredSubgroupSize = caps.minSubgroupSize != caps.maxSubgroupSize ? caps.subgroupSize : 0;
    return in;
}

namespace {

/**
 * On a CPU driver the emulated cooperative kernel of `what` must stay within llvmpipe's loop
 * budget: `iterations` (its estimate) is checked there; false, with the reason in `whyNot`, when it
 * exceeds it. Elsewhere `iterations` becomes 0 (nothing to report).
 */
bool withinEmulatedLoopBudget(const CoopEligibility& coop, const char* what, uint32_t& iterations, std::string& whyNot,
                              uint32_t budget = kEmulatedLoopBudget) {
    if (!coop.emulate || !coop.cpuDevice) {
        iterations = 0;
        return true;
    }
    if (iterations <= budget) return true;
    whyNot = cat("; not the emulated cooperative ", what, ": about ", iterations, " loop iterations per invocation, over ", budget,
                 " (llvmpipe ends every loop after 65535)");
    return false;
}

/** A cooperative kernel's reason: the emulation's (with its loop estimate, where counted) or the device path's. */
std::string coopReason(const CoopEligibility& coop, const char* emulated, uint32_t iterations, const char* device) {
    if (!coop.emulate) return cat("cooperative kernel: ", coop.choice.reason, device, coop.float32Note);
    return cat(coopMatEmulationLabel(), emulated, iterations ? cat("; about ", iterations, " loop iterations per invocation") : std::string(),
               coop.float32Note);
}

/**
 * A team kernel's float32 variant that reads `rows` `floats` at a time (its load constant already
 * set in `spec`), used for calls whose `tensors` strides are multiples of `floats`.
 */
template <KernelId Id>
KernelChoice teamVecRowVariant(const typename KernelInterface<Id>::Spec& spec, uint32_t floats, const char* rows, const char* tensors) {
    return KernelChoice::make<Id>(
        "", PSK_DATA_TYPE_FLOAT32, spec,
        cat("float32 ", rows, " read ", floats, " floats per load, for calls whose ", tensors, " strides are multiples of ", floats));
}

/** "; not the cooperative <what>: <why the stage is off>" where a cooperative variant exists and the stage is switched off, else "". */
std::string stageOffSuffix(const PolysketchPlanInputs& in, uint32_t stage, const char* what) {
    if (!in.coop.variant) return in.coop.float32Note;  // float32 storage kept on the FP32 kernels, or ""
    if (in.coop.stages & stage) return std::string();
    return cat("; not the cooperative ", what, ": ", stageOffReason(in.coop.switches, in.config, stage));
}

/**
 * The cooperative feature map where it is eligible and fits: its choice, or nothing with the reason
 * in `whyNot` (appended to the reason of the kernel that runs instead).
 */
std::optional<FeatureStagePlan> planCoopFeatures(const PolysketchPlanInputs& in, std::string& whyNot) {
    const CoopEligibility& coop = in.coop;
    const PackedSketch& sketch = in.sketch;
    whyNot = stageOffSuffix(in, kCoopFeatures, "feature map");
    if (!coop.variant || !whyNot.empty()) return std::nullopt;
    kernel::SketchFeaturesCoopMatSpec spec;
    spec.PRODUCT_TERMS = coop.switches.featureTerms;
    spec.DIAGNOSTIC = sketch.learned ? 0 : coop.switches.featureDiagnostic;  // the random sketch's intermediates only
    const char* sub = sketch.learned ? "learned" : "random";
    float maxWeight = 0.0f;
    for (float w : sketch.data) maxWeight = std::max(maxWeight, std::fabs(w));
    const bool f16Operands = coop.variant->operand == CoopOperand::F16;
    if (!sketch.learned && sketch.levels != 1) {
        whyNot = "; not the cooperative feature map: it has p = 4 sketches only (p = 2 is S = x, p = 8 keeps the FP32 kernel)";
        return std::nullopt;
    }
    if (f16Operands && !(maxWeight < 16384.0f)) {
        whyNot = cat("; not the cooperative feature map: a sketch weight of magnitude ", maxWeight,
                     " is outside what float16 operands hold without scaling (< 2^14)");
        return std::nullopt;
    }
    if (!findCoopVariant(KernelId::SketchFeaturesCoopMat, *coop.variant, sub, in.type)) {
        whyNot = "; not the cooperative feature map: the variant is not built";
        return std::nullopt;
    }
    uint32_t tile = 0;
    if (!planSketchFeaturesCoopMat(coop.m, coop.n, coop.k, in.caps.subgroupSize, coop.emulate, coop.smallTiles, sketch,
                                   in.config.headDim, coop.shared, in.invocations, spec, -1, &tile)) {
        whyNot = "; not the cooperative feature map: no tiling fits this device's shared memory";
        return std::nullopt;
    }
    // A measured tile instead of the first that fits, where it fits too.
    std::string tuned;
    if (const TuningEntry* e = tuningEntry(in, TuningParameter::FeaturesTile)) {
        const size_t tiles = coop.smallTiles ? std::size(kFeatureCoopMatEmulatedTiles) : std::size(kFeatureCoopMatTiles);
        kernel::SketchFeaturesCoopMatSpec candidate = spec;
        uint32_t loops = 0;
        if (e->value >= tiles) {
            tuned = ignoredNote(in, *e, cat("the tile list has ", tiles, " entries", coop.smallTiles ? " under the emulation's small tiles" : ""));
        } else if (!planSketchFeaturesCoopMat(coop.m, coop.n, coop.k, in.caps.subgroupSize, coop.emulate, coop.smallTiles, sketch,
                                              in.config.headDim, coop.shared, in.invocations, candidate, int(e->value))) {
            tuned = ignoredNote(in, *e, cat("tile ", e->value, " needs more than this device's ", coop.shared, " bytes of shared memory or ",
                                            in.invocations, " invocations"));
        } else if (coop.emulate && coop.cpuDevice &&
                   (loops = sketchFeaturesCoopMatEmulatedLoopIterations(candidate, sketch.learned, in.caps.subgroupSize)) > kEmulatedLoopBudget) {
            tuned = ignoredNote(in, *e, cat("about ", loops, " emulated loop iterations per invocation, over ", kEmulatedLoopBudget));
        } else {
            spec = candidate;
            tile = e->value;
            tuned = tunedNote(in, *e);
        }
    }
    uint32_t iterations = sketchFeaturesCoopMatEmulatedLoopIterations(spec, sketch.learned, in.caps.subgroupSize);
    if (!withinEmulatedLoopBudget(coop, "feature map", iterations, whyNot)) return std::nullopt;
    FeatureStagePlan stage;
    stage.rows = spec.SG_M * spec.CM_M;
    stage.kernel = coopKernelChoice<KernelId::SketchFeaturesCoopMat>(*coop.variant, sub, in.type, spec,
                                    coopReason(coop, ": float16/bfloat16 operands as hi + lo pairs (three products per step), float32 sums",
                                               iterations, "; operands as hi + lo pairs, three products per step") +
                                        tuned + tunableNote({{TuningParameter::FeaturesTile, tile}}));
    stage.kernel.requiredSubgroupSize = coop.requiredSubgroupSize;
    return stage;
}

}  // namespace

FeatureStagePlan planFeatureStage(const PolysketchPlanInputs& in) {
    // Cooperative matrices for the p = 4 sketches (random: two h x r products; learned: the four
    // FF levels, most of a forward's FLOPs), each operand as a 16-bit hi + lo pair
    // (sketch_features_coopmat.comp, "Precision"): degree 2 has no product (S = x) and degree 8's
    // two-level tree stays on the FP32 kernel. Float16 operands take the weights as they are, so a
    // sketch with a weight of magnitude 2^14 or more keeps the FP32 kernel; on a CPU driver the
    // emulated kernel must fit llvmpipe's loop budget (as the output's).
    const AttentionConfig& c = in.config;
    const PackedSketch& sketch = in.sketch;
    std::string whyNotCoop;
    if (std::optional<FeatureStagePlan> coop = planCoopFeatures(in, whyNotCoop)) return *coop;
    FeatureStagePlan stage;
    if (in.team.features) {
        stage.rows = kTeamWorkgroupRows;
        kernel::SketchFeaturesTeamSpec spec;
        spec.HEAD_DIM = c.headDim;
        spec.SKETCH = in.R;
        spec.CPL4 = (in.R + 31) / 32;
        spec.X_LOAD = 0;
        stage.kernel = KernelChoice::make<KernelId::SketchFeaturesTeam>(
            "", in.type, spec, "team kernel: CPU device, random sketch of one level (p = 4), h % 4 == 0, h <= 128" + whyNotCoop);
        if (in.type == PSK_DATA_TYPE_FLOAT32) {
            // Rows 8 floats per load where h allows it, else vec4s.
            stage.vecRowFloats = c.headDim % 8 == 0 ? 8 : 4;
            spec.X_LOAD = stage.vecRowFloats / 4;
            stage.kernelVec = teamVecRowVariant<KernelId::SketchFeaturesTeam>(spec, stage.vecRowFloats, "rows", "q/k");
        }
        return stage;
    }
    stage.rows = std::min<uint32_t>(kPolysketchTiles.featureRows, in.invocations);
    // One row per invocation and nothing shared: any workgroup size the device allows.
    std::string tuned;
    const TuningEntry* rowsEntry = tuningEntry(in, TuningParameter::FeaturesRows);
    if (rowsEntry) {
        const uint32_t most = std::min(in.invocations, in.caps.limits().maxComputeWorkGroupSize[0]);
        if (rowsEntry->value > most) {
            tuned = ignoredNote(in, *rowsEntry, cat("more rows than the ", most, " invocations a workgroup may have here"));
            rowsEntry = nullptr;
        } else {
            stage.rows = rowsEntry->value;
            tuned = tunedNote(in, *rowsEntry);
        }
    }
    kernel::SketchFeaturesSpec spec;
    spec.ROWS = stage.rows;
    spec.HEAD_DIM = c.headDim;
    spec.SKETCH = in.R;
    spec.LEVELS = sketch.levels;
    spec.HIDDEN = sketch.hidden;
    // The kernel stages its rows in shared memory (ROWS x (h + 1) floats), beside the weight chunk
    // of the p = 4 product or its S tile (W_CHUNK x 65 or ROWS x 33 floats) and the rows' LayerNorm
    // statistics: ROWS a multiple of 4 (4 rows per invocation in the product), halved until it fits.
    spec.W_CHUNK = 32;
    auto featureBytes = [&](uint32_t rows, uint32_t chunk) {
        return 4 * (rows * (c.headDim + 1) + std::max(chunk * 65, rows * 33)) + 8 * rows;
    };
    spec.ROWS = std::max<uint32_t>(4, spec.ROWS / 4 * 4);
    // The learned sketch's products: one row per invocation (the model's form everywhere), or tiled
    // where a table's features.learned_tile asks for it (LEARNED_TILE hidden units per chunk; the
    // kernel's header): its tiles of level inputs, hidden activations and weight chunks in place of
    // the random sketch's, where r is a multiple of 4, the shared memory holds them at 16 rows or
    // more, and on a CPU driver its loops stay within llvmpipe's budget. The tiled form was the
    // model's choice on GPUs until the one GPU that ran both timed it 3.2x slower (an H200, 32k,
    // h = 64: 52.9 against 16.3 ms), and AMD's compiler gives it 216 VGPRs against the row form's
    // 168 (2 subgroups per SIMD against 4; docs/PERFORMANCE.md, "Tuning").
    std::string learnedTile;
    if (sketch.learned) {
        // A table's features.learned_tile: 0 the row form, else that many hidden units per chunk (a
        // multiple of 4 up to 64) where the tiles fit; the model's choice otherwise.
        const TuningEntry* tileEntry = tuningEntry(in, TuningParameter::FeaturesLearnedTile);
        uint32_t hc = 32;
        if (tileEntry && tileEntry->value != 0 && tileEntry->value % 4 != 0) {
            learnedTile = ignoredNote(in, *tileEntry, "not a multiple of 4");
            tileEntry = nullptr;
        } else if (tileEntry && tileEntry->value != 0) {
            hc = tileEntry->value;
        }
        const uint32_t ain = std::max(c.headDim, in.R);
        auto learnedBytes = [&](uint32_t rows) {
            return 4 * (rows * (c.headDim + 1) + rows * (ain + 1) + rows * (hc + 1) + std::max(ain * (hc + 1), hc * (in.R + 1))) + 8 * rows;
        };
        uint32_t rows = spec.ROWS;
        while (rows > 16 && learnedBytes(rows) > in.shared) rows = std::max<uint32_t>(16, rows / 2 / 4 * 4);
        // Loop iterations per invocation: 2 branches x 2 levels x chunks x (the D1 chunk staged, the
        // inputs, the D2 chunk staged, the units), and the LayerNorms.
        const uint32_t chunks = ceilDiv(sketch.hidden, hc);
        const uint32_t loops = 4 * chunks * (ceilDiv(ain * hc, rows) + ain + ceilDiv(hc * in.R, rows) + hc) + 12 * ain;
        const bool cpu = in.caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
        std::string rowForm;  // why one row per invocation, or empty
        if (in.R % 4 != 0) {
            rowForm = "r is not a multiple of 4";
        } else if (learnedBytes(rows) > in.shared) {
            rowForm = cat("their tiles need ", learnedBytes(rows), " bytes of shared memory");
        } else if (cpu && loops > kEmulatedLoopBudget) {
            rowForm = cat("about ", loops, " loop iterations per invocation, over ", kEmulatedLoopBudget, " (llvmpipe ends every loop after 65535)");
        }
        if (tileEntry && tileEntry->value == 0) {
            learnedTile += "; learned products one row per invocation" + tunedNote(in, *tileEntry);
        } else if (!rowForm.empty()) {
            learnedTile += "; learned products one row per invocation: " + rowForm;
            if (tileEntry) learnedTile += ignoredNote(in, *tileEntry, rowForm);
        } else if (!tileEntry) {
            // The model's form. llvmpipe runs it faster too (a barrier is a coroutine switch there,
            // a uniform vec4 load cheap): 793 against 995 ms for the learned feature map at 4k,
            // h = 64, H = 4, r = 32, float32 (docs/PERFORMANCE.md).
            learnedTile += useTeamKernels(in.caps)
                               ? "; learned products one row per invocation: a CPU driver (the tiled products are for GPUs)"
                               : "; learned products one row per invocation: the model's form (the tiled ones measured 3.2x slower on an "
                                 "H200; a table's features.learned_tile tiles them)";
        } else {
            spec.ROWS = rows;
            spec.LEARNED_TILE = hc;
            learnedTile += cat("; learned products tiled: 4 rows x ", hc / 4, " hidden units and 4 rows x ", in.R / 4,
                               " columns per invocation, weights staged ", hc, " units at a time");
            if (tileEntry) learnedTile += tunedNote(in, *tileEntry);
        }
    }
    if (spec.LEARNED_TILE == 0) {  // (featureBytes counts the random sketch's tiles, which the learned variant leaves out)
        while (spec.ROWS > 4 && featureBytes(spec.ROWS, spec.W_CHUNK) > in.shared) spec.ROWS = std::max<uint32_t>(4, spec.ROWS / 2 / 4 * 4);
        while (spec.W_CHUNK > 4 && featureBytes(spec.ROWS, spec.W_CHUNK) > in.shared) spec.W_CHUNK /= 2;
        if (featureBytes(spec.ROWS, spec.W_CHUNK) > in.shared) fail(PSK_ERROR_UNSUPPORTED, "head dim too large for this device's shared memory");
    }
    spec.ABLATE = in.coop.switches.ablateFeatures;  // PSK_ABLATE (timing only)
    spec.STAGE_ROLLED = in.stageRolled;
    stage.rows = spec.ROWS;
    // The tiling may round the rows (to what the kernel's staging takes): the reason says so.
    if (rowsEntry && spec.ROWS != rowsEntry->value) tuned += cat(", adjusted to ", spec.ROWS, " rows (what the kernel takes here)");
    stage.kernel = KernelChoice::make<KernelId::SketchFeatures>(
        sketch.learned ? "learned" : "random", in.type, spec,
        (sketch.learned || sketch.levels != 1 ? std::string("generic kernel: the team kernel has random one-level (p = 4) sketches only")
                                              : cat("generic kernel: ", in.team.whyNot)) +
            learnedTile + whyNotCoop + tuned +
            (sketch.learned ? tunableNote({{TuningParameter::FeaturesRows, stage.rows}, {TuningParameter::FeaturesLearnedTile, spec.LEARNED_TILE}})
                            : tunableNote({{TuningParameter::FeaturesRows, stage.rows}})) +
            in.stageRolledNote);
    return stage;
}

StatesStagePlan planStatesStage(const PolysketchPlanInputs& in) {
    const CoopEligibility& coop = in.coop;
    const PolysketchTiles& tiles = kPolysketchTiles;
    const uint32_t R = in.R, dv = in.dv, shared = in.shared;
    StatesStagePlan stage;
    // The kernel scales each key tile by the maxima of its subgroups (subgroupMax).
    const bool subgroupArithmetic = in.caps.subgroupOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    std::string whyNotCoop = stageOffSuffix(in, kCoopStates, "block states");
    if (whyNotCoop.empty() && coop.variant && !subgroupArithmetic)
        whyNotCoop = "; not the cooperative block states: no subgroup arithmetic in compute shaders";
    if (coop.variant && (coop.stages & kCoopStates) && subgroupArithmetic &&
        findCoopVariant(KernelId::BlockStatesCoopMat, *coop.variant, "", in.type) != nullptr) {
        // The cooperative output reads the states as the generic output does (rows of stateStride).
        // Float32 storage: V as hi + lo too (shaders/block_states_coopmat.comp, "Precision").
        const bool splitV = in.type == PSK_DATA_TYPE_FLOAT32;
        // The GPU's tiling with `rowGroups` row groups (0: the model's), on the device's products or,
        // emulated (PSK_COOPMAT_EMULATION=gpu-tiles), on the emulated backend's shape and 4-byte
        // operands; shared memory less what the shader keeps besides the tiles (below). `bytes` and
        // `budget` for a caller that must say why a tiling does not fit.
        auto gpuTiling = [&](uint32_t rowGroups, uint32_t* bytes, uint32_t* budget) {
            CoopMatChoice choice = coop.choice;
            if (coop.emulate) {
                choice.path = CoopMatPath::KHR;
                choice.shape = {coop.m, coop.n, coop.k};
            }
            const uint32_t invocations = (rowGroups ? rowGroups : 2) *
                                         blockStatesColumnSubgroups(choice.shape.m, choice.shape.n, dv, rowGroups, in.caps.subgroupSize, in.invocations) *
                                         in.caps.subgroupSize;
            // The shader's range_max (2 floats per subgroup) and ones_share (one float per feature
            // or per invocation, whichever is more; each array rounded to 16 bytes); the model's
            // tiling keeps the 2 floats per invocation it has always been planned with (more).
            const uint32_t tileF = rowGroups ? std::max(64u, rowGroups * coop.m) : 2 * std::max(1u, 32u / coop.m) * coop.m;
            const uint32_t exact = 4 * std::max(tileF, invocations) + 8 * (invocations / in.caps.subgroupSize) + 32;
            const uint32_t reserved = rowGroups ? exact : std::max(8 * invocations, exact);
            const uint32_t available = coop.emulate ? shared : coop.shared;
            *budget = available - std::min(available, reserved);
            const BlockStatesCoopMatPlan cm =
                planBlockStatesCoopMat(choice, in.caps.subgroupSize, R, dv, *budget, coop.emulate, splitV, rowGroups, in.invocations);
            *bytes = cm.sharedBytes;
            kernel::BlockStatesCoopMatSpec planned = cm.spec;
            planned.Z_STRIDE = in.stateStride;
            return planned;
        };
        kernel::BlockStatesCoopMatSpec spec;
        uint32_t bytes = 0, budget = 0;
        if (coop.smallTiles) {
            spec = planEmulatedBlockStates(coop.m, coop.n, coop.k, in.caps.subgroupSize, R, dv, in.stateStride, shared, splitV);
        } else {
            spec = gpuTiling(0, &bytes, &budget);
            if (coop.emulate && bytes > budget)
                spec = planEmulatedBlockStates(coop.m, coop.n, coop.k, in.caps.subgroupSize, R, dv, in.stateStride, shared, splitV);
        }
        // states.sg_m: the row groups from a tuning table (the GPU's tiling re-planned around them).
        std::string statesTuned;
        if (const TuningEntry* e = tuningEntry(in, TuningParameter::StatesSgM)) {
            std::string why;
            kernel::BlockStatesCoopMatSpec c;
            if (coop.smallTiles) {
                why = "the emulation's small tiles (PSK_COOPMAT_EMULATION=1) have a tiling of their own";
            } else if (e->value * 2 * in.caps.subgroupSize > in.invocations) {
                why = cat(e->value * 2 * in.caps.subgroupSize, " invocations per workgroup, more than this device's ", in.invocations);
            } else {
                c = gpuTiling(e->value, &bytes, &budget);
                const uint32_t tileF = c.SG_M * c.WM * c.CM_M;
                if (bytes > budget)
                    why = cat("needs ", bytes, " bytes of shared memory, ", budget, " available");
                else if (c.THREADS % tileF != 0 && tileF % c.THREADS != 0)
                    why = cat(c.THREADS, " invocations and ", tileF, " features per workgroup, neither a multiple of the other");
            }
            if (why.empty()) {
                spec = c;
                statesTuned = tunedNote(in, *e);
            } else {
                statesTuned = ignoredNote(in, *e, why);
            }
        }
        spec.ABLATE = coop.switches.ablateStates;  // PSK_ABLATE (timing only; the walk inherits it)
        stage.tileF = spec.SG_M * spec.WM * spec.CM_M;
        stage.tileC = spec.SG_N * spec.WN * spec.CM_N;
        // The kernel's normalizer sums assume one of the two divides the other (powers of two do).
        if (spec.THREADS % stage.tileF != 0 && stage.tileF % spec.THREADS != 0)
            fail(PSK_ERROR_INTERNAL, "block_states_coopmat: ", spec.THREADS, " invocations and ", stage.tileF,
                 " features per workgroup, neither a multiple of the other");
        stage.kernel = coopKernelChoice<KernelId::BlockStatesCoopMat>(
            *coop.variant, "", in.type, spec,
            coopReason(coop, ": float16/bfloat16 operands, float32 sums", 0, "") + statesTuned +
                (coop.smallTiles ? std::string() : tunableNote({{TuningParameter::StatesSgM, spec.SG_M}})));
        stage.kernel.requiredSubgroupSize = coop.requiredSubgroupSize;
        // The walking variant: PolysketchPlan::statesWalkKernel. On llvmpipe an invocation's loops
        // end silently after 65535 iterations in all, and a walk's emulated products count per key
        // tile (kEmulatedWalkIterationsPerTile), so the emulation walks short sequences only.
        const AttentionConfig::ProbeWalk probe = in.config.probeWalk;
        const TuningEntry* walkEntry = tuningEntry(in, TuningParameter::StatesWalkMinGroups);
        if (coop.switches.statesWalk != StatesWalkRequest::Off && probe != AttentionConfig::ProbeWalk::Forbid) {
            const bool causal = in.config.causal;
            kernel::BlockStatesCoopMatSpec walkSpec = spec;
            walkSpec.WALK = causal ? 1u : 2u;
            const bool forced = coop.switches.statesWalk == StatesWalkRequest::On || probe == AttentionConfig::ProbeWalk::Force;
            // The walk's threshold: the model's, or a measured one (a switch that forces the walk wins).
            uint32_t minGroups = tiles.statesWalkMinGroups;
            std::string tuned;
            if (walkEntry) {
                if (forced) {
                    tuned = ignoredNote(in, *walkEntry, "the walk is forced (PSK_COOPMAT_STATES_WALK=on)");
                } else if (coop.smallTiles) {
                    tuned = ignoredNote(in, *walkEntry, "the emulation's small tiles walk every call");
                } else {
                    minGroups = walkEntry->value;
                    tuned = tunedNote(in, *walkEntry);
                }
            }
            stage.walkKernel = coopKernelChoice<KernelId::BlockStatesCoopMat>(
                *coop.variant, "", in.type, walkSpec,
                cat("walking the blocks (WALK=", walkSpec.WALK,
                    causal ? ": writes the exclusive prefix, no scan pass" : ": writes the sum, no reduction pass",
                    ") for calls that continue no decode state, ",
                    forced            ? std::string("PSK_COOPMAT_STATES_WALK=on")
                    : coop.smallTiles ? std::string("always under the emulation's small tiles")
                                      : cat("with at least ", minGroups, " workgroups (tiles x B x Hkv)"),
                    tuned, forced || coop.smallTiles ? std::string() : tunableNote({{TuningParameter::StatesWalkMinGroups, minGroups}})));
            stage.walkKernel.requiredSubgroupSize = coop.requiredSubgroupSize;
            stage.walkMinGroups = forced || coop.smallTiles ? 1u : minGroups;
            stage.walkMaxBlocks = 65535;  // the grid's y limit the per-block kernel has
            if (coop.emulate) {
                const uint32_t tilesPerBlock = ceilDiv(in.config.blockSize, walkSpec.KEY_TILE);
                stage.walkMaxBlocks = std::max(1u, kEmulatedLoopBudget / (kEmulatedWalkIterationsPerTile * tilesPerBlock));
            }
        } else if (walkEntry && probe == AttentionConfig::ProbeWalk::Plan) {
            stage.kernel.reason += ignoredNote(in, *walkEntry, "the walk is switched off (PSK_COOPMAT_STATES_WALK=off)");
        }
        return stage;
    }
    if (in.team.states) {
        kernel::BlockStatesTeamSpec spec;
        spec.SKETCH = R;
        spec.VALUE_DIM = dv;
        spec.Z_STRIDE = in.stateStride;
        spec.C4 = in.team.c4;
        stage.kernel = KernelChoice::make<KernelId::BlockStatesTeam>("", in.type, spec,
                                                                     "team kernel: CPU device, dv % 4 == 0, dv <= 128, r % 4 == 0" + whyNotCoop);
        stage.tileF = kTeamWorkgroupRows;
        stage.tileC = std::max<uint32_t>(dv, 1);  // every value column in one workgroup
        return stage;
    }
    // featGroups x colGroups invocations (128: 4 warps); each holds featsPerThread features x up to
    // 16 value columns. Keys staged so that they fit in 16 KiB.
    kernel::BlockStatesSpec spec;
    spec.FEAT_GROUPS = tiles.statesFeatureGroups;
    spec.FEATS_PER_THREAD = tiles.statesFeaturesPerThread;
    spec.COL_GROUPS = tiles.statesColumnGroups;
    spec.COLS_PER_THREAD = std::min<uint32_t>(tiles.statesMaxColumnsPerThread, (ceilDiv(dv, spec.COL_GROUPS) + 3) / 4 * 4);  // whole vec4s
    spec.THREADS = spec.FEAT_GROUPS * spec.COL_GROUPS;
    spec.SKETCH = R;
    spec.VALUE_DIM = dv;
    stage.tileF = spec.FEAT_GROUPS * spec.FEATS_PER_THREAD;
    stage.tileC = spec.COL_GROUPS * spec.COLS_PER_THREAD;
    // Per staged key: its expanded features, its value columns (a vec4 of padding per column group,
    // shaders/block_states.comp) and its S(k) row.
    const uint32_t budget = std::min<uint32_t>(shared, tiles.statesSharedBytes);
    const uint32_t keyBytes = (stage.tileF + stage.tileC + 4 * spec.COL_GROUPS + R) * 4;
    spec.KEY_TILE = std::max<uint32_t>(1, std::min<uint32_t>(tiles.statesMaxKeyTile, floorPow2(budget / keyBytes)));
    if (spec.KEY_TILE * keyBytes > shared) fail(PSK_ERROR_UNSUPPORTED, "sketch too long for this device's shared memory");
    spec.Z_STRIDE = in.stateStride;
    spec.ABLATE = in.coop.switches.ablateStates;  // PSK_ABLATE (timing only)
    spec.STAGE_ROLLED = in.stageRolled;
    stage.kernel = KernelChoice::make<KernelId::BlockStates>(
        "", in.type, spec,
        (in.team.any ? std::string("generic kernel: the team variant is not built") : cat("generic kernel: ", in.team.whyNot)) + whyNotCoop +
            in.stageRolledNote);
    return stage;
}

namespace {

/**
 * The row kernel (shaders/polysketch_output_rows.comp): one query row per invocation, ROWS rows per
 * workgroup inside one block (fewer for small blocks), Z staged FEAT_TILE rows at a time, local
 * keys KEY_TILE at a time; nothing when the device's shared memory cannot hold its tiles (the
 * tile kernel stays). RPI = 1 (more rows per invocation compile for tens of seconds on llvmpipe
 * and raise the registers a GPU's row already needs).
 */
std::optional<OutputStagePlan> planGenericOutputRows(const PolysketchPlanInputs& in) {
    const AttentionConfig& c = in.config;
    const PolysketchTiles& tiles = kPolysketchTiles;
    const uint32_t R = in.R, dv = in.dv, shared = in.shared;
    OutputStagePlan stage;
    stage.rows = c.blockSize >= 64 ? tiles.outputMaxRows : c.blockSize >= 32 ? 32 : 16;
    stage.rows = std::min(stage.rows, floorPow2(std::max<uint32_t>(1, shared / 2 / (R * 4))));  // sq_tile <= half
    kernel::PolysketchOutputRowsSpec spec;
    spec.RPI = 1;
    spec.ROWS = stage.rows / spec.RPI;
    spec.FEAT_TILE = tiles.outputFeatureTile;
    const uint32_t keyWidth = c.localExact ? c.headDim : R;
    const uint32_t sqBytes = (R * stage.rows + 3) / 4 * 16;  // sq_tile
    if (spec.FEAT_TILE * 4 + sqBytes >= shared) return std::nullopt;
    const uint32_t budget = shared - spec.FEAT_TILE * 4 - sqBytes;
    const uint32_t keyRow = (keyWidth + 3) / 4 * 4 + (dv + 3) / 4 * 4, zRow = (dv + 4) / 4 * 4;  // padded to vec4s
    spec.KEY_TILE = std::min<uint32_t>(tiles.outputMaxKeyTile, floorPow2(budget / (keyRow * 4)));
    if (spec.KEY_TILE == 0 || spec.FEAT_TILE * zRow * 4 > budget) return std::nullopt;
    spec.SMEM_FLOATS = std::max(spec.FEAT_TILE * zRow, c.causal ? spec.KEY_TILE * keyRow : 4u);
    setOutputShape(spec, c, R, in.stateStride);
    spec.ABLATE = in.coop.switches.ablateOutput;  // PSK_ABLATE (timing only; the bits it has)
    spec.STAGE_ROLLED = in.stageRolled;  // (its reason, the generic output's, carries the note)
    stage.kernel = KernelChoice::make<KernelId::PolysketchOutputRows>("", in.type, spec, "");
    return stage;
}

/** PSK_GENERIC_OUTPUT: which generic output kernel a GPU gets. */
enum class GenericOutputChoice { Auto, Rows, Tiles };

GenericOutputChoice genericOutputChoice() {
    const char* env = std::getenv("PSK_GENERIC_OUTPUT");
    if (!env || !*env || std::strcmp(env, "auto") == 0) return GenericOutputChoice::Auto;
    if (std::strcmp(env, "rows") == 0) return GenericOutputChoice::Rows;
    if (std::strcmp(env, "tiles") == 0) return GenericOutputChoice::Tiles;
    fail(PSK_ERROR_INVALID_ARGUMENT, "PSK_GENERIC_OUTPUT=", env, " is not auto, rows or tiles");
}

/**
 * The generic output's tiling. Its shared-memory checks run whichever output variant is chosen,
 * as they always have: a configuration the generic kernel cannot hold is refused on every device.
 */
OutputStagePlan planGenericOutput(const PolysketchPlanInputs& in) {
    // A register tile per invocation (shaders/polysketch_output.comp): 4 query rows x COL_VEC4 = 4
    // vec4 value columns (fewer where dv < 16), so that a staged vec4 feeds 16 multiply-adds and no
    // invocation keeps a whole row of dv accumulators (at h = dv = 128 one row per invocation
    // spilled): 64 accumulators whatever dv, the columns over COL_GROUPS = ceil(dv / 16)
    // invocations. Scores: 4 rows x KPI <= 4 keys per invocation (one vec4 of k per step at 4).
    // ROWS query rows per workgroup (fewer for small blocks, to waste fewer invocations), ROWS / 4
    // x COL_GROUPS invocations. Shared memory holds, in turn, S(q)^T and a Z
    // tile, then the local part's q / k chunks, weights and V tile; what does not fit shrinks in
    // this order: the width chunk, the keys per step, the Z rows per step, the rows.
    const AttentionConfig& c = in.config;
    const PolysketchTiles& tiles = kPolysketchTiles;
    const uint32_t R = in.R, dv = std::max<uint32_t>(in.dv, 1), shared = in.shared;
    const uint32_t vd4 = ceilDiv(dv, 4u);
    kernel::PolysketchOutputSpec spec;
    setOutputShape(spec, c, R, in.stateStride);
    spec.COL_VEC4 = std::min<uint32_t>(4, vd4);  // at most the shader's MAX_COL_VEC4 (its register tiles are sized by literals)
    spec.COL_GROUPS = ceilDiv(vd4, spec.COL_VEC4);
    const uint32_t keyWidth = c.localExact ? c.headDim : R;
    const uint32_t slice4 = spec.COL_GROUPS * spec.COL_VEC4, zw4 = std::max(in.stateStride / 4, slice4);
    auto poolFloats = [&](uint32_t rows, uint32_t featTile, uint32_t keyTile, uint32_t widthChunk) {
        const uint32_t rs = rows + 4;  // the shader's RS: transposed rows padded by 4
        const uint32_t zPhase = R * rs + featTile * zw4 * 4;
        const uint32_t localPhase = widthChunk * rs + widthChunk * keyTile + keyTile * rs + keyTile * slice4 * 4;
        return std::max(zPhase, c.causal ? localPhase : 0u);
    };
    uint32_t rows = c.blockSize >= 64 ? tiles.outputMaxRows : c.blockSize >= 32 ? 32 : 16;
    while (rows > 4 && rows / 4 * spec.COL_GROUPS > in.invocations) rows /= 2;
    const uint32_t widthMax = std::min(tiles.outputWidthChunk, ceilDiv(keyWidth, 4u) * 4);
    const uint32_t kpiMax = std::clamp<uint32_t>(tiles.outputMaxKeyTile / spec.COL_GROUPS, 1, 4);  // <= the shader's MAX_KPI
    bool fits = false;
    for (; rows >= 4 && !fits; rows /= 2) {
        for (uint32_t ft = tiles.outputFeatureTile; ft >= 1 && !fits; ft /= 2) {
            for (uint32_t kpi = kpiMax; kpi >= 1 && !fits; kpi /= 2) {
                for (uint32_t wc = widthMax; wc >= 4 && !fits; wc = wc / 2 / 4 * 4) {
                    const uint32_t bytes = poolFloats(rows, ft, kpi * spec.COL_GROUPS, wc) * 4 + ft * 4;  // + the pair tile
                    if (bytes > shared) continue;
                    fits = true;
                    spec.ROWS = rows;
                    spec.FEAT_TILE = ft;
                    spec.KEY_TILE = kpi * spec.COL_GROUPS;
                    spec.WIDTH_CHUNK = wc;
                }
            }
        }
        if (fits) break;
    }
    if (!fits) fail(PSK_ERROR_UNSUPPORTED, "sketch or head dims too large for this device's shared memory");
    spec.THREADS = spec.ROWS / 4 * spec.COL_GROUPS;
    spec.SMEM_FLOATS = poolFloats(spec.ROWS, spec.FEAT_TILE, spec.KEY_TILE, spec.WIDTH_CHUNK);
    spec.ABLATE = in.coop.switches.ablateOutput;  // PSK_ABLATE (timing only; the bits it has)
    spec.STAGE_ROLLED = in.stageRolled;
    OutputStagePlan stage;
    stage.rows = spec.ROWS;
    stage.kernel = KernelChoice::make<KernelId::PolysketchOutput>(
        "", in.type, spec,
        (in.team.any ? std::string("generic kernel: local exact with h % 4 != 0 or h > 128, or the team variant is not built")
                     : cat("generic kernel: ", in.team.whyNot)) +
            in.stageRolledNote);
    return stage;
}

/**
 * The tuning table's FEAT_CHUNK, KEY_TILE and WN of the cooperative output, in that order, each
 * applied on top of the ones before where the tiling stays one the shader takes (multiples of the
 * product shape, WN within the column tiles) and fits this device (invocations, shared memory,
 * the emulation's loop budget); the notes for the reason.
 */
std::string tuneCoopOutput(const PolysketchPlanInputs& in, kernel::PolysketchOutputCoopMatSpec& spec) {
    const CoopEligibility& coop = in.coop;
    const uint32_t n = coop.n, k = coop.k, nt = (in.dv + n) / n;
    const uint32_t keyStep = n % k == 0 ? n : k % n == 0 ? k : n * k;  // as planPolysketchOutputCoopMat's
    std::string notes;
    for (TuningParameter p : {TuningParameter::OutputFeatChunk, TuningParameter::OutputKeyTile, TuningParameter::OutputWn,
                              TuningParameter::OutputStageBatch}) {
        const TuningEntry* e = tuningEntry(in, p);
        if (!e) continue;
        kernel::PolysketchOutputCoopMatSpec c = spec;
        std::string why;
        if (p == TuningParameter::OutputFeatChunk) {
            if (e->value % k != 0) why = cat("FEAT_CHUNK must be a multiple of CM_K = ", k);
            c.FEAT_CHUNK = e->value;
        } else if (p == TuningParameter::OutputKeyTile) {
            if (e->value % keyStep != 0) why = cat("KEY_TILE must be a multiple of ", keyStep, " (of CM_N and CM_K)");
            c.KEY_TILE = e->value;
        } else if (p == TuningParameter::OutputStageBatch) {
            c.STAGE_BATCH = e->value;  // any count: the staging rounds end where the data does
        } else {
            if (e->value > nt) why = cat("WN must be at most the ", nt, " column tiles of dv + 1 = ", in.dv + 1);
            c.WN = e->value;
            c.SG_N = ceilDiv(nt, c.WN);
            c.THREADS = c.SG_M * c.SG_N * in.caps.subgroupSize;
        }
        if (why.empty() && c.THREADS > in.invocations)
            why = cat(c.THREADS, " invocations per workgroup, more than this device's ", in.invocations);
        const uint32_t bytes = polysketchOutputCoopMatSharedBytes(c, coop.emulate);
        if (why.empty() && bytes > coop.shared) why = cat("needs ", bytes, " bytes of shared memory, ", coop.shared, " available");
        if (why.empty() && coop.emulate && coop.cpuDevice) {
            const uint32_t loops = polysketchOutputCoopMatEmulatedLoopIterations(c, in.caps.subgroupSize, in.features, in.config.blockSize);
            if (loops > kEmulatedOutputLoopBudget)
                why = cat("about ", loops, " emulated loop iterations per invocation, over ", kEmulatedOutputLoopBudget);
        }
        if (why.empty()) {
            spec = c;
            notes += tunedNote(in, *e);
        } else {
            notes += ignoredNote(in, *e, why);
        }
    }
    return notes;
}

/**
 * The cooperative output under the same conditions as the block states (emulation requested or a
 * device path, 16-bit storage): phi(q)^T Z and the local products as GEMMs. On a CPU driver the
 * emulated kernel must also stay within llvmpipe's loop budget (65535 iterations per invocation,
 * docs/ARCHITECTURE.md): the emulation walks matrix elements in per-lane loops, so long feature
 * lists (r >= ~96 at small dv) would exceed it; those keep the team / generic output, with the
 * reason in the plan (`whyNot`).
 */
/**
 * FUSED_QUERY and QUERY_NORM of the cooperative output: the random sketch of degree 2 (S(q) = x)
 * or 4 (one level of products), x = s LN(q), whose output computes S(q) and q' from q (with the
 * LayerNorms: bit 1 before the sketch, bit 2 the separate local one), so the feature map runs for
 * k alone; 0 for the learned sketch (four FF levels: a GEMM chain for the feature map's own
 * kernel) and degree 8. `note` says which and why for the plan.
 */
void setFusedQuery(const PolysketchPlanInputs& in, kernel::PolysketchOutputCoopMatSpec& spec, std::string& note) {
    const PackedSketch& sk = in.sketch;
    const bool local = in.config.causal && in.config.localExact;
    const char* whyNot = in.coop.switches.fusedQuery == FusedQueryRequest::Off ? "PSK_COOPMAT_FUSED_QUERY=off"
                         : sk.learned                                            ? "a learned sketch"
                         : sk.levels > 1                                         ? "degree 8 (two levels of products)"
                                                                                 : nullptr;
    spec.FUSED_QUERY = whyNot ? 0 : sk.levels == 0 ? 1 : 2;
    spec.QUERY_NORM = whyNot ? 0 : (sk.qkNorm ? 1u : 0u) | (local && sk.localNorm ? 2u : 0u);
    note = whyNot ? cat("; S(q) and q' from the feature map's rows (", whyNot, ")")
                  : std::string("; S(q) and q' computed from q in the kernel (the feature map runs for k alone)");
}

/**
 * Z_PACKED of the cooperative output: 1 where z_operands.comp packs the prefix states into its B
 * operands once per block (docs/MODEL.md, "Z operands packed once per block": the range pass and
 * staging of each Z chunk, which every workgroup of a block repeats, done once), the model's
 * choice; 0 with PSK_COOPMAT_Z_PACKED=off or a table's output.z_packed 0 (the switch wins over the
 * table). A record's rows are whole 16-byte elements: CM_N must be a multiple of 8 (every shape
 * the planners use is). `note` says which and why for the plan.
 */
uint32_t zPackedChoice(const PolysketchPlanInputs& in, std::string& note) {
    const ZPackedRequest request = in.coop.switches.zPacked;
    if (in.coop.n % 8 != 0) {
        note = cat("; Z staged per workgroup (packed records need CM_N a multiple of 8, not ", in.coop.n, ")");
        return 0;
    }
    if (request != ZPackedRequest::Auto) {
        const bool on = request == ZPackedRequest::On;
        note = on ? "; Z as operands packed once per block (PSK_COOPMAT_Z_PACKED=on)" : "; Z staged per workgroup (PSK_COOPMAT_Z_PACKED=off)";
        return on ? 1 : 0;
    }
    if (const TuningEntry* e = tuningEntry(in, TuningParameter::OutputZPacked)) {
        note = cat(e->value ? "; Z as operands packed once per block" : "; Z staged per workgroup", tunedNote(in, *e));
        return e->value ? 1 : 0;
    }
    note = "; Z as operands packed once per block (z_operands after the prefix)";
    return 1;
}

std::optional<OutputStagePlan> planCoopOutput(const PolysketchPlanInputs& in, std::string& whyNot) {
    const CoopEligibility& coop = in.coop;
    whyNot = stageOffSuffix(in, kCoopOutput, "output");
    if (!coop.variant || !(coop.stages & kCoopOutput) ||
        findCoopVariant(KernelId::PolysketchOutputCoopMat, *coop.variant, "", in.type) == nullptr)
        return std::nullopt;
    kernel::PolysketchOutputCoopMatSpec spec;
    // Before any tiling is planned: without B in shared memory, the tiles have more room.
    std::string packNote;
    spec.Z_PACKED = zPackedChoice(in, packNote);
    if (!planPolysketchOutputCoopMat(coop.m, coop.n, coop.k, in.caps.subgroupSize, coop.emulate, coop.smallTiles, in.config, in.R,
                                     in.stateStride, coop.shared, spec)) {
        whyNot = "; not the cooperative output: no tiling fits this device's shared memory";
        return std::nullopt;
    }
    // The query side computed here where the sketch allows it and its pools (x = s LN(q) of the
    // tile's rows: TILE_M x h floats) leave the tiling as it is: smaller tiles would cost the
    // products more than the feature map's q half saves (h = 128 on a 48 KiB device).
    std::string fusedNote;
    kernel::PolysketchOutputCoopMatSpec fused;
    fused.Z_PACKED = spec.Z_PACKED;
    setFusedQuery(in, fused, fusedNote);
    if (fused.FUSED_QUERY != 0) {
        const bool fits = planPolysketchOutputCoopMat(coop.m, coop.n, coop.k, in.caps.subgroupSize, coop.emulate, coop.smallTiles,
                                                      in.config, in.R, in.stateStride, coop.shared, fused);
        if (fits && fused.SG_M == spec.SG_M && fused.SG_N == spec.SG_N && fused.WN == spec.WN && fused.FEAT_CHUNK == spec.FEAT_CHUNK &&
            fused.KEY_TILE == spec.KEY_TILE && fused.WIDTH_CHUNK == spec.WIDTH_CHUNK)
            spec = fused;
        else
            fusedNote = "; S(q) and q' from the feature map's rows (computing them here would shrink the tiles to fit shared memory)";
    }
    // output.sg_m first (it re-plans the other tiles around the row groups), then the others on top.
    std::string tuned;
    if (const TuningEntry* e = tuningEntry(in, TuningParameter::OutputSgM)) {
        kernel::PolysketchOutputCoopMatSpec c;
        c.FUSED_QUERY = spec.FUSED_QUERY;
        c.QUERY_NORM = spec.QUERY_NORM;
        c.Z_PACKED = spec.Z_PACKED;
        auto plan = [&] {
            return planPolysketchOutputCoopMat(coop.m, coop.n, coop.k, in.caps.subgroupSize, coop.emulate, coop.smallTiles, in.config, in.R,
                                               in.stateStride, coop.shared, c, e->value);
        };
        bool planned = false, unfused = false;
        if (e->value * coop.m <= in.config.blockSize + coop.m) {
            planned = plan();
            // Where the query side's pool (x = s LN(q): TILE_M x h floats) is what leaves no tiling
            // of this many row groups, the feature map's q rows instead: 8 row groups (512
            // invocations, which bound a driver's registers to 128 per invocation, and one staging
            // of each Z chunk and key tile per 128 rows) fit an H200's 48 KiB only so.
            if (!planned && c.FUSED_QUERY != 0) {
                c.FUSED_QUERY = c.QUERY_NORM = 0;
                unfused = planned = plan();
            }
        }
        if (e->value * coop.m > in.config.blockSize + coop.m)
            tuned = ignoredNote(in, *e, cat(e->value, " row groups of ", coop.m, " rows exceed the block of ", in.config.blockSize));
        else if (!planned)
            tuned = ignoredNote(in, *e, cat("no tiling with ", e->value, " row groups fits this device's shared memory"));
        else if (c.THREADS > in.invocations)
            tuned = ignoredNote(in, *e, cat(c.THREADS, " invocations per workgroup, more than this device's ", in.invocations));
        else if (coop.emulate && coop.cpuDevice &&
                 polysketchOutputCoopMatEmulatedLoopIterations(c, in.caps.subgroupSize, in.features, in.config.blockSize) > kEmulatedOutputLoopBudget)
            tuned = ignoredNote(in, *e, "over the emulation's loop budget");
        else {
            spec = c;
            tuned = tunedNote(in, *e);
            if (unfused)
                fusedNote = cat("; S(q) and q' from the feature map's rows (", e->value,
                                " row groups leave no room for the query side's pool in shared memory)");
        }
    }
    spec.ABLATE = coop.switches.ablateOutput;  // PSK_ABLATE (timing only)
    tuned += tuneCoopOutput(in, spec);
    uint32_t iterations = polysketchOutputCoopMatEmulatedLoopIterations(spec, in.caps.subgroupSize, in.features, in.config.blockSize);
    if (!withinEmulatedLoopBudget(coop, "output", iterations, whyNot, kEmulatedOutputLoopBudget)) return std::nullopt;
    OutputStagePlan stage;
    stage.rows = spec.SG_M * spec.CM_M;  // tiles_per_block = ceil(blockSize / TILE_M)
    stage.fusedQuery = spec.FUSED_QUERY != 0;
    if (spec.Z_PACKED) {
        // The walking form (causal): the prefix and the packing in one pass for the calls with at
        // least walkMinGroups packing workgroups, the model's kZOperandsWalkMinGroups or a table's.
        const bool walk = in.config.causal;
        uint32_t walkMinGroups = kZOperandsWalkMinGroups;
        std::string walkNote;
        if (const TuningEntry* e = walk ? tuningEntry(in, TuningParameter::PrefixPackMinGroups) : nullptr) {
            walkMinGroups = e->value;
            walkNote = tunedNote(in, *e);
        }
        if (walk && in.config.selfTestProbe) {
            // The self-test's probe of the cooperative output (a few blocks of one sequence) walks
            // whatever the threshold: so that a device whose driver gets the walk wrong fails there,
            // not in a long call no probe resembles.
            walkMinGroups = 1;
            walkNote = "; the self-test's probe walks every call";
        } else if (walk) {
            walkNote += tunableNote({{TuningParameter::PrefixPackMinGroups, walkMinGroups}});
        }
        stage.zOperands = planZOperands(coop.variant->operand, in.dv, in.stateStride, spec.FEAT_CHUNK, (in.dv + coop.n) / coop.n * coop.n,
                                        in.invocations, walk, walkMinGroups, walkNote);
        // On llvmpipe an invocation's loops end silently after 65535 iterations in all: under the
        // emulation a call walks only as many blocks as the budget holds (more take the scan).
        if (walk && coop.emulate)
            stage.zOperands.walkMaxBlocks =
                std::max(1u, kEmulatedLoopBudget / (kEmulatedZWalkIterationsPerUnit * stage.zOperands.walkUnits + 1));
    }
    stage.kernel = coopKernelChoice<KernelId::PolysketchOutputCoopMat>(*coop.variant, "", in.type, spec,
                                    coopReason(coop, ": float16/bfloat16 operands, float32 sums", iterations, "") + fusedNote + packNote + tuned +
                                        tunableNote({{TuningParameter::OutputFeatChunk, spec.FEAT_CHUNK},
                                                     {TuningParameter::OutputKeyTile, spec.KEY_TILE},
                                                     {TuningParameter::OutputWn, spec.WN},
                                                     {TuningParameter::OutputCooperative, 1},
                                                     {TuningParameter::OutputSgM, spec.SG_M},
                                                     {TuningParameter::OutputStageBatch, spec.STAGE_BATCH},
                                                     {TuningParameter::OutputZPacked, spec.Z_PACKED}}));
    stage.kernel.requiredSubgroupSize = coop.requiredSubgroupSize;
    return stage;
}

}  // namespace

OutputStagePlan planOutputStage(const PolysketchPlanInputs& in) {
    const AttentionConfig& c = in.config;
    const uint32_t R = in.R, dv = in.dv;
    OutputStagePlan generic = planGenericOutput(in);
    std::string whyNotCoop;
    // output.cooperative 0 (a device's table: the generic kernel measured faster there) turns a
    // cooperative output the plan could take into the generic one; 1 is the model's choice.
    const TuningEntry* cooperative = tuningEntry(in, TuningParameter::OutputCooperative);
    // The generic output's kernel the model takes (output.generic_rows; see below).
    const bool small = (!c.localExact || c.headDim <= 64) && dv <= 64;
    if (std::optional<OutputStagePlan> coop = planCoopOutput(in, whyNotCoop)) {
        if (!cooperative || cooperative->value != 0) {
            if (cooperative) coop->kernel.reason += tunedNote(in, *cooperative);
            // Named here too, so that psk tune, which times the model's plan first, knows the
            // parameter exists for the tables that turn this kernel off.
            if (!in.team.output) coop->kernel.reason += tunableNote({{TuningParameter::OutputGenericRows, small ? 1u : 0u}});
            return *coop;
        }
        whyNotCoop = "; not the cooperative output (the tuning table's choice)" + tunedNote(in, *cooperative) +
                     tunableNote({{TuningParameter::OutputCooperative, 0}});
    } else if (cooperative && cooperative->value != 0) {
        whyNotCoop += ignoredNote(in, *cooperative, "no cooperative output for this plan");
    }
    if (!in.team.output) {
        // Two generic kernels: the row kernel ran 6.4x faster than the tile kernel on an NVIDIA
        // H200 at h = dv = 64 (3.25 against 20.66 ms at 32k, float32, before the tile kernel's
        // register tiles were unrolled and its staging loads put in flight); the tile kernel is the
        // one without spills at h = 128 and 256, where the row kernel's accumulators spill. The
        // model's choice is the rows at h, dv <= 64; a device's table (output.generic_rows, timed by
        // psk tune) decides where it was measured; PSK_GENERIC_OUTPUT overrides both.
        const GenericOutputChoice choice = genericOutputChoice();
        const TuningEntry* rowsEntry = choice == GenericOutputChoice::Auto ? tuningEntry(in, TuningParameter::OutputGenericRows) : nullptr;
        const bool wantRows = choice == GenericOutputChoice::Rows || (choice == GenericOutputChoice::Auto && (rowsEntry ? rowsEntry->value != 0 : small));
        std::string why;
        if (wantRows) {
            if (std::optional<OutputStagePlan> rows = planGenericOutputRows(in)) {
                why = choice == GenericOutputChoice::Rows ? std::string("; the row kernel (PSK_GENERIC_OUTPUT=rows)")
                      : rowsEntry                         ? "; the row kernel" + tunedNote(in, *rowsEntry)
                                  : std::string("; the row kernel: h, dv <= 64 (faster than the tiles there on an H200; PSK_GENERIC_OUTPUT)");
                if (choice == GenericOutputChoice::Auto) why += tunableNote({{TuningParameter::OutputGenericRows, 1}});
                rows->kernel.reason = generic.kernel.reason + why + whyNotCoop;
                return *rows;
            }
            why = rowsEntry ? "; register tiles" + ignoredNote(in, *rowsEntry, "the row kernel's tiles do not fit")
                            : std::string("; register tiles (the row kernel's tiles do not fit)");
        } else {
            why = choice == GenericOutputChoice::Tiles ? std::string("; register tiles (PSK_GENERIC_OUTPUT=tiles)")
                  : rowsEntry                          ? "; register tiles" + tunedNote(in, *rowsEntry)
                                                       : std::string("; register tiles: h or dv > 64");
            if (choice == GenericOutputChoice::Auto) why += tunableNote({{TuningParameter::OutputGenericRows, 0}});
        }
        generic.kernel.reason += why + whyNotCoop;
        return generic;
    }
    OutputStagePlan stage;
    kernel::PolysketchOutputTeamSpec spec;
    setOutputShape(spec, c, R, in.stateStride);
    spec.C4 = in.team.c4;
    spec.V_LOAD = 0;
    stage.rows = kTeamWorkgroupRows;
    stage.kernel = KernelChoice::make<KernelId::PolysketchOutputTeam>(
        "", in.type, spec, "team kernel: CPU device, dv % 4 == 0, dv <= 128, r % 4 == 0 (local exact: h % 4 == 0, h <= 128)" + whyNotCoop);
    if (in.type == PSK_DATA_TYPE_FLOAT32) {
        // v rows 8 floats per load where dv and the lane's columns allow it, else vec4s.
        stage.vecRowFloats = in.team.c4 % 2 == 0 && dv % 8 == 0 ? 8 : 4;
        spec.V_LOAD = stage.vecRowFloats / 4;
        stage.kernelVec = teamVecRowVariant<KernelId::PolysketchOutputTeam>(spec, stage.vecRowFloats, "v rows", "v");
    }
    return stage;
}

PolysketchPlan planPolysketch(const AttentionConfig& c, const PackedSketch& sketch, const DeviceCaps& caps, const TuningSelection* tuning) {
    const VkPhysicalDeviceLimits& limits = caps.limits();
    const PolysketchPlanInputs in = polysketchPlanInputs(c, sketch, caps, tuning ? tuning->table.get() : nullptr);
    PolysketchPlan plan;
    if (tuning) plan.tuning = tuning->description;
    plan.sketchLength = in.R;
    plan.features = in.features;
    plan.blockSize = c.blockSize;
    plan.nodeScratch = !sketch.learned && sketch.levels == 2;
    plan.stateStride = in.stateStride;
    for (int i = 0; i < 3; ++i) plan.maxGroups[i] = limits.maxComputeWorkGroupCount[i];
    plan.maxRange = limits.maxStorageBufferRange;
    plan.regionAlignment = std::max<VkDeviceSize>(256, limits.minStorageBufferOffsetAlignment);

    // One rule per stage, in the order a forward runs them (the prefix or reduction kernel is
    // chosen per call by the number of blocks: forward/block_scan.hpp).
    const FeatureStagePlan features = planFeatureStage(in);
    plan.featureKernel = features.kernel;
    plan.featureKernelVec = features.kernelVec;
    plan.featureVecRowFloats = features.vecRowFloats;
    plan.featureRows = features.rows;
    const StatesStagePlan states = planStatesStage(in);
    plan.statesKernel = states.kernel;
    plan.statesTileF = states.tileF;
    plan.statesTileC = states.tileC;
    plan.statesWalkKernel = states.walkKernel;
    plan.statesWalkMinGroups = states.walkMinGroups;
    plan.statesWalkMaxBlocks = states.walkMaxBlocks;
    const OutputStagePlan output = planOutputStage(in);
    plan.outputKernel = output.kernel;
    plan.outputKernelVec = output.kernelVec;
    plan.outputVecRowFloats = output.vecRowFloats;
    plan.outputRows = output.rows;
    plan.fusedQuery = output.fusedQuery;
    plan.zOperands = output.zOperands;
    if (plan.fusedQuery) plan.featureKernel.reason += "; for k alone (the cooperative output computes S(q) and q' from q)";

    // Fault injection (tests of the self-test): only stages that took a cooperative kernel.
    uint32_t cooperative = 0;
    if (plan.featureKernel.kernel == KernelId::SketchFeaturesCoopMat) cooperative |= kCoopFeatures;
    if (plan.statesKernel.kernel == KernelId::BlockStatesCoopMat) cooperative |= kCoopStates;
    if (plan.outputKernel.kernel == KernelId::PolysketchOutputCoopMat) cooperative |= kCoopOutput;
    plan.faultStages = in.coop.switches.faultStages & cooperative;
    plan.poisonWorkspace = poisonWorkspaceFromEnvironment();
    return plan;
}

}  // namespace psk
