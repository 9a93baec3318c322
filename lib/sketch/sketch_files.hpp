// Sketch files (docs/MATH.md section 8): the loaders that validate a random-sketch, learned-sketch
// or q/k LayerNorm safetensors file against the attention's head dim h and sketch size r, and the
// inverse conversions that give each its file form.
#pragma once

#include <cstdint>
#include <string>

#include "io/safetensors.hpp"
#include "sketch/sketch_names.hpp"

namespace psk {

/**
 * Validates a random-sketch file and returns its weights. Metadata (all required): kind "random",
 * degree "2" | "4" | "8", sketch_size (decimal), scaling "unbiased" | "reference". The tensors
 * must be exactly those of randomSketchTensorSpecs(degree, h, r) (no missing, no extra ones), with
 * finite entries. `r` is the sketch size the caller expects, or 0 to take it from the file; a
 * non-zero `degree` must equal the file's. For degree 2 (no matrices) the file's sketch size is
 * not compared and the result's sketchSize is r when non-zero. Throws PSK_ERROR_BAD_FILE naming
 * the problem; PSK_ERROR_INVALID_ARGUMENT when h is 0.
 */
RandomSketchWeights loadRandomSketch(const SafeTensors& file, uint32_t h, uint32_t r, uint32_t degree = 0);

/**
 * Validates a learned-sketch file: metadata kind "learned", degree "4", sketch_size (scaling, if
 * present, must be "unbiased" or "reference" and is ignored); tensors exactly
 * f{1,2}.{0,1}.ln.scale / .ln.bias ([in]), .dense1 ([in, 8r]), .dense2 ([8r, r]), in = h at
 * level 0 and r at level 1, finite. `r` = 0 takes the sketch size from the file.
 */
LearnedSketchWeights loadLearnedSketch(const SafeTensors& file, uint32_t h, uint32_t r);

/**
 * Validates a qkNormFile: tensors "ln.scale" and "ln.bias" of shape [h], optionally the pair
 * "local_ln.scale" / "local_ln.bias" ([h]), finite, nothing else. Metadata is not required.
 * Throws PSK_ERROR_BAD_FILE naming the problem.
 */
QkNormWeights loadQkNorm(const SafeTensors& file, uint32_t h);

/** The q/k LayerNorm's tensor names: "ln.scale", "ln.bias", "local_ln.scale", "local_ln.bias". */
bool isQkNormTensorName(const std::string& name);

/** A sketch's tensor names: f1.* and f2.* (learned), g{level}_{index}a / b (random). */
bool isSketchTensorName(const std::string& name);

/**
 * Keeps the tensors of one part of a model file's layer (docs/MATH.md section 8): under a tensor
 * prefix the file also holds the layer's other weights (a model's projections), so each loader is
 * given only the names of its kind; the loaders still reject a missing or misshapen one.
 */
void keepLayerPart(SafeTensors& file, bool qkNorm);

/** The file form of q/k LayerNorm parameters: loadQkNorm inverts it. */
SafeTensors qkNormToSafeTensors(const QkNormWeights& weights);

/** The file form of a random sketch (metadata included): loadRandomSketch inverts it. */
SafeTensors randomSketchToSafeTensors(const RandomSketchWeights& weights);

/** The file form of a learned sketch (metadata included): loadLearnedSketch inverts it. */
SafeTensors learnedSketchToSafeTensors(const LearnedSketchWeights& weights);

}  // namespace psk
