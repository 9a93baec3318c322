// The start-up self-test of the cooperative-matrix kernels. A cooperative kernel that a driver
// miscompiles returns garbage with no error (the first NVIDIA run: infinities from the KHR feature
// map, while its emulation passed everywhere), so before an attention first uses one on a GPU,
// the same configuration runs a small known-answer case twice, with that one stage cooperative
// and with every stage generic, and the two outputs are compared. On a mismatch, or a non-finite
// value the generic kernel does not produce, the stage's kernel is disabled for that device and
// driver (for this attention and every later one in the process), a message goes through the
// context's callback, and the attention is planned again without it: the user gets the generic
// kernel's correct output. Verdicts are cached per device (vendor, device id, pipeline-cache UUID,
// driver version) and kernel; `psk info` lists them (coopSelfTestVerdicts).
//
// PSK_COOPMAT_SELFTEST (forward/coopmat_switches.hpp): 1 (default) tests hardware kernels only,
// force also the emulated backend (tests of this file), 0 turns it off (to measure raw kernels).
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "forward/forward_kind.hpp"

struct PskContext_T;

namespace psk {

struct AttentionConfig;
struct DeviceCaps;

/** What the probes of one kernel found. */
struct CoopSelfTestVerdict {
    std::string device;   // "<name> (driver <version>)"
    std::string kernel;   // the variant and its specialization constants
    uint32_t stage = 0;   // CoopStageBit
    bool passed = false;
    std::string detail;   // "max error 3.1e-4 (limit 1e-2)", "12345 non-finite values", ...
};

/**
 * Runs the self-test for every cooperative kernel in `kernels` that has no verdict yet for this
 * device (or whose kernel is disabled already) and returns the CoopStageBit of the stages that must
 * not use their cooperative kernel. `info` / `config` are the attention's; probes are attentions of
 * the same configuration with one stage cooperative, and with none.
 */
uint32_t coopSelfTest(PskContext_T* context, const PskAttentionCreateInfo& info, const AttentionConfig& config,
                      const std::vector<KernelChoice>& kernels);

/** The verdicts reached so far on this device in this process, oldest first. */
std::vector<CoopSelfTestVerdict> coopSelfTestVerdicts(const DeviceCaps& caps);

/** Test hook: forgets every verdict (a test that injects a fault starts clean). */
void clearCoopSelfTestVerdicts();

}  // namespace psk
