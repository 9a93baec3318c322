// The sketch-file loaders and their inverses (see sketch_files.hpp): metadata, tensor presence,
// shapes and finiteness checked, every defect a PSK_ERROR_BAD_FILE naming the file kind.
#include "sketch/sketch_files.hpp"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "util/error.hpp"

namespace psk {

namespace {

const std::string& requireMetadata(const SafeTensors& file, const char* key, const char* what) {
    const auto it = file.metadata.find(key);
    if (it == file.metadata.end())
        fail(PSK_ERROR_BAD_FILE, what, " file: __metadata__ lacks \"", key, "\"");
    return it->second;
}

uint32_t metadataUint(const SafeTensors& file, const char* key, const char* what) {
    const std::string& text = requireMetadata(file, key, what);
    uint64_t value = 0;
    bool ok = !text.empty() && text.size() <= 10;
    for (const char c : text) {
        if (c < '0' || c > '9') {
            ok = false;
            break;
        }
        value = value * 10 + uint64_t(c - '0');
    }
    if (!ok || value > std::numeric_limits<uint32_t>::max())
        fail(PSK_ERROR_BAD_FILE, what, " file: __metadata__ \"", key, "\" is \"", text,
             "\", not a non-negative integer");
    return uint32_t(value);
}

bool metadataScaling(const std::string& text, const char* what) {
    if (text == "unbiased") return false;
    if (text == "reference") return true;
    fail(PSK_ERROR_BAD_FILE, what, " file: __metadata__ \"scaling\" is \"", text,
         "\", expected \"unbiased\" or \"reference\"");
}

void requireKind(const SafeTensors& file, const char* expected, const char* what) {
    const std::string& kind = requireMetadata(file, "kind", what);
    if (kind != expected)
        fail(PSK_ERROR_BAD_FILE, what, " file: __metadata__ \"kind\" is \"", kind, "\", expected \"", expected,
             "\"");
}

/** Checks presence, shape and finiteness of one tensor; returns its data. */
const std::vector<float>& requireTensor(const SafeTensors& file, const std::string& name,
                                        const std::vector<uint32_t>& shape, const char* shapeMeaning,
                                        const char* what) {
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end()) fail(PSK_ERROR_BAD_FILE, what, " file: missing tensor \"", name, "\"");
    const Tensor& tensor = it->second;
    if (tensor.shape != shape)
        fail(PSK_ERROR_BAD_FILE, what, " file: tensor \"", name, "\" has shape ", shapeString(tensor.shape),
             ", expected ", shapeString(shape), " (", shapeMeaning, ")");
    for (size_t i = 0; i < tensor.data.size(); ++i) {
        if (!std::isfinite(tensor.data[i]))
            fail(PSK_ERROR_BAD_FILE, what, " file: tensor \"", name, "\" holds a non-finite value at element ", i);
    }
    return tensor.data;
}

void rejectExtraTensors(const SafeTensors& file, const std::set<std::string>& expected, const std::string& what) {
    for (const auto& entry : file.tensors) {
        if (expected.count(entry.first) == 0)
            fail(PSK_ERROR_BAD_FILE, what, " file: unexpected tensor \"", entry.first, "\"");
    }
}

}  // namespace

RandomSketchWeights loadRandomSketch(const SafeTensors& file, uint32_t h, uint32_t r, uint32_t degree) {
    const char* what = "random sketch";
    if (h == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "loadRandomSketch: the head dim must be non-zero");
    requireKind(file, "random", what);
    const uint32_t fileDegree = metadataUint(file, "degree", what);
    if (!isSupportedSketchDegree(fileDegree))
        fail(PSK_ERROR_BAD_FILE, what, " file: degree ", fileDegree, " is not supported (2, 4 or 8)");
    if (degree != 0 && degree != fileDegree)
        fail(PSK_ERROR_BAD_FILE, what, " file: degree ", fileDegree, ", but degree ", degree, " was requested");
    const uint32_t fileR = metadataUint(file, "sketch_size", what);
    if (fileR == 0) fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size is 0");
    if (fileR > (1u << 24)) fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size ", fileR, " is implausibly large");
    if (r != 0 && fileDegree != 2 && r != fileR)
        fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size ", fileR, ", but sketch size ", r, " was requested");
    const bool referenceScaling = metadataScaling(requireMetadata(file, "scaling", what), what);

    RandomSketchWeights weights;
    weights.degree = fileDegree;
    weights.headDim = h;
    weights.sketchSize = (fileDegree == 2 && r != 0) ? r : fileR;
    weights.referenceScaling = referenceScaling;
    std::set<std::string> expected;
    for (const SketchTensorSpec& spec : randomSketchTensorSpecs(fileDegree, h, fileR)) {
        expected.insert(spec.name);
        weights.g[spec.name] =
            requireTensor(file, spec.name, {spec.rows, spec.cols}, spec.level == 1 ? "h x r" : "r x r", what);
    }
    rejectExtraTensors(file, expected, cat("degree-", fileDegree, " ", what));
    return weights;
}

