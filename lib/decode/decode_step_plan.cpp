// planDecodeStep (decode_step_plan.hpp): workgroups of a polysketch decode step.
#include "decode/decode_step_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace psk {

namespace {

uint32_t ceilDiv32(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

DecodeStepSlices fromSlices(const DecodeStepShape& shape, uint32_t featureSlice, uint32_t rowSlice) {
    DecodeStepSlices s;
    s.featureSlice = std::max<uint32_t>(1, std::min(featureSlice, shape.features));
    s.featureGroups = ceilDiv32(shape.features, s.featureSlice);
    if (shape.blockRows) {
        s.rowSlice = std::max<uint32_t>(1, std::min(rowSlice, shape.blockRows));
        s.rowGroups = ceilDiv32(shape.blockRows, s.rowSlice);
    }
    return s;
}

}  // namespace

DecodeStepSlices planDecodeStep(const DecodeStepShape& shape, uint32_t processors, bool cpuDevice) {
    const uint32_t target = processors ? 2 * processors : cpuDevice ? 8 : 256;
    const uint32_t perSlot = std::max<uint32_t>(1, ceilDiv32(target, std::max<uint32_t>(1, shape.slots)));
    const double featureWork = double(shape.features) * (shape.valueDim + 1) * (shape.headRatio + 1);
    const double rowWork = double(shape.blockRows) * (shape.headDim + shape.valueDim + 1) * shape.headRatio;
    uint32_t featureGroups = perSlot, rowGroups = 0;
    if (shape.blockRows) {
        rowGroups = uint32_t(std::lround(perSlot * rowWork / (featureWork + rowWork)));
        rowGroups = std::max<uint32_t>(1, std::min(rowGroups, perSlot > 1 ? perSlot - 1 : 1));
        featureGroups = std::max<uint32_t>(1, perSlot - rowGroups);
    }
    const uint32_t featureSlice = std::max<uint32_t>(16, ceilDiv32(shape.features, featureGroups));
    const uint32_t rowSlice = shape.blockRows ? std::max<uint32_t>(8, ceilDiv32(shape.blockRows, rowGroups)) : 1;
    return fromSlices(shape, featureSlice, rowSlice);
}

bool parseDecodeStepSlices(const char* text, const DecodeStepShape& shape, DecodeStepSlices& slices) {
    unsigned f = 0, r = 0;
    char tail = 0;
    if (!text || std::sscanf(text, "%u,%u%c", &f, &r, &tail) != 2 || !f || !r) return false;
    slices = fromSlices(shape, f, r);
    return true;
}

}  // namespace psk
