// The run-time switches of the cooperative-matrix kernels, read from the environment: which
// backend they use, which forward stages may take them, the start-up self-test, and two
// diagnostics (a feature-map product count and a fault to inject). They exist so that one run on a
// GPU can bisect a wrong cooperative result without rebuilding (docs/GPU_RUN.md, "Bisect"), and so
// that tests can force each path; an app normally sets none of them.
//
//   PSK_COOPMAT_BACKEND        auto (default): the device's KHR path, else NV, else scalar
//                              khr | nv: only that extension (scalar where the device lacks it)
//                              emulated: the cooperative kernels through the emulated backend
//                              (shaders/coopmat.glsl; as PSK_COOPMAT_EMULATION=1) | off: none
//   PSK_COOPMAT_STAGES         all (default) | none | a comma list of features, states, output,
//                              baselines: the stages that may take cooperative kernels
//   PSK_COOPMAT_SELFTEST       1 (default): a cooperative kernel on a GPU is checked against the
//                              generic one before its first use (forward/coopmat_self_test.hpp)
//                              0: not checked | force: checked on the emulated backend too
//   PSK_COOPMAT_FEATURE_TERMS  3 (default) | 1: hi/lo products per step of the cooperative feature
//                              map (1 keeps A_hi W_hi alone: float16-operand accuracy, a diagnostic)
//   PSK_COOPMAT_STATES_WALK    auto (default) | on | off: whether the cooperative block states may
//                              walk the blocks and write the prefix themselves (no scan pass;
//                              PolysketchPlan::statesWalkKernel); auto leaves it to the plan
//   PSK_COOPMAT_FLOAT32        auto (default) | on | off: whether float32 storage may take the
//                              polysketch cooperative kernels with every operand split into
//                              float16 hi + lo (docs/MATH.md, "Products on 16-bit matrix
//                              units"); auto: where the device's tuning table says
//                              float32.cooperative 1 (measured faster than FP32 there)
//   PSK_COOPMAT_FUSED_QUERY    auto (default) | on | off: whether the cooperative output computes
//                              S(q) and q' from q itself (random sketch of degree 2 or 4, with its
//                              LayerNorms), so the feature map runs for k alone; on is auto (the
//                              plan says where it cannot), off keeps the feature map's rows
//   PSK_COOPMAT_Z_PACKED       auto (default) | on | off: whether the cooperative output reads Z
//                              as operands packed once per block (z_operands.comp after the prefix:
//                              its Z_PACKED) or scales and stages each chunk of Z per workgroup;
//                              auto: packed, unless the tuning table says output.z_packed 0
//   PSK_COOPMAT_BASELINE       flash (default) | tiled: the cooperative softmax / exact polynomial
//                              kernel for 16-bit storage (attention_flash_coopmat, or the older
//                              attention_tiled_coopmat; read by forward/tiled_forward.cpp)
//   PSK_COOPMAT_FAULT          tests only: a comma list of stages whose cooperative kernel is made
//                              wrong (its result overwritten with infinities after it runs), to
//                              show that the self-test catches a broken kernel
//
// The older switches keep working: PSK_DISABLE_COOPMAT=1 is PSK_COOPMAT_BACKEND=off, and
// PSK_COOPMAT_EMULATION=1 / gpu-tiles selects the emulated backend (with its own or the GPU's tiling).
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "kernels/coop_variants.hpp"

