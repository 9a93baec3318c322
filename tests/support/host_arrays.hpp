// The arrays of a host call: q, k, v and out of a PskForwardHostInfo, PskDecodePrefillInfo or
// PskDecodeStepInfo pointed at vectors, each size in bytes the vector's (float32 as float, 16-bit
// storage as uint16_t, encoded bytes as uint8_t). The decode, state-passing and varlen tests fill
// their infos with it; the other fields (batchSize, seqLen, state, cuSeqlens...) stay the caller's.
#pragma once

#include <polysketch/polysketch.h>

#include <cstddef>
#include <vector>

namespace psk::test {

/** Sets info's q, k, v, out and their byte sizes; a null `out` leaves no output (NULL, 0 bytes). */
template <typename Info, typename T>
void setHostArrays(Info& info, const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v, std::vector<T>* out) {
    info.q = q.data();
    info.k = k.data();
    info.v = v.data();
    info.out = out ? out->data() : nullptr;
    info.qBytes = q.size() * sizeof(T);
    info.kBytes = k.size() * sizeof(T);
    info.vBytes = v.size() * sizeof(T);
    info.outBytes = out ? out->size() * sizeof(T) : 0;
}

template <typename Info, typename T>
void setHostArrays(Info& info, const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v, std::nullptr_t) {
    setHostArrays(info, q, k, v, static_cast<std::vector<T>*>(nullptr));
}

}  // namespace psk::test
