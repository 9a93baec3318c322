#include "forward/attention_config.hpp"

#include "sketch/sketch_files.hpp"
#include "sketch/sketch_pack.hpp"
#include "sketch/sketch_weights.hpp"
#include "util/error.hpp"

namespace psk {

ResolvedAttention resolveAttention(const PskAttentionCreateInfo& info, const DeviceCaps& caps) {
    ResolvedAttention r;
    r.config = makeAttentionConfig(info, caps);
    if (r.config.kind != PSK_ATTENTION_KIND_POLYSKETCH) return r;
    AttentionConfig& c = r.config;
    // Under a tensor prefix a model file holds each layer's sketch and q/k LayerNorm beside the
    // layer's other weights: each loader is given the names of its own kind.
    const std::string prefix = info.tensorPrefix ? info.tensorPrefix : "";
    auto read = [&](const char* path, bool qkNorm) {
        SafeTensors file = readSafeTensors(path, prefix);
        if (!prefix.empty()) keepLayerPart(file, qkNorm);
        return file;
    };
    QkNormWeights norm;
    if (info.qkNormFile) {
        norm = loadQkNorm(read(info.qkNormFile, true), c.headDim);
        if (norm.hasLocal() && !(c.causal && c.localExact))
            fail(PSK_ERROR_INVALID_ARGUMENT, "qkNormFile holds local_ln.scale / local_ln.bias, which only a CAUSAL + "
                 "LOCAL_EXACT attention uses");
    }
    const QkNormWeights* normPtr = info.qkNormFile ? &norm : nullptr;
    switch (info.sketchSource) {
        case PSK_SKETCH_SOURCE_SEED: {
            RandomSketchWeights w = generateRandomSketch(info.seed, c.degree, c.headDim, c.sketchSize);
            w.referenceScaling = c.referenceScaling;
            r.sketch = std::make_shared<const PackedSketch>(packRandomSketch(w, normPtr));
            break;
        }
        case PSK_SKETCH_SOURCE_FILE: {
            // sketchSize 0 takes the file's; the file's scaling metadata says how its G were meant.
            const RandomSketchWeights w = loadRandomSketch(read(info.sketchFile, false), c.headDim, info.sketchSize, c.degree);
            if (c.referenceScaling && !w.referenceScaling)
                fail(PSK_ERROR_INVALID_ARGUMENT, "REFERENCE_SCALING is set but the sketch file says scaling \"unbiased\"");
            c.referenceScaling = w.referenceScaling;
            c.sketchSize = w.sketchSize ? w.sketchSize : c.sketchSize;
            r.sketch = std::make_shared<const PackedSketch>(packRandomSketch(w, normPtr));
            break;
        }
        case PSK_SKETCH_SOURCE_LEARNED_FILE: {
            if (c.degree != 4)
                fail(PSK_ERROR_INVALID_ARGUMENT, "a learned sketch has degree 4 (degree ", c.degree, " was requested)");
            if (c.referenceScaling)
                fail(PSK_ERROR_INVALID_ARGUMENT, "REFERENCE_SCALING applies to random sketches, not to a learned one");
            const LearnedSketchWeights w = loadLearnedSketch(read(info.sketchFile, false), c.headDim, info.sketchSize);
            c.sketchSize = w.sketchSize;
            if (c.sketchSize < 8 || c.sketchSize > 128)
                fail(PSK_ERROR_BAD_FILE, "learned sketch file: sketch_size ", c.sketchSize, " is outside 8 to 128");
            r.sketch = std::make_shared<const PackedSketch>(packLearnedSketch(w, normPtr));
            break;
        }
        default:
            fail(PSK_ERROR_INVALID_ARGUMENT, "sketchSource out of range");
    }
    return r;
}

}  // namespace psk
