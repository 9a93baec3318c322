// Host-side sketch weights, all of them: kept as one include for the callers that use several parts
// (the forward and decode setup, the tests). Each part lives in its own header:
//   sketch/sketch_names.hpp   degrees, tensor names and shapes, the weight structures
//   sketch/philox.hpp         the portable seeded generator (Philox + Box-Muller), generateRandomSketch
//   io/safetensors.hpp        reading and writing .safetensors files
//   sketch/sketch_files.hpp   the loaders that validate random/learned sketch and q/k norm files
#pragma once

#include "io/safetensors.hpp"
#include "sketch/philox.hpp"
#include "sketch/sketch_files.hpp"
#include "sketch/sketch_names.hpp"