LearnedSketchWeights loadLearnedSketch(const SafeTensors& file, uint32_t h, uint32_t r) {
    const char* what = "learned sketch";
    if (h == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "loadLearnedSketch: the head dim must be non-zero");
    requireKind(file, "learned", what);
    const uint32_t fileDegree = metadataUint(file, "degree", what);
    if (fileDegree != 4)
        fail(PSK_ERROR_BAD_FILE, what, " file: degree ", fileDegree, "; a learned sketch has degree 4");
    const uint32_t fileR = metadataUint(file, "sketch_size", what);
    if (fileR == 0) fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size is 0");
    if (fileR > (1u << 24)) fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size ", fileR, " is implausibly large");
    if (r != 0 && r != fileR)
        fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size ", fileR, ", but sketch size ", r, " was requested");
    const auto scaling = file.metadata.find("scaling");
    if (scaling != file.metadata.end()) (void)metadataScaling(scaling->second, what);

    LearnedSketchWeights weights;
    weights.degree = 4;
    weights.headDim = h;
    weights.sketchSize = fileR;
    std::set<std::string> expected;
    for (uint32_t branch = 0; branch < 2; ++branch) {
        for (uint32_t level = 0; level < 2; ++level) {
            LearnedFeedForward& ff = weights.ff[branch][level];
            const uint32_t in = level == 0 ? h : fileR;
            const char* inName = level == 0 ? "h" : "r";
            ff.inDim = in;
            const std::string names[4] = {learnedSketchTensorName(branch, level, kLearnedSketchParts[0]),
                                          learnedSketchTensorName(branch, level, kLearnedSketchParts[1]),
                                          learnedSketchTensorName(branch, level, kLearnedSketchParts[2]),
                                          learnedSketchTensorName(branch, level, kLearnedSketchParts[3])};
            for (const std::string& name : names) expected.insert(name);
            ff.lnScale = requireTensor(file, names[0], {in}, inName, what);
            ff.lnBias = requireTensor(file, names[1], {in}, inName, what);
            ff.dense1 = requireTensor(file, names[2], {in, 8 * fileR}, level == 0 ? "h x 8r" : "r x 8r", what);
            ff.dense2 = requireTensor(file, names[3], {8 * fileR, fileR}, "8r x r", what);
        }
    }
    rejectExtraTensors(file, expected, what);
    return weights;
}

bool isQkNormTensorName(const std::string& name) {
    return name == "ln.scale" || name == "ln.bias" || name == "local_ln.scale" || name == "local_ln.bias";
}

bool isSketchTensorName(const std::string& name) {
    // Learned: f1.* / f2.* (the branches); random: g{level}_{index}{a|b}.
    if (name.rfind("f1.", 0) == 0 || name.rfind("f2.", 0) == 0) return true;
    size_t i = 1;
    auto digits = [&] {
        const size_t from = i;
        while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
        return i > from;
    };
    if (name.empty() || name[0] != 'g' || !digits() || i >= name.size() || name[i++] != '_' || !digits()) return false;
    return i + 1 == name.size() && (name[i] == 'a' || name[i] == 'b');
}

void keepLayerPart(SafeTensors& file, bool qkNorm) {
    for (auto it = file.tensors.begin(); it != file.tensors.end();) {
        const bool mine = qkNorm ? isQkNormTensorName(it->first) : isSketchTensorName(it->first);
        it = mine ? std::next(it) : file.tensors.erase(it);
    }
}