namespace psk {

/** Stages of a forward that may run cooperative kernels, as bits. */
enum CoopStageBit : uint32_t {
    kCoopFeatures = 1u,   // sketch_features_coopmat
    kCoopStates = 2u,     // block_states_coopmat
    kCoopOutput = 4u,     // polysketch_output_coopmat
    kCoopBaselines = 8u,  // attention_tiled_coopmat (softmax, exact polynomial)
    kCoopAllStages = 15u,
};

/** "features", "states", "output", "baselines" (one bit), else "stages". */
const char* coopStageName(uint32_t bit);

enum class CoopBackendRequest { Auto, KHR, NV, Emulated, Off };
/**
 * Hardware: probe each cooperative kernel a GPU driver compiled (the default); Always: the
 * emulated ones too; Known: probe nothing new, but keep a variant the process already found wrong
 * disabled (psk tune, whose candidates it checks itself); Off: nothing.
 */
enum class CoopSelfTestMode { Off, Hardware, Always, Known };
enum class StatesWalkRequest { Auto, On, Off };
enum class Float32Request { Auto, On, Off };
enum class FusedQueryRequest { Auto, On, Off };
enum class ZPackedRequest { Auto, On, Off };

struct CoopMatSwitches {
    CoopBackendRequest backend = CoopBackendRequest::Auto;
    uint32_t stages = kCoopAllStages;
    CoopSelfTestMode selfTest = CoopSelfTestMode::Hardware;
    uint32_t featureTerms = 3;
    uint32_t faultStages = 0;
    StatesWalkRequest statesWalk = StatesWalkRequest::Auto;
    Float32Request float32 = Float32Request::Auto;  // PSK_COOPMAT_FLOAT32
    FusedQueryRequest fusedQuery = FusedQueryRequest::Auto;  // PSK_COOPMAT_FUSED_QUERY
    ZPackedRequest zPacked = ZPackedRequest::Auto;  // PSK_COOPMAT_Z_PACKED
    /** PSK_COOPMAT_FEATURE_DIAGNOSTIC: the cooperative feature map's DIAGNOSTIC (0 S; 1 rows, 2 identity, 3 product, 4 accumulators, 5 operands). */
    uint32_t featureDiagnostic = 0;
    /**
     * PSK_ABLATE: parts of the block states, the output and the feature map left out (their kernels'
     * ABLATE bits; timing only). The cooperative and the generic kernels of a stage read the same
     * mask; a bit a kernel does not have (the generic output has no Z range pass or products) is
     * ignored by it. The feature map's are the generic kernel's.
     */
    uint32_t ablateStates = 0, ablateOutput = 0, ablateFeatures = 0;
};

/**
 * PSK_ABLATE's value: a comma list of states.products (1), states.expand (2), states.loads (4),
 * output.inter (1), output.local (2), output.products (4), output.zrange (8), output.expand (16),
 * output.zstage (32), output.kvstage (64), features.products (1), features.loads (2),
 * features.local (4) (null or empty: none; the shaders' ABLATE constants); false with `error`
 * naming what is not understood.
 */
bool parseAblate(const char* value, uint32_t* states, uint32_t* output, uint32_t* features, std::string* error);

/**
 * PSK_COOPMAT_FEATURE_DIAGNOSTIC's value (null, empty or "off": 0; "rows" 1, "identity" 2,
 * "product" 3, "accumulators" 4, "operands" 5: shaders/sketch_features_coopmat.comp, "Diagnostics");
 * false with `error` otherwise.
 */
bool parseFeatureDiagnostic(const char* value, uint32_t* out, std::string* error);

/** PSK_COOPMAT_STATES_WALK's value (null or empty: auto); false with `error` when not understood. */
bool parseStatesWalk(const char* value, StatesWalkRequest* out, std::string* error);

/** PSK_COOPMAT_FLOAT32's value (null or empty: auto; on / 1, off / 0); false with `error` when not understood. */
bool parseFloat32Request(const char* value, Float32Request* out, std::string* error);
/** PSK_COOPMAT_FUSED_QUERY's value (null or empty: auto; on / 1, off / 0); false with `error` when not understood. */
bool parseFusedQuery(const char* value, FusedQueryRequest* out, std::string* error);
/** PSK_COOPMAT_Z_PACKED's value (null or empty: auto; on / 1, off / 0); false with `error` when not understood. */
bool parseZPacked(const char* value, ZPackedRequest* out, std::string* error);

/**
 * Parses the switches from values (null or empty: the default); false with `error` naming the
 * variable and the values it takes when one is not understood. Pure: tests call it directly.
 */
bool parseCoopMatSwitches(const char* backend, const char* stages, const char* selfTest, const char* featureTerms,
                          const char* fault, CoopMatSwitches* out, std::string* error);

/**
 * The switches from the environment (with PSK_DISABLE_COOPMAT and PSK_COOPMAT_EMULATION folded
 * in). Throws INVALID_ARGUMENT on a value it does not understand: a misspelled switch must not
 * silently measure something else.
 */
CoopMatSwitches coopMatSwitches();

struct CoopMatChoice;
struct CoopMatSelection;
struct DeviceCaps;
/**
 * The cooperative-matrix selection for a device under the switches: selectCoopMat with only the
 * requested extension (khr, nv), or none (off, emulated: the emulated backend needs no extension).
 */
CoopMatSelection selectCoopMatWithSwitches(const DeviceCaps& caps, const CoopMatSwitches& switches);

/**
 * The cooperative variant that the stages of a call with storage `type` take, if any: the emulated
 * backend when requested (on a device with a fixed subgroup of 4 or more lanes: the emulation
 * spreads a 16 x 16 matrix over it), else the device's choice. Float32 storage only where
 * `splitFloat32` says its kernels split every operand into float16 hi + lo (the polysketch
 * kernels; float16 operands then, whatever the bfloat16 choice); none otherwise, since its contract
 * is float32 accuracy.
 */
std::optional<CoopVariant> coopVariantFor(const CoopMatChoice& choice, bool emulate, PskDataType type, const DeviceCaps& caps,
                                          bool splitFloat32 = false);

/** One line for `psk info` and plans: the switches that differ from the defaults ("" when none). */
std::string describeCoopMatSwitches(const CoopMatSwitches& s);

}  // namespace psk
