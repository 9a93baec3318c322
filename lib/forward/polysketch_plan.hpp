// Which kernels a polysketch forward runs on a device, with which tile sizes, and why: the one
// place that answers "which shaders run for this call". Its two halves, after flash-attention's
// hopper/ tile_size.h + heuristics.h: the tile sizes (kPolysketchTiles) and the rules that pick a
// variant per stage (planFeatureStage, planStatesStage, planOutputStage, each choice with its
// reason; the prefix / reduction is chosen per call, forward/block_scan.hpp), composed by
// planPolysketch. `psk info --plan` prints it. Every rule is a pure function of the config, the
// sketch, the device's capabilities, the PSK_COOPMAT_* switches and the tuning table, if any
// (forward/tuning_table.hpp: measured overrides of the tile choices below, each validated against
// the device here and named in the reason of the kernel it chose; one that does not fit is
// ignored, and the reason says why). A reason ends with "; tunable: NAME=VALUE ..." listing what a
// table could set for that kernel and the value in effect (psk tune reads it).
#pragma once

#include <optional>
#include <string>

#include "forward/attention_config.hpp"
#include "forward/coopmat_selection.hpp"
#include "forward/coopmat_switches.hpp"
#include "forward/tuning_table.hpp"
#include "forward/z_operands.hpp"
#include "kernels/coop_variants.hpp"
#include "kernels/kernel_table.hpp"
#include "sketch/sketch_pack.hpp"
#include "vk/device_caps.hpp"

namespace psk {

/** Tile sizes of the generic (GPU) kernels; the team kernels' are fixed by kTeamWorkgroupRows. */
struct PolysketchTiles {
    uint32_t featureRows = 64;         // feature map: rows per workgroup (one per invocation)
    uint32_t statesFeatureGroups = 32;  // block states: invocations along features (4 warps with 4 column groups) ...
    uint32_t statesFeaturesPerThread = 4;
    uint32_t statesColumnGroups = 4;   // ... and along value columns
    uint32_t statesMaxColumnsPerThread = 16;
    uint32_t statesMaxKeyTile = 32;    // keys staged per step, in at most statesSharedBytes
    uint32_t statesSharedBytes = 16384;
    uint32_t outputMaxRows = 64;       // output: query rows per workgroup (fewer for small blocks), 4 per invocation
    uint32_t outputFeatureTile = 16;   // Z rows staged per step
    uint32_t outputMaxKeyTile = 32;    // local keys staged per step
    uint32_t outputWidthChunk = 32;    // key-width columns of q and k staged per step of the local scores
    uint32_t sharedBytesCap = 32768;   // the generic and emulated kernels use at most this much shared memory
    // The cooperative kernels on a GPU: up to the usual compute limit (NVIDIA's 48 KiB; the
    // softmax / polynomial baseline's too, tiled_forward.cpp). At h = 64, r = 32 it lets the learned
    // feature map run 32 rows per workgroup instead of 16 (its weights are re-read and split once
    // per workgroup: docs/PERFORMANCE.md's model, 7.8 -> 4.6 ms at 32k on an H100) and the output
    // keep 64 features per step with Z as a hi + lo pair.
    uint32_t coopSharedBytesCap = 49152;
    // The walking cooperative block states (PolysketchPlan::statesWalkKernel) on a GPU: at least
    // this many workgroups (feature x column tiles x B x Hkv). Each walks its blocks in a chain of
    // barriers, so it needs about three resident per SM of a large GPU (132 on an H100) before the
    // chains overlap as the per-block kernel's do; then it saves the H_l round trip and the scan
    // (docs/MODEL.md: at 32k, h = 64, 144 workgroups walk in ~1.0 ms against 0.58 per block + scan
    // on an H200; 576 in 1.7 against 2.3). The model's choice until a GPU measures both.
    uint32_t statesWalkMinGroups = 400;
};
inline constexpr PolysketchTiles kPolysketchTiles{};

/**
 * Tiles of the cooperative-matrix feature map (shaders/sketch_features_coopmat.comp), largest
 * first: subgroups along rows (TILE_M = sgM * CM_M rows per workgroup) and along the column tiles
 * of a product step, product columns per step (rounded to the shape, capped at the widest
 * product), weight rows staged per step. The planner takes the first that fits the device's
 * shared memory and workgroup size. Hardware: 64 rows (4 x 16) and 64-column steps, an initial
 * tiling not yet tuned on a GPU. Emulated (lavapipe): one row group of 16 rows over 4 subgroups,
 * so that each invocation walks few matrix elements (llvmpipe's loop budget).
 */
struct FeatureCoopMatTile {
    uint32_t sgM, sgN, nChunk, kChunk;
};
inline constexpr FeatureCoopMatTile kFeatureCoopMatTiles[] = {{4, 2, 64, 32}, {2, 2, 64, 32}, {2, 2, 32, 32}, {1, 2, 32, 16}};
inline constexpr FeatureCoopMatTile kFeatureCoopMatEmulatedTiles[] = {{1, 4, 64, 32}, {1, 4, 32, 16}};

struct PolysketchPlan {
    /** Stages (CoopStageBit) whose cooperative kernel is made wrong on purpose (PSK_COOPMAT_FAULT; tests only). */
    uint32_t faultStages = 0;
    /** Every workspace region filled with NaN before the first kernel (forward/workspace.hpp, PSK_POISON_WORKSPACE). */
    bool poisonWorkspace = false;
    uint32_t sketchLength = 0;  // R
    uint32_t features = 0;      // F = R (R + 1) / 2
    uint32_t blockSize = 256;
    bool nodeScratch = false;  // degree 8: level-1 nodes pass through workspace memory
    /**
     * Floats per feature row of a block state: dv + 1 (value columns, then the normalizer column)
     * rounded up to a multiple of 4 (8 where the team output reads Z 8 floats at a time), so that
     * every row starts aligned and kernels read it as vectors. The padding columns are zero.
     */
    uint32_t stateStride = 0;

