// A context of the library's own objects (psk_micro_lib, tools/CMakeLists.txt) for the psk
// subcommands that drive kernels or pipelines directly: micro and compile.
#pragma once

#include <polysketch/polysketch.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli_util.hpp"
#include "util/error.hpp"
#include "vk/context.hpp"

namespace psk::cli {

/**
 * A context on `device` (a PSK_DEVICE selector; "" the best device), its error messages kept in
 * `sink` (which must outlive it); null, with "psk <tool>: no context: ..." on stderr, when none
 * can be made.
 */
inline std::unique_ptr<PskContext_T> makeToolContext(const std::string& device, MessageSink& sink, const char* tool) {
    PskContextCreateInfo ci{};
    ci.device = device.empty() ? nullptr : device.c_str();
    ci.messageCallback = MessageSink::callback;
    ci.messageUserData = &sink;
    try {
        return std::make_unique<PskContext_T>(ci);
    } catch (const psk::Error& e) {
        std::fprintf(stderr, "psk %s: no context: %s (%s)\n", tool, e.what(), pskResultToString(e.code()));
        return nullptr;
    }
}

}  // namespace psk::cli
