#include "forward/workspace.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "util/error.hpp"
#include "util/sizes.hpp"

namespace psk {

VkDeviceSize WorkspaceLayout::contiguousBytes() const {
    const WorkspacePacking p = packWorkspace(*this, 0, "");
    return p.bufferBytes.empty() ? 0 : p.bufferBytes[0];
}

WorkspaceLayout WorkspaceLayout::max(const WorkspaceLayout& a, const WorkspaceLayout& b) {
    if (a.regions.empty()) return b;
    if (b.regions.empty()) return a;
    if (a.regions.size() != b.regions.size()) fail(PSK_ERROR_INTERNAL, "workspace layouts of different regions");
    WorkspaceLayout m = a;
    for (size_t i = 0; i < m.regions.size(); ++i) m.regions[i].size = std::max(a.regions[i].size, b.regions[i].size);
    return m;
}

namespace {

/**
 * Next fit: region after region into the current buffer while it fits `capacity(buffer)`, else into
 * the next one. `tooLarge(region, buffer, bytes)` reports a region that does not fit an empty buffer,
 * `outOfBuffers(region, bytes)` one for which no next buffer exists (capacity returns 0 past the last).
 */
WorkspacePacking pack(const WorkspaceLayout& L, const std::function<VkDeviceSize(size_t)>& capacity,
                      const std::function<void(size_t, size_t, VkDeviceSize)>& tooLarge,
                      const std::function<void(size_t, size_t, VkDeviceSize)>& outOfBuffers) {
    WorkspacePacking p;
    p.bufferOf.assign(L.regions.size(), 0);
    p.offsetOf.assign(L.regions.size(), 0);
    const VkDeviceSize a = std::max<VkDeviceSize>(L.alignment, 1);
    auto endOf = [&](VkDeviceSize offset, VkDeviceSize size) { return L.padEnd ? alignUp(offset + size, a) : offset + size; };
    for (size_t i = 0; i < L.regions.size(); ++i) {
        const VkDeviceSize size = L.regions[i].size;
        if (!size) continue;
        if (p.bufferBytes.empty()) {
            if (!capacity(0)) outOfBuffers(i, 0, endOf(0, size));
            p.bufferBytes.push_back(0);
        }
        size_t buffer = p.bufferBytes.size() - 1;
        VkDeviceSize offset = p.bufferBytes[buffer] ? alignUp(p.bufferBytes[buffer], a) : 0;
        if (endOf(offset, size) > capacity(buffer)) {
            if (p.bufferBytes[buffer] == 0) tooLarge(i, buffer, endOf(0, size));
            ++buffer;
            if (!capacity(buffer)) outOfBuffers(i, buffer - 1, endOf(offset, size));
            p.bufferBytes.push_back(0);
            offset = 0;
            if (endOf(0, size) > capacity(buffer)) tooLarge(i, buffer, endOf(0, size));
        }
        p.bufferOf[i] = uint32_t(buffer);
        p.offsetOf[i] = offset;
        p.bufferBytes[buffer] = endOf(offset, size);
    }
    return p;
}

}  // namespace

WorkspacePacking packWorkspace(const WorkspaceLayout& L, VkDeviceSize cap, const std::string& capName) {
    const VkDeviceSize unbounded = ~VkDeviceSize(0);
    return pack(
        L, [&](size_t) { return cap ? cap : unbounded; },
        [&](size_t region, size_t, VkDeviceSize bytes) {
            fail(PSK_ERROR_TOO_LARGE, "the workspace region \"", L.regions[region].name, "\" needs ", bytes,
                 " bytes, more than one buffer may hold: ", capName, " is ", cap,
                 " bytes (each region must fit one allocation and maxStorageBufferRange); use a smaller batch or fewer "
                 "tokens per call");
        },
        [&](size_t, size_t, VkDeviceSize) {});
}

WorkspacePacking placeWorkspace(const WorkspaceLayout& L, const std::vector<VkDeviceSize>& sizes, const char* what,
                                const char* sizeFunction) {
    if (sizes.empty()) fail(PSK_ERROR_INTERNAL, "placeWorkspace without buffers");
    return pack(
        L, [&](size_t i) { return i < sizes.size() ? std::max<VkDeviceSize>(sizes[i], 1) : 0; },
        [&](size_t region, size_t buffer, VkDeviceSize bytes) {
            fail(PSK_ERROR_BUFFER_TOO_SMALL, what, "[", buffer, "].size is ", sizes[buffer], " bytes; it must hold the workspace region \"",
                 L.regions[region].name, "\" of ", bytes, " bytes (the regions fill the buffers in order: ", sizeFunction, ")");
        },
        [&](size_t region, size_t buffer, VkDeviceSize bytes) {
            fail(PSK_ERROR_BUFFER_TOO_SMALL, what, "[", buffer, "] (", sizes[buffer], " bytes) is full before the workspace region \"",
                 L.regions[region].name, "\" (it would end at byte ", bytes, ") and no further buffer is given: the call needs more ",
                 "or larger workspace buffers (", sizeFunction, ")");
        });
}

BoundWorkspace BoundWorkspace::slice(size_t first, size_t count) const {
    BoundWorkspace s;
    for (size_t i = first; i < first + count; ++i) s.regions.push_back((*this)[i]);
    return s;
}

BoundWorkspace bindWorkspace(const WorkspaceLayout& L, const WorkspacePacking& p, const std::vector<BufferRange>& buffers) {
    BoundWorkspace w;
    w.regions.resize(L.regions.size(), BufferRange{VK_NULL_HANDLE, 0, 0});
    for (size_t i = 0; i < L.regions.size(); ++i) {
        if (!L.regions[i].size) continue;
        const BufferRange& b = buffers.at(p.bufferOf[i]);
        w.regions[i] = BufferRange{b.buffer, b.offset + p.offsetOf[i], L.regions[i].size};
    }
    return w;
}

BoundWorkspace bindContiguous(const WorkspaceLayout& L, BufferRange buffer) {
    return bindWorkspace(L, packWorkspace(L, 0, ""), {buffer});
}

bool poisonWorkspaceFromEnvironment() {
    const char* env = std::getenv("PSK_POISON_WORKSPACE");
    if (!env || !env[0] || std::strcmp(env, "0") == 0) return false;
    if (std::strcmp(env, "1") == 0) return true;
    fail(PSK_ERROR_INVALID_ARGUMENT, "PSK_POISON_WORKSPACE=", env, ": expected 0 or 1");
}

}  // namespace psk
