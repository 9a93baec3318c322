#include "forward/attention_config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "util/error.hpp"

namespace psk {

AttentionConfig makeAttentionConfig(const PskAttentionCreateInfo& info, const DeviceCaps& caps) {
    AttentionConfig c;
    // Enum fields are read as the integers C stored (enumValue), checked, then converted.
    const int32_t kind = enumValue(info.kind);
    if (kind < PSK_ATTENTION_KIND_SOFTMAX || kind > PSK_ATTENTION_KIND_POLYSKETCH)
        fail(PSK_ERROR_INVALID_ARGUMENT, "kind must be PSK_ATTENTION_KIND_SOFTMAX, _POLYNOMIAL or _POLYSKETCH (got ", kind, ")");
    c.kind = static_cast<PskAttentionKind>(kind);
    const uint32_t knownFlags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT | PSK_ATTENTION_REFERENCE_SCALING_BIT;
    if (info.flags & ~knownFlags) fail(PSK_ERROR_INVALID_ARGUMENT, "unknown bits in flags: 0x", std::hex, info.flags & ~knownFlags);
    c.causal = info.flags & PSK_ATTENTION_CAUSAL_BIT;
    c.localExact = info.flags & PSK_ATTENTION_LOCAL_EXACT_BIT;
    c.referenceScaling = info.flags & PSK_ATTENTION_REFERENCE_SCALING_BIT;
    if ((c.localExact || c.referenceScaling) && c.kind != PSK_ATTENTION_KIND_POLYSKETCH)
        fail(PSK_ERROR_INVALID_ARGUMENT, "LOCAL_EXACT and REFERENCE_SCALING apply only to PSK_ATTENTION_KIND_POLYSKETCH");
    if (c.localExact && !c.causal)
        fail(PSK_ERROR_INVALID_ARGUMENT, "LOCAL_EXACT needs CAUSAL: full attention has no local blocks (docs/MATH.md section 6)");

    if (info.headDim < 16 || info.headDim > 256) fail(PSK_ERROR_INVALID_SHAPE, "headDim must be 16 to 256 (got ", info.headDim, ")");
    c.headDim = info.headDim;
    c.valueDim = info.valueDim ? info.valueDim : info.headDim;
    if (c.valueDim > 256) fail(PSK_ERROR_INVALID_SHAPE, "valueDim must be 1 to 256 (got ", c.valueDim, ")");
    c.numQueryHeads = info.numQueryHeads ? info.numQueryHeads : 1;
    c.numKeyValueHeads = info.numKeyValueHeads ? info.numKeyValueHeads : c.numQueryHeads;
    if (c.numQueryHeads % c.numKeyValueHeads != 0)
        fail(PSK_ERROR_INVALID_SHAPE, "numQueryHeads (", c.numQueryHeads, ") must be a multiple of numKeyValueHeads (",
             c.numKeyValueHeads, ")");
    if (c.numQueryHeads > caps.limits().maxComputeWorkGroupCount[1])
        fail(PSK_ERROR_TOO_LARGE, "numQueryHeads ", c.numQueryHeads, " exceeds the device's dispatch limit ",
             caps.limits().maxComputeWorkGroupCount[1]);

    if (c.kind != PSK_ATTENTION_KIND_SOFTMAX) {
        c.degree = info.degree ? info.degree : 4;
        if (c.degree != 2 && c.degree != 4 && c.degree != 8)
            fail(PSK_ERROR_INVALID_ARGUMENT, "degree must be 2, 4 or 8 (got ", info.degree, ")");
    }
    if (!std::isfinite(info.scale)) fail(PSK_ERROR_INVALID_ARGUMENT, "scale must be finite");
    if (info.scale != 0.0f)
        c.scale = info.scale;
    else
        c.scale = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 1.0f / std::sqrt(static_cast<float>(c.headDim)) : 1.0f;

    const int32_t dataType = enumValue(info.dataType);
    if (dataType < PSK_DATA_TYPE_FLOAT32 || dataType > PSK_DATA_TYPE_BFLOAT16)
        fail(PSK_ERROR_INVALID_ARGUMENT, "dataType out of range (", dataType, ")");
    c.dataType = static_cast<PskDataType>(dataType);
    if (c.dataType != PSK_DATA_TYPE_FLOAT32 && !caps.storageBuffer16BitAccess)
        fail(PSK_ERROR_UNSUPPORTED, "this device lacks storageBuffer16BitAccess, needed for float16/bfloat16 storage");
    const int32_t layout = enumValue(info.layout);
    if (layout != PSK_LAYOUT_BHND && layout != PSK_LAYOUT_BNHD) fail(PSK_ERROR_INVALID_ARGUMENT, "layout out of range (", layout, ")");
    c.layout = static_cast<PskLayout>(layout);

    if (c.kind == PSK_ATTENTION_KIND_POLYSKETCH) {
        c.sketchSize = info.sketchSize ? info.sketchSize : 32;
        if (c.sketchSize < 8 || c.sketchSize > 128)
            fail(PSK_ERROR_INVALID_ARGUMENT, "sketchSize must be 8 to 128 (got ", c.sketchSize, ")");
        c.blockSize = info.blockSize ? info.blockSize : 256;
        if (c.blockSize < 16 || c.blockSize > 1024)
            fail(PSK_ERROR_INVALID_ARGUMENT, "blockSize must be 16 to 1024 (got ", c.blockSize, ")");
        const int32_t sketchSource = enumValue(info.sketchSource);
        if (sketchSource < PSK_SKETCH_SOURCE_SEED || sketchSource > PSK_SKETCH_SOURCE_LEARNED_FILE)
            fail(PSK_ERROR_INVALID_ARGUMENT, "sketchSource out of range (", sketchSource, ")");
        if (sketchSource != PSK_SKETCH_SOURCE_SEED && !info.sketchFile)
            fail(PSK_ERROR_INVALID_ARGUMENT, "sketchFile must not be NULL with PSK_SKETCH_SOURCE_FILE or _LEARNED_FILE");
        if (info.tensorPrefix && std::strlen(info.tensorPrefix) > 255)
            fail(PSK_ERROR_INVALID_ARGUMENT, "tensorPrefix is longer than 255 bytes");
    }
    return c;
}

PskTensorStrides defaultStrides(PskLayout layout, uint32_t heads, uint32_t tokens, uint32_t dim) {
    const uint64_t H = heads, n = tokens, d = dim;
    if (layout == PSK_LAYOUT_BNHD) return {n * H * d, d, H * d};
    return {H * n * d, n * d, d};
}

uint64_t TensorGeometry::extentElements() const {
    if (!batch || !heads || !tokens || !dim) return 0;
    return (batch - 1) * strides.batch + (heads - 1) * strides.head + (tokens - 1) * strides.token + dim;
}

bool TensorGeometry::nonOverlapping() const {
    // Sort the dimensions by stride; each must step past everything the smaller ones span.
    struct Dim {
        uint64_t stride, size;
    };
    std::array<Dim, 4> dims{{{1, dim}, {strides.token, tokens}, {strides.head, heads}, {strides.batch, batch}}};
    std::sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
    uint64_t span = 0;  // elements covered by the smaller dimensions, minus one
    for (const Dim& d : dims) {
        if (d.size <= 1) continue;
        if (d.stride <= span) return false;
        span += (d.size - 1) * d.stride;
    }
    return true;
}

namespace {

TensorGeometry makeTensor(const char* name, uint32_t batch, uint32_t heads, uint32_t tokens, uint32_t dim,
                          PskLayout layout, const PskTensorStrides* strides, size_t elemBytes, const DeviceCaps& caps) {
    TensorGeometry t{batch, heads, tokens, dim, strides ? *strides : defaultStrides(layout, heads, tokens, dim)};
    if (strides && (!strides->batch || !strides->head || !strides->token))
        fail(PSK_ERROR_INVALID_SHAPE, name, " strides must all be non-zero");
    // Overflow-safe extent: every factor is < 2^32, strides < 2^63 checked via division.
    const uint64_t limit = uint64_t(1) << 32;
    const uint64_t parts[3][2] = {{batch - 1ull, t.strides.batch}, {heads - 1ull, t.strides.head}, {tokens - 1ull, t.strides.token}};
    for (const auto& p : parts)
        if (p[0] && p[1] >= limit / p[0]) fail(PSK_ERROR_TOO_LARGE, name, " spans more than 2^32 elements");
    const uint64_t extent = t.extentElements();
    if (extent >= limit) fail(PSK_ERROR_TOO_LARGE, name, " spans ", extent, " elements; the limit is 2^32");
    if (extent * elemBytes > caps.limits().maxStorageBufferRange)
        fail(PSK_ERROR_TOO_LARGE, name, " needs ", extent * elemBytes, " bytes, more than the device's maxStorageBufferRange (",
             caps.limits().maxStorageBufferRange, "); split the batch across calls");
    return t;
}

}  // namespace

ForwardGeometry makeForwardGeometry(const AttentionConfig& c, const DeviceCaps& caps, uint32_t batch, uint32_t tokens,
                                    const PskTensorStrides* qs, const PskTensorStrides* ks, const PskTensorStrides* vs,
                                    const PskTensorStrides* os) {
    ForwardGeometry g;
    g.batch = batch ? batch : 1;
    g.tokens = tokens;
    if (tokens == 0) fail(PSK_ERROR_INVALID_SHAPE, "seqLen must be at least 1");
    if (g.batch > caps.limits().maxComputeWorkGroupCount[2])
        fail(PSK_ERROR_TOO_LARGE, "batchSize ", g.batch, " exceeds the device's dispatch limit ", caps.limits().maxComputeWorkGroupCount[2]);
    if (tokens > (1u << 30)) fail(PSK_ERROR_TOO_LARGE, "seqLen ", tokens, " exceeds 2^30");
    const size_t eb = elementBytes(c.dataType);
    g.q = makeTensor("q", g.batch, c.numQueryHeads, tokens, c.headDim, c.layout, qs, eb, caps);
    g.k = makeTensor("k", g.batch, c.numKeyValueHeads, tokens, c.headDim, c.layout, ks, eb, caps);
    g.v = makeTensor("v", g.batch, c.numKeyValueHeads, tokens, c.valueDim, c.layout, vs, eb, caps);
    g.out = makeTensor("out", g.batch, c.numQueryHeads, tokens, c.valueDim, c.layout, os, eb, caps);
    if (!g.out.nonOverlapping()) fail(PSK_ERROR_INVALID_SHAPE, "out strides make output elements overlap");
    return g;
}

}  // namespace psk