    // Stage by stage: the kernel, and for the team kernels in float32 a second pipeline that reads
    // rows as vectors, used per dispatch when the tensor's strides are multiples of *VecRowFloats.
    KernelChoice featureKernel, featureKernelVec;
    uint32_t featureVecRowFloats = 4;
    uint32_t featureRows = 64;  // rows per workgroup
    KernelChoice statesKernel;
    uint32_t statesTileF = 64, statesTileC = 64;  // features x value columns per workgroup
    /**
     * The walking block states (block_states_coopmat.comp with WALK = 1 causal, 2 full): one
     * workgroup per feature x column tile and sequence walks the blocks and writes the prefix (or the
     * sum) itself, so no scan or reduction runs. Empty when not planned. A call takes it when it
     * continues no decode state (the scan then adds the state's prefix and keeps its tail), its
     * blocks are at most statesWalkMaxBlocks and its walking workgroups (tiles x B x Hkv) at least
     * statesWalkMinGroups; else statesKernel and the scan.
     */
    KernelChoice statesWalkKernel;
    uint32_t statesWalkMinGroups = 0;
    uint32_t statesWalkMaxBlocks = 0;
    KernelChoice outputKernel, outputKernelVec;
    uint32_t outputVecRowFloats = 4;
    uint32_t outputRows = 64;  // query rows per workgroup
    /**
     * The cooperative output computes S(q) and q' from q (its FUSED_QUERY): the feature map runs
     * for k alone and the workspace has no query-side rows.
     */
    bool fusedQuery = false;
    /**
     * The cooperative output's Z_PACKED: z_operands.comp packs the prefix states (or the full sum)
     * into the output's B operands once per block, recorded before the output in its stage; the
     * output's binding STATES then holds the records (the workspace's "z operands" region). Its
     * kernel is empty when the output stages Z itself.
     */
    ZOperandsPlan zOperands;
    // The prefix (causal) or reduction (full) kernel depends on the number of blocks of a call:
    // forward/block_scan.hpp decides it per call.

    uint32_t maxGroups[3] = {65535, 65535, 65535};
    VkDeviceSize maxRange = 0;           // maxStorageBufferRange
    VkDeviceSize regionAlignment = 256;  // workspace regions start at multiples of this

