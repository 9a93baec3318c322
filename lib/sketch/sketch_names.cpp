// The names and shapes of the sketch tensors (see sketch_names.hpp).
#include "sketch/sketch_names.hpp"

#include "util/error.hpp"

namespace psk {

bool isSupportedSketchDegree(uint32_t degree) { return degree == 2 || degree == 4 || degree == 8; }

std::string randomSketchTensorName(uint32_t level, uint32_t index, bool b) {
    return cat("g", level, "_", index, b ? "b" : "a");
}

std::vector<SketchTensorSpec> randomSketchTensorSpecs(uint32_t degree, uint32_t headDim, uint32_t sketchSize) {
    if (!isSupportedSketchDegree(degree))
        fail(PSK_ERROR_INVALID_ARGUMENT, "random sketch: degree ", degree, " is not supported (2, 4 or 8)");
    std::vector<SketchTensorSpec> specs;
    const uint32_t m = degree / 2;
    for (uint32_t level = 1; (m >> level) != 0; ++level) {
        for (uint32_t i = 0; i < (m >> level); ++i) {
            for (bool b : {false, true}) {
                specs.push_back({randomSketchTensorName(level, i, b), level, i, b, level == 1 ? headDim : sketchSize,
                                 sketchSize});
            }
        }
    }
    return specs;
}

std::string learnedSketchTensorName(uint32_t branch, uint32_t level, const char* part) {
    return cat("f", branch + 1, ".", level, ".", part);
}

}  // namespace psk
