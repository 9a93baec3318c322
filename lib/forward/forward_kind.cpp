#include "forward/forward_kind.hpp"

#include "forward/polysketch_forward.hpp"
#include "forward/tiled_forward.hpp"

namespace psk {

std::unique_ptr<ForwardKind> createForwardKind(PskContext_T* context, const AttentionConfig& config,
                                               const std::shared_ptr<const PackedSketch>& sketch, const TuningSelection& tuning) {
    if (config.kind == PSK_ATTENTION_KIND_POLYSKETCH) return std::make_unique<PolysketchForward>(context, config, sketch, tuning);
    return std::make_unique<TiledForward>(context, config, tuning.table.get());
}

}  // namespace psk
