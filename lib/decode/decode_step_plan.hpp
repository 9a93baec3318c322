// How a polysketch decode step (decode_output.comp) splits its work into workgroups: per
// (sequence, key/value head) slot, workgroups over slices of the state's features and, in
// local-exact mode, over slices of the unfinished block's rows (docs/DECODING.md, "What a step
// costs"). The slices are specialization constants of the step's pipeline, fixed at the decode
// state's creation.
#pragma once

#include <cstdint>

namespace psk {

struct DecodeStepSlices {
    uint32_t featureSlice = 1;   // features per feature workgroup
    uint32_t rowSlice = 1;       // block rows per row workgroup (1 when there are none)
    uint32_t featureGroups = 1;  // ceil(F / featureSlice)
    uint32_t rowGroups = 0;      // ceil(b / rowSlice) in local-exact mode, else 0
    uint32_t groupsPerSlot() const { return featureGroups + rowGroups; }
};

/** What the heuristic looks at. */
struct DecodeStepShape {
    uint32_t features = 1;    // F
    uint32_t blockRows = 0;   // b in local-exact mode, else 0 (no row workgroups)
    uint32_t slots = 1;       // B Hkv
    uint32_t headRatio = 1;   // Hq / Hkv
    uint32_t headDim = 1;     // h
    uint32_t valueDim = 1;    // dv
};

/**
 * The heuristic: about two workgroups per multiprocessor in all (`processors`: the device's count
 * where the driver reports it, else 0), or, where it does not, 256 on a GPU and 8 on a CPU device
 * (llvmpipe runs workgroups on a few threads; each workgroup pays the step's fixed loads again).
 * A slot's share is split between features and block rows in proportion to their work (a feature
 * costs (dv + 1) (Hq / Hkv + 1) multiply-adds, the token's fold included; a row h + dv + 1 per query
 * head), at least 16 features and 8 rows per workgroup.
 */
DecodeStepSlices planDecodeStep(const DecodeStepShape& shape, uint32_t processors, bool cpuDevice);

/**
 * Explicit slices, for tests of the combine on small shapes: "F,R" (features, rows per
 * workgroup); returns false and leaves `slices` alone when `text` is not of that form.
 */
bool parseDecodeStepSlices(const char* text, const DecodeStepShape& shape, DecodeStepSlices& slices);

}  // namespace psk
