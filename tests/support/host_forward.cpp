#include "support/host_forward.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "reference/storage_types.hpp"

namespace psk::test {

std::vector<float> HostForward::run(PskAttention attention, const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, PskForwardStats* stats, std::vector<float>* rawOut) const {
    const DeviceLayout& L = layout;
    const auto qDev = psk::storage::encode(L.toDevice(q, Hq, h, 0.0f), type);
    const auto kDev = psk::storage::encode(L.toDevice(k, Hkv, h, 0.0f), type);
    const auto vDev = psk::storage::encode(L.toDevice(v, Hkv, dv, 0.0f), type);
    auto oDev = psk::storage::encode(L.toDevice(std::vector<float>(size_t(L.B) * Hq * L.n * dv, NAN), Hq, dv, gap), type);
    const PskTensorStrides qs = L.strides(Hq, h), ks = L.strides(Hkv, h), vs = L.strides(Hkv, dv), os = L.strides(Hq, dv);
    PskForwardHostInfo fwd{};
    fwd.batchSize = L.B;
    fwd.seqLen = L.n;
    fwd.q = qDev.data();
    fwd.k = kDev.data();
    fwd.v = vDev.data();
    fwd.out = oDev.data();
    fwd.qBytes = qDev.size();
    fwd.kBytes = kDev.size();
    fwd.vBytes = vDev.size();
    fwd.outBytes = oDev.size();
    if (explicitStrides) {
        fwd.qStrides = &qs;
        fwd.kStrides = &ks;
        fwd.vStrides = &vs;
        fwd.outStrides = &os;
    }
    fwd.stats = stats;
    const PskResult r = pskAttentionForwardHost(attention, &fwd);
    EXPECT_EQ(r, PSK_SUCCESS) << pskResultToString(r);
    if (r != PSK_SUCCESS) return {};
    const std::vector<float> all = psk::storage::decode(oDev, type);
    if (rawOut) *rawOut = all;
    return L.fromDevice(all, Hq, dv);
}

}  // namespace psk::test
