// The storage types of the public API (PskDataType) as the library names and sizes them.
#pragma once

#include <polysketch/polysketch.h>

#include <cstddef>

namespace psk {

/** Bytes per element: 4 for float32, 2 for float16 and bfloat16. */
inline size_t elementBytes(PskDataType type) { return type == PSK_DATA_TYPE_FLOAT32 ? 4 : 2; }

/** The suffix of shader variants and tool names: "f32", "f16", "bf16". */
inline const char* dataTypeSuffix(PskDataType type) {
    switch (type) {
        case PSK_DATA_TYPE_FLOAT16:
            return "f16";
        case PSK_DATA_TYPE_BFLOAT16:
            return "bf16";
        default:
            return "f32";
    }
}

}  // namespace psk
