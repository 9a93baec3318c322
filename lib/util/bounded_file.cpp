#include "util/bounded_file.hpp"

#include <fstream>

#include "util/error.hpp"

namespace psk {

std::string readBoundedFile(const std::string& path, size_t maxBytes, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(PSK_ERROR_BAD_FILE, what, ": cannot be opened");
    std::string bytes;
    char chunk[4096];
    while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
        bytes.append(chunk, size_t(in.gcount()));
        if (bytes.size() > maxBytes) fail(PSK_ERROR_BAD_FILE, what, ": more than ", maxBytes, " bytes, more than it may have");
    }
    if (in.bad()) fail(PSK_ERROR_BAD_FILE, what, ": read error");
    return bytes;
}

}  // namespace psk
