// Internal error handling. Inside the library a failure throws psk::Error carrying the public code
// and a message; the C API boundary (api.cpp) catches it, reports it to the message callback and
// returns the code. RAII owners release whatever a failed call had acquired on the way out.
#pragma once

#include <polysketch/polysketch.h>

#include <exception>
#include <sstream>
#include <string>
#include <utility>

namespace psk {

class Error : public std::exception {
public:
    Error(PskResult code, std::string message) : code_(code), message_(std::move(message)) {}
    PskResult code() const noexcept { return code_; }
    const char* what() const noexcept override { return message_.c_str(); }

private:
    PskResult code_;
    std::string message_;
};

/** Concatenates anything streamable: cat("n = ", n, " is too large"). */
template <typename... Args>
std::string cat(Args&&... args) {
    std::ostringstream out;
    (out << ... << std::forward<Args>(args));
    return out.str();
}

template <typename... Args>
[[noreturn]] void fail(PskResult code, Args&&... args) {
    throw Error(code, cat(std::forward<Args>(args)...));
}

}  // namespace psk
