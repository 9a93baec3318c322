// The decode states the decode-restore fuzz target restores into, and from which psk_fuzz_seeds
// serializes its seeds: one polysketch state (causal, local exact, p = 4, r = 8, b = 16) and one
// softmax state (KV cache of 24 tokens), both with two sequences, h = 16, dv = 8, Hq = 2, Hkv = 1,
// on the default device (lavapipe in CI). Only the public C API is used, so the harness follows
// whatever the blob format becomes.
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace psk::fuzz {

struct DecodeFixture {
    static constexpr int kStates = 2;
    static constexpr const char* kNames[kStates] = {"polysketch", "softmax"};
    static constexpr uint32_t kBatch = 2, kHq = 2, kHkv = 1, kH = 16, kDv = 8, kCapacity = 24;

    PskContext context = nullptr;
    PskAttention attentions[kStates] = {};
    PskDecodeState states[kStates] = {};

    DecodeFixture() = default;
    DecodeFixture(const DecodeFixture&) = delete;
    DecodeFixture& operator=(const DecodeFixture&) = delete;
    ~DecodeFixture() { destroy(); }

    /** Creates the context, attentions and states; on failure returns a message (else empty). */
    std::string create() {
        PskContextCreateInfo ci{};  // PSK_VALIDATION=1 turns the layers on
        if (PskResult r = pskCreateContext(&ci, &context)) return std::string("pskCreateContext: ") + pskResultToString(r);
        for (int i = 0; i < kStates; ++i) {
            PskAttentionCreateInfo a{};
            a.kind = i == 0 ? PSK_ATTENTION_KIND_POLYSKETCH : PSK_ATTENTION_KIND_SOFTMAX;
            a.flags = PSK_ATTENTION_CAUSAL_BIT | (i == 0 ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0u);
            a.degree = 4;
            a.numQueryHeads = kHq;
            a.numKeyValueHeads = kHkv;
            a.headDim = kH;
            a.valueDim = kDv;
            a.sketchSize = 8;
            a.blockSize = 16;
            a.seed = 7;
            if (PskResult r = pskCreateAttention(context, &a, &attentions[i]))
                return std::string("pskCreateAttention (") + kNames[i] + "): " + pskResultToString(r);
            PskDecodeStateCreateInfo s{};
            s.batchSize = kBatch;
            s.capacity = i == 0 ? 0 : kCapacity;
            if (PskResult r = pskCreateDecodeState(attentions[i], &s, &states[i]))
                return std::string("pskCreateDecodeState (") + kNames[i] + "): " + pskResultToString(r);
        }
        return {};
    }

    void destroy() {
        for (int i = 0; i < kStates; ++i) {
            if (states[i]) pskDestroyDecodeState(states[i]);
            if (attentions[i]) pskDestroyAttention(attentions[i]);
            states[i] = nullptr;
            attentions[i] = nullptr;
        }
        if (context) pskDestroyContext(context);
        context = nullptr;
    }

    /** The serialized state i (empty on failure). */
    std::vector<uint8_t> serialize(int i) const {
        size_t size = 0;
        if (pskSerializeDecodeState(states[i], nullptr, &size) != PSK_SUCCESS) return {};
        std::vector<uint8_t> blob(size);
        if (pskSerializeDecodeState(states[i], blob.data(), &size) != PSK_SUCCESS) return {};
        blob.resize(size);
        return blob;
    }

    /** Deterministic inputs in [-1, 1). */
    static std::vector<float> values(size_t count, uint32_t seed) {
        std::vector<float> v(count);
        uint32_t x = seed * 2654435761u + 1;
        for (float& f : v) {
            x = x * 1664525u + 1013904223u;
            f = float(x >> 8) / float(1u << 23) - 1.0f;
        }
        return v;
    }

    /** Prefills every sequence of state i with an n-token prompt. */
    PskResult prefill(int i, uint32_t n, uint32_t seed) {
        const std::vector<float> q = values(size_t(kBatch) * kHq * n * kH, seed), k = values(size_t(kBatch) * kHkv * n * kH, seed + 1),
                                 v = values(size_t(kBatch) * kHkv * n * kDv, seed + 2);
        PskDecodePrefillInfo p{};
        p.batchSize = kBatch;
        p.seqLen = n;
        p.q = q.data();
        p.k = k.data();
        p.v = v.data();
        p.qBytes = q.size() * 4;
        p.kBytes = k.size() * 4;
        p.vBytes = v.size() * 4;
        return pskDecodePrefillHost(states[i], &p);
    }

    /** One step of every sequence of state i. */
    PskResult step(int i, uint32_t seed) {
        const std::vector<float> q = values(size_t(kBatch) * kHq * kH, seed), k = values(size_t(kBatch) * kHkv * kH, seed + 1),
                                 v = values(size_t(kBatch) * kHkv * kDv, seed + 2);
        std::vector<float> out(size_t(kBatch) * kHq * kDv);
        PskDecodeStepInfo s{};
        s.q = q.data();
        s.k = k.data();
        s.v = v.data();
        s.out = out.data();
        s.qBytes = q.size() * 4;
        s.kBytes = k.size() * 4;
        s.vBytes = v.size() * 4;
        s.outBytes = out.size() * 4;
        return pskDecodeStepHost(states[i], &s);
    }
};

}  // namespace psk::fuzz