    /** Which tuning table the plan read and how it was chosen (TuningSelection::description); "" without one. */
    std::string tuning;
};

/** `tuning`: the table to apply (null or no table: the model's choices). */
PolysketchPlan planPolysketch(const AttentionConfig& config, const PackedSketch& sketch, const DeviceCaps& caps,
                              const TuningSelection* tuning = nullptr);

/** Where the lane-team variants may run (team_kernels.hpp), decided once for every stage. */
struct TeamEligibility {
    bool any = false;                  // a team device and team shapes (dv % 4 == 0, dv <= 128, r % 4 == 0)
    bool features = false, states = false, output = false;  // ... and each stage's own conditions, variant built
    const char* whyNot = "";           // why not `any`, for the generic kernels' reasons
    uint32_t c4 = 1;                   // vec4s of value columns per lane: ceil(dv / 32)
};

/** Where the cooperative-matrix variants may run, decided once for every stage. */
struct CoopEligibility {
    CoopMatSwitches switches;          // PSK_COOPMAT_* in effect
    uint32_t stages = 0;               // switches.stages & config.coopStages
    bool emulate = false, smallTiles = false;  // the emulated backend (PSK_COOPMAT_EMULATION / BACKEND=emulated), its tiling
    uint32_t shared = 0;               // shared memory the cooperative kernels may use
    CoopMatChoice choice;              // the device's path and shape for the storage type
    std::optional<CoopVariant> variant;  // the built backend that runs it; none: every stage scalar
    uint32_t m = 16, n = 16, k = 16;   // the product shape (emulated: coopMatEmulationShape, 16 x 16 x 16 by default)
    bool cpuDevice = false;            // llvmpipe's loop budget applies to the emulation
    uint32_t requiredSubgroupSize = 0; // pinned where the device's subgroup size varies
    // Float32 storage on a device (or emulation) with a path: why its stages take, or do not take,
    // the split cooperative kernels (float32.cooperative, PSK_COOPMAT_FLOAT32); "" otherwise.
    std::string float32Note;
};

/** What every stage's rule reads: the call's config, sketch and device, and the decisions shared by the stages. */
struct PolysketchPlanInputs {
    const AttentionConfig& config;
    const PackedSketch& sketch;
    const DeviceCaps& caps;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    uint32_t R = 0, dv = 0, features = 0;  // sketch length, value dim, F = R (R + 1) / 2
    uint32_t invocations = 128;            // maxComputeWorkGroupInvocations
    uint32_t shared = 0;                   // shared memory of the generic and team kernels (PolysketchTiles::sharedBytesCap)
    uint32_t stateStride = 0;              // PolysketchPlan::stateStride
    TeamEligibility team;
    CoopEligibility coop;
    const TuningTable* tuning = nullptr;  // measured overrides, if any
    TuningShape tuningShape;              // this call's shape class, as the table's entries key it
    // The generic kernels' STAGE_ROLLED (generic.stage_rolled, PSK_STAGE_ROLLED) and the note that
    // says what decided it, the same for every generic kernel of the plan.
    uint32_t stageRolled = 0;
    std::string stageRolledNote;
};
PolysketchPlanInputs polysketchPlanInputs(const AttentionConfig& config, const PackedSketch& sketch, const DeviceCaps& caps,
                                          const TuningTable* tuning = nullptr);

/** The feature map's kernel (and the team kernel's float32 vec-row variant), rows per workgroup. */
struct FeatureStagePlan {
    KernelChoice kernel, kernelVec;
    uint32_t vecRowFloats = 4;
    uint32_t rows = 64;
};
/** Cooperative (p = 4 sketches, 16-bit storage), else team, else generic; each choice says why. */
FeatureStagePlan planFeatureStage(const PolysketchPlanInputs& in);

/** The block states' kernel and its tile (features x value columns per workgroup). */
struct StatesStagePlan {
    KernelChoice kernel;
    uint32_t tileF = 64, tileC = 64;
    KernelChoice walkKernel;  // PolysketchPlan::statesWalkKernel and its conditions
    uint32_t walkMinGroups = 0, walkMaxBlocks = 0;
};
StatesStagePlan planStatesStage(const PolysketchPlanInputs& in);

/** The output's kernel (and the team kernel's float32 vec-row variant), query rows per workgroup. */
struct OutputStagePlan {
    KernelChoice kernel, kernelVec;
    uint32_t vecRowFloats = 4;
    uint32_t rows = 64;
    bool fusedQuery = false;  // PolysketchPlan::fusedQuery
    ZOperandsPlan zOperands;  // PolysketchPlan::zOperands
};
/** Throws UNSUPPORTED where the generic output's tiling does not fit, whichever variant is chosen. */
OutputStagePlan planOutputStage(const PolysketchPlanInputs& in);

/**
 * Tiles of the cooperative-matrix output (shaders/polysketch_output_coopmat.comp) for a product
 * shape m x n x k: SG_M x SG_N subgroups (CM_M query rows each; WN of the ceil((dv + 1) / n)
 * column tiles each), FEAT_CHUNK features per step of phi(q)^T Z, KEY_TILE local keys per step,
 * WIDTH_CHUNK columns of the local rows per step of the scores; the largest of these (WN grows
 * first, then SG_M, FEAT_CHUNK, KEY_TILE, WIDTH_CHUNK shrink, last to first) whose shared memory
 * fits `sharedBytes`. `emulated`: the COOPMAT_EMULATED backend (4-byte operands plus its
 * per-subgroup exchange region); otherwise 2-byte operands. `smallTiles`: the emulation's small
 * tiling (see the definition); otherwise the GPU's.
 * Returns false when even the smallest tiling does not fit. `sgM` (non-zero: a tuning table's
 * output.sg_m): exactly that many row groups, the other tiles shrunk until they fit. The
 * caller's spec.FUSED_QUERY stays, and its shared memory counts.
 */
bool planPolysketchOutputCoopMat(uint32_t m, uint32_t n, uint32_t k, uint32_t subgroupSize, bool emulated, bool smallTiles,
                                 const AttentionConfig& config,
                                 uint32_t sketchLength, uint32_t stateStride, uint32_t sharedBytes,
                                 kernel::PolysketchOutputCoopMatSpec& spec, uint32_t sgM = 0);
/** The shared memory polysketch_output_coopmat.comp declares for `spec` (the shader's pools, in bytes). */
uint32_t polysketchOutputCoopMatSharedBytes(const kernel::PolysketchOutputCoopMatSpec& spec, bool emulated);
/**
 * An estimate of the loop iterations one invocation of the emulated (COOPMAT_EMULATED) output
 * runs for the last row tile of a full block: what llvmpipe counts against its 65535 limit.
 */
uint32_t polysketchOutputCoopMatEmulatedLoopIterations(const kernel::PolysketchOutputCoopMatSpec& spec, uint32_t subgroupSize,
                                                       uint32_t features, uint32_t blockSize);

/**
 * Tiles of the cooperative-matrix feature map for a product shape m x n x k (p = 4 random or
 * learned sketch, kFeatureCoopMatTiles, or kFeatureCoopMatEmulatedTiles where `smallTiles`): the
 * first whose shared memory (4-byte operands where `emulated`) fits `sharedBytes` and whose
 * workgroup fits `maxInvocations`; false when none does. `onlyTile` >= 0: that entry of the list
 * alone (a tuning table's features.tile). `chosenTile`, when given, receives the index taken.
 */
bool planSketchFeaturesCoopMat(uint32_t m, uint32_t n, uint32_t k, uint32_t subgroupSize, bool emulated, bool smallTiles,
                               const PackedSketch& sketch,
                               uint32_t headDim, uint32_t sharedBytes, uint32_t maxInvocations, kernel::SketchFeaturesCoopMatSpec& spec,
                               int onlyTile = -1, uint32_t* chosenTile = nullptr);
/** The shared memory sketch_features_coopmat.comp declares for `spec` (its two pools, in bytes). */
uint32_t sketchFeaturesCoopMatSharedBytes(const kernel::SketchFeaturesCoopMatSpec& spec, bool learned, bool emulated);
/**
 * An estimate of the loop iterations one invocation of the emulated cooperative feature map runs
 * (what llvmpipe counts against its 65535 limit): products, staging steps, per-row loops.
 */
uint32_t sketchFeaturesCoopMatEmulatedLoopIterations(const kernel::SketchFeaturesCoopMatSpec& spec, bool learned, uint32_t subgroupSize);

/**
 * PSK_COOPMAT_EMULATION=1 (any value but "", "0" and "gpu-tiles"): the cooperative-matrix kernels
 * run through the emulated backend of shaders/coopmat.glsl on any device, so that their tiling,
 * staging, edge tiles and scaling are tested where no device has cooperative matrices (lavapipe in
 * CI), with small tiles (one row group of 16 rows) that keep llvmpipe's per-invocation loops short.
 * PSK_COOPMAT_EMULATION=gpu-tiles: the same backend with the tilings the planners choose on a GPU
 * (16 x 16 x 16 products unless PSK_COOPMAT_EMULATION_SHAPE says otherwise; several row groups of
 * subgroups, several tiles per subgroup, 64-wide steps), as far as the device's shared memory holds
 * them with the emulation's 4-byte operands, so that the multi-subgroup indexing a GPU runs is
 * tested on lavapipe too. Slow; for tests, never for speed. Read when an attention object is created.
 */
enum class CoopMatEmulation { Off, SmallTiles, GpuTiles };
CoopMatEmulation coopMatEmulationMode();
/**
 * The emulated backend's matrix shape: PSK_COOPMAT_EMULATION_SHAPE=MxNxK (unset or empty: 16x16x16,
 * the shape NVIDIA's and AMD's matrix units take), e.g. 8x8x16 or 8x16x16 (Intel's), 16x8x16
 * (NVIDIA's other float16 shape), so that the kernels' tilings of every vendor's shape run on
 * lavapipe. Each of M, N, K a multiple of 8 from 8 to 64, and M x N, M x K, K x N at most 256 (the
 * emulation's 64 slots per lane at 4 lanes). Throws PSK_ERROR_INVALID_ARGUMENT otherwise.
 */
CoopMatShapeChoice coopMatEmulationShape();
/** Why a stage keeps its scalar kernel under the switches and the config's coopStages (plan reasons). */
std::string stageOffReason(const CoopMatSwitches& switches, const AttentionConfig& config, uint32_t stage);
/** coopMatEmulationMode() != CoopMatEmulation::Off. */
bool coopMatEmulationRequested();
/** How a plan names the emulated kernels: "cooperative kernel, emulated (PSK_COOPMAT_EMULATION=...)". */
const char* coopMatEmulationLabel();

}  // namespace psk
