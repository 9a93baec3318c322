// Softmax and exact polynomial attention (the quadratic baselines): attention_flash_fp32.comp (FP32
// units, register tiles), attention_tiled.comp (FP32 units, one row per invocation: where no tiling of
// the former fits, or PSK_FP32_BASELINE=rows) or,
// for 16-bit storage where the device has cooperative matrices (or PSK_COOPMAT_EMULATION is set),
// attention_flash_coopmat.comp (FlashAttention-2 style, where the operand type is the storage type)
// or attention_tiled_coopmat.comp (bfloat16 data on float16-only backends, PSK_COOPMAT_BASELINE=tiled);
// one dispatch per chunk of keys.
#pragma once

#include <optional>
#include <string>

#include "forward/forward_kind.hpp"
#include "forward/tuning_table.hpp"
#include "kernels/kernel_dispatch.hpp"

namespace psk {

/** Keys one dispatch of the baselines' FP32 kernels covers (llvmpipe's per-invocation loop limit). */
constexpr uint32_t kBaselineKeysPerDispatch = 8192;

/**
 * PSK_FP32_BASELINE: flash (default, unset or empty: the FlashAttention-2 FP32 kernel wherever a
 * tiling fits, and softmax state passing past position 0, which runs on it) or rows (the one-row
 * kernel always, for side-by-side timings; softmax state passing past position 0 is then
 * unsupported). Throws INVALID_ARGUMENT on any other value.
 */
bool flashFp32Requested();

/** Tiling of attention_tiled.comp or attention_tiled_coopmat.comp (the kernel's constants) and the dispatch limits. */
struct TiledAttentionPlan {
    KernelChoice kernel;    // AttentionTiled, AttentionFlashFp32, AttentionFlashCoopMat or AttentionTiledCoopMat
    uint32_t rows = 64;     // query rows per workgroup
    uint32_t maxGroupsX = 65535;
    // Keys one dispatch covers; longer sequences chain dispatches through a per-row state. Bounds
    // each invocation's loop iterations (see the llvmpipe note in attention_tiled.comp).
    uint32_t keysPerDispatch = kBaselineKeysPerDispatch;
    bool faultInjected = false;  // PSK_COOPMAT_FAULT=baselines on the cooperative kernel (tests only)
    bool poisonWorkspace = false;  // the key-chunk state filled with NaN first (forward/workspace.hpp)
};

/** `tuning`: a per-device table whose baselines.tile entries pick the FlashAttention-2 kernel's tiling. */
TiledAttentionPlan planTiledAttention(const AttentionConfig& config, const DeviceCaps& caps, const TuningTable* tuning = nullptr);

/** Shared-memory bytes of attention_tiled_coopmat.comp with these constants (4-byte operands when emulated). */
uint32_t attentionTiledCoopMatSharedBytes(const kernel::AttentionTiledCoopMatSpec& spec, bool emulated);
/** Loop iterations per invocation and key tile of its emulated backend (llvmpipe's budget). */
uint32_t attentionTiledCoopMatEmulatedIterationsPerKeyTile(const kernel::AttentionTiledCoopMatSpec& spec, uint32_t subgroupSize);
/** ... and once per dispatch (row state in, query maxima, output or state out). */
uint32_t attentionTiledCoopMatEmulatedIterationsPerDispatch(const kernel::AttentionTiledCoopMatSpec& spec, uint32_t subgroupSize);

/** Shared-memory bytes of attention_flash_coopmat.comp with these constants (4-byte operands when emulated). */
uint32_t attentionFlashCoopMatSharedBytes(const kernel::AttentionFlashCoopMatSpec& spec, bool emulated);
/** Loop iterations per invocation and key tile of its emulated backend (llvmpipe's budget). */
uint32_t attentionFlashCoopMatEmulatedIterationsPerKeyTile(const kernel::AttentionFlashCoopMatSpec& spec);
/** ... and once per dispatch (shared memory poisoned, Q staged, row state in, output or state out). */
uint32_t attentionFlashCoopMatEmulatedIterationsPerDispatch(const kernel::AttentionFlashCoopMatSpec& spec);

/** Shared-memory bytes of attention_flash_fp32.comp with these constants. */
uint32_t attentionFlashFp32SharedBytes(const kernel::AttentionFlashFp32Spec& spec);
/** Entries of its tiling table (baselines.fp32_tile). */
uint32_t attentionFlashFp32Tilings();
/**
 * The model's tiling of attention_flash_fp32.comp for this shape and device (the first entry of its
 * table that fits: shared memory, invocations, register tiles); nullopt when none does, with each
 * entry's reason appended to *misfits. *entry gets the chosen entry's index.
 */
std::optional<kernel::AttentionFlashFp32Spec> modelFlashFp32Spec(const AttentionConfig& config, const DeviceCaps& caps,
                                                                  uint32_t* entry = nullptr, std::string* misfits = nullptr);
/**
 * The tiling a device's table measured best for this shape class (baselines.fp32_tile), where the
 * entry names a tiling that fits; nullopt without a table, an entry or a fit. *entry gets its
 * index; *note the plan's words for it ("; baselines.fp32_tile=E from ...", or why it was ignored).
 */
std::optional<kernel::AttentionFlashFp32Spec> tunedFlashFp32Spec(const AttentionConfig& config, const DeviceCaps& caps,
                                                                  const TuningTable* tuning, uint32_t* entry = nullptr,
                                                                  std::string* note = nullptr);
/** Its tiling for a few query rows (8 per workgroup), where it fits; nullopt elsewhere. */
std::optional<kernel::AttentionFlashFp32Spec> shortBlockFlashFp32Spec(const AttentionConfig& config, const DeviceCaps& caps);

/** Number of key chunks (dispatches) for a sequence of `tokens`. */
uint32_t tiledKeyChunks(const TiledAttentionPlan& plan, uint32_t tokens);
/** Workspace of a call: one region, the per-row state, when there is more than one key chunk. */
WorkspaceLayout tiledWorkspaceLayout(const TiledAttentionPlan& plan, const AttentionConfig& config, const DeviceCaps& caps,
                                     const ForwardGeometry& geometry);

/** Softmax or exact polynomial attention: one dispatch per key chunk. */
void recordTiledAttention(Recorder& recorder, const KernelPipeline& pipeline, const TiledAttentionPlan& plan,
                          const AttentionConfig& config, const BoundTensors& tensors);

class TiledForward final : public ForwardKind {
public:
    /** `tuning`: the table the plan reads (null: the model's choices). */
    TiledForward(PskContext_T* context, const AttentionConfig& config, const TuningTable* tuning);
    WorkspaceLayout workspaceLayout(const ForwardGeometry& geometry) const override;
    void record(Recorder& recorder, const BoundTensors& tensors) const override;
    std::vector<KernelChoice> kernels() const override { return {plan_.kernel}; }
    std::vector<std::string> planNotes() const override {
        if (!plan_.poisonWorkspace) return {};
        return {"key-chunk state filled with NaN before the kernels (PSK_POISON_WORKSPACE=1, a diagnostic)"};
    }

private:
    PskContext_T* context_;
    const AttentionConfig& config_;
    TiledAttentionPlan plan_;
    KernelPipeline pipeline_;
};

}  // namespace psk
