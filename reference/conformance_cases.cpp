#include "reference/conformance_cases.hpp"

#include <cstdio>
#include <sstream>

namespace psk::conformance {

const char* storageName(PskDataType type) {
    return type == PSK_DATA_TYPE_FLOAT32 ? "f32" : type == PSK_DATA_TYPE_FLOAT16 ? "f16" : "bf16";
}

void printError(const std::string& check, PskDataType type, const std::string& implementations, const std::string& name, double error,
                double threshold) {
    std::printf("[ error ] %s %s %s %s: %.3e (threshold %.1e)\n", check.c_str(), storageName(type),
                implementations.empty() ? "-" : implementations.c_str(), name.c_str(), error, threshold);
    std::fflush(stdout);
}

// ---- Softmax and exact polynomial --------------------------------------------------------------

std::string name(const BaselineCase& c) {
    std::ostringstream s;
    s << (c.kind == PSK_ATTENTION_KIND_SOFTMAX ? "softmax" : "poly");
    if (c.kind != PSK_ATTENTION_KIND_SOFTMAX) s << c.degree;
    s << (c.causal ? "_causal" : "_full") << "_" << storageName(c.type) << (c.layout == PSK_LAYOUT_BNHD ? "_bnhd" : "_bhnd") << "_B"
      << c.B << "_Hq" << c.Hq << "_Hkv" << c.Hkv << "_n" << c.n << "_h" << c.h << "_dv" << c.dv;
    if (c.tokenPad) s << "_pad" << c.tokenPad;
    return s.str();
}

std::vector<BaselineCase> baselineSweep() {
    std::vector<BaselineCase> cases;
    // Every kind x storage type x mask on a modest shape with grouped-query heads.
    for (PskAttentionKind kind : {PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_KIND_POLYNOMIAL}) {
        for (uint32_t degree : {2u, 4u, 8u}) {
            if (kind == PSK_ATTENTION_KIND_SOFTMAX && degree != 4) continue;
            for (PskDataType type : {PSK_DATA_TYPE_FLOAT32, PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16}) {
                for (bool causal : {false, true}) {
                    BaselineCase c;
                    c.kind = kind;
                    c.degree = degree;
                    c.type = type;
                    c.causal = causal;
                    c.Hq = 4;
                    c.Hkv = 2;
                    c.n = 77;
                    cases.push_back(c);
                }
            }
        }
    }
    // Shapes: n (1, 7, 64, 300, 1000), head dims, layouts, grouped-query, batches.
    for (PskAttentionKind kind : {PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_KIND_POLYNOMIAL}) {
        for (bool causal : {false, true}) {
            auto add = [&](uint32_t n, uint32_t h, uint32_t dv, uint32_t Hq, uint32_t Hkv, PskLayout layout, uint32_t B = 1,
                           PskDataType type = PSK_DATA_TYPE_FLOAT32) {
                BaselineCase c;
                c.kind = kind;
                c.causal = causal;
                c.n = n;
                c.h = h;
                c.dv = dv;
                c.Hq = Hq;
                c.Hkv = Hkv;
                c.layout = layout;
                c.B = B;
                c.type = type;
                cases.push_back(c);
            };
            for (uint32_t n : {1u, 7u, 64u, 300u}) add(n, 64, 64, 2, 1, PSK_LAYOUT_BHND);
            add(1000, 64, 64, 1, 1, PSK_LAYOUT_BHND);
            add(65, 32, 32, 3, 1, PSK_LAYOUT_BNHD, 2);
            add(129, 128, 128, 2, 2, PSK_LAYOUT_BNHD);
            add(40, 256, 256, 1, 1, PSK_LAYOUT_BHND);
            add(33, 16, 80, 4, 4, PSK_LAYOUT_BHND, 1, PSK_DATA_TYPE_FLOAT16);
            add(70, 48, 24, 6, 2, PSK_LAYOUT_BNHD, 2, PSK_DATA_TYPE_BFLOAT16);
            // Longer than one key chunk (8192 keys): the state carried between dispatches.
            add(8200 + (causal ? 17 : 0), 16, 16, 1, 1, PSK_LAYOUT_BHND);
        }
    }
    BaselineCase padded;
    padded.tokenPad = 3;
    padded.B = 2;
    padded.n = 50;
    padded.dv = 40;
    cases.push_back(padded);
    padded.kind = PSK_ATTENTION_KIND_POLYNOMIAL;
    padded.causal = true;
    padded.type = PSK_DATA_TYPE_FLOAT16;
    cases.push_back(padded);
    return cases;
}

std::vector<BaselineCase> baselineSweep16() {
    std::vector<BaselineCase> cases;
    for (BaselineCase c : baselineSweep()) {
        // The float32 cases of the shape list (the kind x type x mask block has its 16-bit cases).
        if (c.type != PSK_DATA_TYPE_FLOAT32 || c.n > 1000 || (c.n == 77 && c.Hq == 4)) continue;
        c.type = cases.size() % 2 ? PSK_DATA_TYPE_BFLOAT16 : PSK_DATA_TYPE_FLOAT16;
        cases.push_back(c);
    }
    return cases;
}

std::vector<BaselineCase> baselineQuick() {
    // Small head dims (h = dv = 16) but one h = 64 case: on a CPU driver compiling a pipeline costs
    // far more than running it, and each shape is a pipeline.
    std::vector<BaselineCase> cases;
    auto add = [&](PskAttentionKind kind, uint32_t degree, bool causal, PskDataType type, uint32_t n) -> BaselineCase& {
        BaselineCase c;
        c.kind = kind;
        c.degree = degree;
        c.causal = causal;
        c.type = type;
        c.n = n;
        c.Hq = 4;
        c.Hkv = 2;
        c.h = c.dv = 16;
        cases.push_back(c);
        return cases.back();
    };
    {
        BaselineCase& c = add(PSK_ATTENTION_KIND_SOFTMAX, 4, false, PSK_DATA_TYPE_FLOAT32, 77);
        c.h = c.dv = 64;
    }
    add(PSK_ATTENTION_KIND_SOFTMAX, 4, true, PSK_DATA_TYPE_FLOAT32, 1);
    add(PSK_ATTENTION_KIND_SOFTMAX, 4, true, PSK_DATA_TYPE_FLOAT32, 300);  // several key tiles
    {
        BaselineCase& c = add(PSK_ATTENTION_KIND_SOFTMAX, 4, false, PSK_DATA_TYPE_FLOAT16, 33);
        c.layout = PSK_LAYOUT_BNHD;
        c.B = 2;
        c.Hq = 3;
        c.Hkv = 1;
    }
    add(PSK_ATTENTION_KIND_POLYNOMIAL, 4, true, PSK_DATA_TYPE_BFLOAT16, 77);
    {
        BaselineCase& c = add(PSK_ATTENTION_KIND_POLYNOMIAL, 8, false, PSK_DATA_TYPE_FLOAT32, 65);
        c.B = 2;
        c.tokenPad = 3;  // custom strides: a gap after every row
    }
    return cases;
}

// ---- Polysketch forward ------------------------------------------------------------------------

std::string name(const PolysketchCase& c) {
    std::ostringstream s;
    s << (c.source == SketchSource::Learned ? "learned" : c.source == SketchSource::File ? "file" : "seed") << "_p" << c.degree << "_r"
      << c.r << "_b" << c.b << (c.causal ? "_causal" : "_full") << (c.localExact ? "_localexact" : "")
      << (c.referenceScaling ? "_refscale" : "") << (c.qkNorm ? "_ln" : "") << (c.localNorm ? "_localln" : "") << "_"
      << storageName(c.type) << (c.layout == PSK_LAYOUT_BNHD ? "_bnhd" : "_bhnd") << "_B" << c.B << "_Hq" << c.Hq << "_Hkv" << c.Hkv
      << "_n" << c.n << "_h" << c.h << "_dv" << c.dv;
    if (c.tokenPad) s << "_pad" << c.tokenPad;
    return s.str();
}

std::vector<PolysketchCase> polysketchSweep() {
    std::vector<PolysketchCase> cases;
    // n around the block size: 1, b - 1, b, b + 1, 5b + 3; causal and full; local exact on and off.
    for (uint32_t b : {16u, 48u}) {
        for (uint32_t n : {1u, b - 1, b, b + 1, 5 * b + 3}) {
            for (int mode = 0; mode < 3; ++mode) {
                PolysketchCase c;
                c.b = b;
                c.n = n;
                c.causal = mode != 0;
                c.localExact = mode == 2;
                cases.push_back(c);
            }
        }
    }
    // Degrees and sketch sizes (r from 8 to 128; degree 2 is exact and ignores r).
    for (uint32_t degree : {2u, 4u, 8u}) {
        for (uint32_t r : {8u, 32u}) {
            if (degree == 2 && r != 8) continue;
            for (bool localExact : {false, true}) {
                PolysketchCase c;
                c.degree = degree;
                c.r = r;
                c.localExact = localExact;
                c.n = 70;
                cases.push_back(c);
            }
        }
    }
    {
        PolysketchCase c;
        c.r = 128;
        c.h = 16;
        c.dv = 16;
        c.n = 40;
        c.b = 16;
        cases.push_back(c);
        c.degree = 8;
        c.r = 64;
        c.causal = false;
        cases.push_back(c);
    }
    // Sketch sources and scalings.
    for (SketchSource source : {SketchSource::File, SketchSource::Learned}) {
        for (bool localExact : {false, true}) {
            PolysketchCase c;
            c.source = source;
            c.localExact = localExact;
            c.n = 77;
            cases.push_back(c);
        }
    }
    for (uint32_t degree : {4u, 8u}) {
        PolysketchCase c;
        c.degree = degree;
        c.referenceScaling = true;
        c.n = 50;
        cases.push_back(c);
        c.source = SketchSource::File;
        cases.push_back(c);
    }
    // Fused LayerNorm: q/k LN, and the separate local LN.
    for (SketchSource source : {SketchSource::Seed, SketchSource::Learned}) {
        for (int norm = 0; norm < 3; ++norm) {
            PolysketchCase c;
            c.source = source;
            c.qkNorm = true;
            c.localExact = norm >= 1;
            c.localNorm = norm == 2;
            c.n = 45;
            c.b = 16;
            cases.push_back(c);
        }
    }
    {
        PolysketchCase c;
        c.qkNorm = true;
        c.causal = false;
        c.n = 45;
        cases.push_back(c);
    }
    // Grouped-query heads, batches, layouts, custom strides, odd value dims, every storage type.
    for (PskDataType type : {PSK_DATA_TYPE_FLOAT32, PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16}) {
        for (bool localExact : {false, true}) {
            PolysketchCase c;
            c.type = type;
            c.localExact = localExact;
            c.B = 2;
            c.Hq = 4;
            c.Hkv = 2;
            c.n = 53;
            c.layout = PSK_LAYOUT_BNHD;
            cases.push_back(c);
        }
        PolysketchCase full;
        full.type = type;
        full.causal = false;
        full.n = 53;
        full.Hq = 3;
        cases.push_back(full);
    }
    {
        PolysketchCase c;
        c.h = 64;
        c.dv = 40;
        c.n = 130;
        c.b = 64;
        c.tokenPad = 3;
        c.localExact = true;
        cases.push_back(c);
        c.h = 16;
        c.dv = 100;
        c.r = 8;
        c.tokenPad = 0;
        c.localExact = false;
        c.b = 100;
        c.n = 333;
        cases.push_back(c);
    }
    // A learned sketch with grouped-query heads, two sequences, BNHD and both LayerNorms (last, so
    // that polysketchSweep16's float16 / bfloat16 alternation of the cases above stays as it was).
    {
        PolysketchCase c;
        c.source = SketchSource::Learned;
        c.qkNorm = true;
        c.localExact = true;
        c.B = 2;
        c.Hq = 4;
        c.Hkv = 2;
        c.n = 53;
        c.b = 16;
        c.layout = PSK_LAYOUT_BNHD;
        cases.push_back(c);
    }
    // A learned sketch whose r is not a multiple of 4: the generic feature map's products one row
    // per invocation (its tiled products need 4 | r), causal, local exact.
    {
        PolysketchCase c;
        c.source = SketchSource::Learned;
        c.r = 10;
        c.localExact = true;
        c.n = 77;
        c.b = 32;
        cases.push_back(c);
    }
    return cases;
}

std::vector<PolysketchCase> polysketchSweep16() {
    std::vector<PolysketchCase> cases;
    for (PolysketchCase c : polysketchSweep()) {
        if (c.type != PSK_DATA_TYPE_FLOAT32) continue;
        c.type = cases.size() % 2 ? PSK_DATA_TYPE_BFLOAT16 : PSK_DATA_TYPE_FLOAT16;
        cases.push_back(c);
    }
    return cases;
}

std::vector<PolysketchCase> polysketchGpuTilesSweep() {
    std::vector<PolysketchCase> cases;
    auto add = [&](PolysketchCase c) {
        c.type = cases.size() % 2 ? PSK_DATA_TYPE_BFLOAT16 : PSK_DATA_TYPE_FLOAT16;
        cases.push_back(c);
    };
    PolysketchCase base;
    base.h = 16;
    base.dv = 24;
    for (uint32_t n : {1u, 31u, 33u, 163u}) {  // b = 32
        for (int mode = 0; mode < 3; ++mode) {
            PolysketchCase c = base;
            c.n = n;
            c.causal = mode != 0;
            c.localExact = mode == 2;
            add(c);
        }
    }
    {
        PolysketchCase c = base;  // 64-row blocks: several row tiles per block
        c.b = 64;
        c.n = 131;
        c.localExact = true;
        add(c);
    }
    for (uint32_t r : {16u, 32u}) {
        for (SketchSource source : {SketchSource::Seed, SketchSource::Learned}) {
            // A learned r = 32 (256 hidden units) feature map takes over llvmpipe's loop budget.
            if (source == SketchSource::Learned && r != 16) continue;
            for (bool localExact : {false, true}) {
                PolysketchCase c = base;
                c.r = r;
                c.dv = 40;
                c.source = source;
                c.localExact = localExact;
                c.qkNorm = source == SketchSource::Learned;
                c.n = 101;
                add(c);
            }
        }
    }
    for (uint32_t degree : {2u, 8u}) {
        PolysketchCase c = base;
        c.degree = degree;
        c.localExact = true;
        c.n = 70;
        add(c);
    }
    {
        PolysketchCase c = base;
        c.B = 2;
        c.Hq = 4;
        c.Hkv = 2;
        c.n = 53;
        c.layout = PSK_LAYOUT_BNHD;
        c.localExact = true;
        add(c);
        c.source = SketchSource::Learned;
        c.localExact = false;
        add(c);
    }
    return cases;
}

std::vector<PolysketchCase> polysketchGpuTilesSweep32() {
    std::vector<PolysketchCase> cases;
    for (PolysketchCase c : polysketchGpuTilesSweep()) {
        // n around the block, causal (sketched and local exact: the local part is what float32
        // splits further), and the r = 32, dv = 40 local-exact case (three column tiles over two
        // subgroups); each other shape would cost the emulated kernels' compile again (~30-40 s of
        // CPU each, cold), and coopmat_emulated_f32 has full attention and the learned sketch.
        const bool base = c.dv == 24 && c.b == 32 && c.degree == 4 && c.B == 1 && c.causal;
        const bool wide = c.dv == 40 && c.localExact && c.r == 32 && c.source == SketchSource::Seed;
        if (!base && !wide) continue;
        c.type = PSK_DATA_TYPE_FLOAT32;
        cases.push_back(c);
    }
    return cases;
}

std::vector<PolysketchCase> polysketchLongSweep() {
    std::vector<PolysketchCase> cases;
    auto add = [&](PskDataType type, uint32_t h, uint32_t dv, uint32_t r, bool causal, bool localExact) -> PolysketchCase& {
        PolysketchCase c;
        c.type = type;
        c.h = h;
        c.dv = dv;
        c.r = r;
        c.b = 256;
        c.n = 32 * 256 + 77;
        c.Hq = 1;
        c.Hkv = 1;
        c.causal = causal;
        c.localExact = localExact;
        cases.push_back(c);
        return cases.back();
    };
    // The library's default configuration (p = 4, r = 32, b = 256) at h = dv = 128: the lane-team
    // kernels' largest shape on a CPU driver, and the generic kernels'.
    add(PSK_DATA_TYPE_FLOAT32, 128, 128, 32, true, true);
    // dv = 256, past the lane-team kernels (dv <= 128): generic kernels, h = 128 and 256.
    add(PSK_DATA_TYPE_FLOAT32, 256, 256, 16, true, false);
    add(PSK_DATA_TYPE_FLOAT32, 128, 256, 16, false, false);  // full: the block-state reduction
    // 16-bit storage: the cooperative block states (emulated on lavapipe) over 33 blocks at dv =
    // 256; with h = 128, dv = 64 the cooperative output and the lane-team kernels too.
    add(PSK_DATA_TYPE_FLOAT16, 128, 256, 16, true, true);
    add(PSK_DATA_TYPE_BFLOAT16, 256, 256, 16, true, false);
    add(PSK_DATA_TYPE_FLOAT16, 128, 64, 16, true, true);
    return cases;
}

std::vector<PolysketchCase> polysketchQuick() {
    // One small configuration (p = 4, r = 8, b = 16, h = dv = 16, decodeQuick's) varied one axis
    // at a time, so that most cases reuse the pipelines of another.
    std::vector<PolysketchCase> cases;
    auto add = [&](uint32_t n, bool causal, bool localExact, PskDataType type = PSK_DATA_TYPE_FLOAT32) -> PolysketchCase& {
        PolysketchCase c;
        c.r = 8;
        c.b = 16;
        c.h = c.dv = 16;
        c.n = n;
        c.causal = causal;
        c.localExact = localExact;
        c.type = type;
        cases.push_back(c);
        return cases.back();
    };
    // n = 1; shorter than a block, with custom strides (a gap after every row); a block and a row,
    // with grouped-query heads, two sequences and BNHD; full attention; local exact.
    add(1, true, false);
    add(15, true, false).tokenPad = 3;
    {
        PolysketchCase& c = add(17, true, false);
        c.B = 2;
        c.Hq = 4;
        c.Hkv = 2;
        c.layout = PSK_LAYOUT_BNHD;
    }
    add(45, false, false).Hq = 3;
    add(45, true, true);
    // Degree 8; a learned sketch with both LayerNorms; a sketch file with the reference scaling.
    add(45, true, false).degree = 8;
    {
        PolysketchCase& c = add(45, true, true);
        c.source = SketchSource::Learned;
        c.qkNorm = c.localNorm = true;
    }
    {
        PolysketchCase& c = add(40, true, false);
        c.source = SketchSource::File;
        c.referenceScaling = true;
    }
    // 16-bit storage (the cooperative-matrix kernels' inputs): local exact with grouped-query heads
    // and BNHD in float16, causal in bfloat16, full in float16.
    {
        PolysketchCase& c = add(53, true, true, PSK_DATA_TYPE_FLOAT16);
        c.B = 2;
        c.Hq = 4;
        c.Hkv = 2;
        c.layout = PSK_LAYOUT_BNHD;
    }
    add(53, true, false, PSK_DATA_TYPE_BFLOAT16).Hq = 4;
    add(53, false, false, PSK_DATA_TYPE_FLOAT16).Hq = 3;
    return cases;
}

// ---- Incremental decoding ----------------------------------------------------------------------

std::string name(const DecodeCase& c) {
    std::ostringstream s;
    s << "decode_";
    if (c.kind == PSK_ATTENTION_KIND_SOFTMAX) {
        s << "softmax";
    } else {
        s << "polysketch_" << (c.learned ? "learned" : "random") << "_p" << c.degree << (c.localExact ? "_localexact" : "_sketched")
          << "_r" << c.r << "_b" << c.b;
    }
    s << "_h" << c.h << "_dv" << c.dv << "_Hq" << c.Hq << "_Hkv" << c.Hkv << "_prompts";
    for (size_t i = 0; i < c.prompts.size(); ++i) s << (i ? "," : "") << c.prompts[i];
    s << "_steps" << c.steps;
    return s.str();
}

std::vector<DecodeCase> decodeSweep() {
    std::vector<DecodeCase> cases;
    auto add = [&](bool learned, bool localExact, uint32_t degree, uint32_t dv = 16) {
        DecodeCase c;
        c.learned = learned;
        c.localExact = localExact;
        c.degree = degree;
        c.dv = dv;
        cases.push_back(c);
    };
    add(false, false, 4);
    add(false, true, 4);
    add(true, false, 4);
    add(true, true, 4);
    add(false, true, 8);
    add(false, true, 4, 13);  // dv not a multiple of 4: the fold's scalar path
    add(false, false, 4, 13);
    DecodeCase softmax;
    softmax.kind = PSK_ATTENTION_KIND_SOFTMAX;
    cases.push_back(softmax);
    return cases;
}

std::vector<DecodeCase> decodeQuick() {
    std::vector<DecodeCase> cases;
    for (const DecodeCase& c : decodeSweep())
        if (c.dv == 16 && !c.learned && c.degree == 4) cases.push_back(c);  // sketched, local exact, softmax
    return cases;
}

}  // namespace psk::conformance
