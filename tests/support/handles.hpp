// Owning handles for the C API's objects in tests: destroyed with the matching pskDestroy* call
// when they go out of scope, so that a failed ASSERT leaks nothing.
#pragma once

#include <polysketch/polysketch.h>

#include <memory>

namespace psk::test {

struct ContextDeleter {
    void operator()(PskContext c) const { pskDestroyContext(c); }
};
using Context = std::unique_ptr<PskContext_T, ContextDeleter>;

struct AttentionDeleter {
    void operator()(PskAttention a) const { pskDestroyAttention(a); }
};
using Attention = std::unique_ptr<PskAttention_T, AttentionDeleter>;

struct DecodeStateDeleter {
    void operator()(PskDecodeState s) const { pskDestroyDecodeState(s); }
};
using DecodeState = std::unique_ptr<PskDecodeState_T, DecodeStateDeleter>;

}  // namespace psk::test