QkNormWeights loadQkNorm(const SafeTensors& file, uint32_t h) {
    const char* what = "q/k LayerNorm";
    if (h == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "loadQkNorm: the head dim must be non-zero");
    QkNormWeights weights;
    weights.scale = requireTensor(file, "ln.scale", {h}, "h", what);
    weights.bias = requireTensor(file, "ln.bias", {h}, "h", what);
    std::set<std::string> expected{"ln.scale", "ln.bias"};
    const bool localScale = file.tensors.count("local_ln.scale") != 0;
    const bool localBias = file.tensors.count("local_ln.bias") != 0;
    if (localScale != localBias)
        fail(PSK_ERROR_BAD_FILE, what, " file: \"local_ln.scale\" and \"local_ln.bias\" come as a pair; only \"",
             localScale ? "local_ln.scale" : "local_ln.bias", "\" is present");
    if (localScale) {
        weights.localScale = requireTensor(file, "local_ln.scale", {h}, "h", what);
        weights.localBias = requireTensor(file, "local_ln.bias", {h}, "h", what);
        expected.insert({"local_ln.scale", "local_ln.bias"});
    }
    rejectExtraTensors(file, expected, what);
    return weights;
}

SafeTensors qkNormToSafeTensors(const QkNormWeights& weights) {
    SafeTensors file;
    const uint32_t h = static_cast<uint32_t>(weights.scale.size());
    if (h == 0 || weights.bias.size() != h || weights.localScale.size() != weights.localBias.size() ||
        (weights.hasLocal() && weights.localScale.size() != h))
        fail(PSK_ERROR_INVALID_ARGUMENT, "q/k LayerNorm: scale and bias must have the same non-zero length");
    file.metadata["kind"] = "qk_norm";
    file.tensors["ln.scale"] = Tensor{{h}, weights.scale};
    file.tensors["ln.bias"] = Tensor{{h}, weights.bias};
    if (weights.hasLocal()) {
        file.tensors["local_ln.scale"] = Tensor{{h}, weights.localScale};
        file.tensors["local_ln.bias"] = Tensor{{h}, weights.localBias};
    }
    return file;
}

SafeTensors randomSketchToSafeTensors(const RandomSketchWeights& weights) {
    SafeTensors file;
    file.metadata["kind"] = "random";
    file.metadata["degree"] = cat(weights.degree);
    file.metadata["sketch_size"] = cat(weights.sketchSize);
    file.metadata["scaling"] = weights.referenceScaling ? "reference" : "unbiased";
    for (const SketchTensorSpec& spec : randomSketchTensorSpecs(weights.degree, weights.headDim, weights.sketchSize)) {
        const auto it = weights.g.find(spec.name);
        if (it == weights.g.end() || it->second.size() != size_t(spec.rows) * spec.cols)
            fail(PSK_ERROR_INVALID_ARGUMENT, "random sketch: tensor \"", spec.name, "\" is missing or not ",
                 spec.rows, " x ", spec.cols);
        file.tensors[spec.name] = Tensor{{spec.rows, spec.cols}, it->second};
    }
    return file;
}

SafeTensors learnedSketchToSafeTensors(const LearnedSketchWeights& weights) {
    SafeTensors file;
    const uint32_t r = weights.sketchSize;
    file.metadata["kind"] = "learned";
    file.metadata["degree"] = "4";
    file.metadata["sketch_size"] = cat(r);
    for (uint32_t branch = 0; branch < 2; ++branch) {
        for (uint32_t level = 0; level < 2; ++level) {
            const LearnedFeedForward& ff = weights.ff[branch][level];
            const uint32_t in = level == 0 ? weights.headDim : r;
            const std::pair<std::vector<uint32_t>, const std::vector<float>*> parts[4] = {
                {{in}, &ff.lnScale}, {{in}, &ff.lnBias}, {{in, 8 * r}, &ff.dense1}, {{8 * r, r}, &ff.dense2}};
            for (int p = 0; p < 4; ++p) {
                const std::string name = learnedSketchTensorName(branch, level, kLearnedSketchParts[p]);
                uint64_t elements = 1;
                for (uint32_t d : parts[p].first) elements *= d;
                if (parts[p].second->size() != elements)
                    fail(PSK_ERROR_INVALID_ARGUMENT, "learned sketch: tensor \"", name, "\" should have shape ",
                         shapeString(parts[p].first), " but has ", parts[p].second->size(), " values");
                file.tensors[name] = Tensor{parts[p].first, *parts[p].second};
            }
        }
    }
    return file;
}

}  // namespace psk
