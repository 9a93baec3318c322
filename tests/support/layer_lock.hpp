// Contexts created and destroyed on several threads under the validation layer, one at a time.
//
// Debian 12's validation layer (1.3.239) keeps its per-instance and per-device data in one
// process-wide hash map that every Vulkan call looks up and that creating or destroying an
// instance or a device writes, without a lock (KhronosGroup/Vulkan-ValidationLayers issue 4391:
// a data race its maintainers confirmed; later layers lock it). Vulkan itself asks no
// synchronization between calls on different instances, so the library takes none: contexts of
// different threads are independent. But a test that creates or destroys a context while another
// thread calls into the layer can see the layer crash, or take one device's data for another's and
// report a valid handle as invalid (docs/RELIABILITY.md, "Contexts", has the core and the
// messages). Tests with the layer therefore create and destroy their contexts under `exclusive()`
// and do everything between under `shared()`: the work of the threads still overlaps, their
// creations and destructions do not. The same tests without the layer take no lock (a default
// LayerLock), so the library's own concurrency is tested with everything at once.
#pragma once

#include <polysketch/polysketch.h>

#include <memory>
#include <mutex>
#include <shared_mutex>

namespace psk::test {

struct LayerLock {
    std::shared_mutex* mutex = nullptr;  // null: no ordering at all

    std::unique_lock<std::shared_mutex> exclusive() const {
        return mutex ? std::unique_lock<std::shared_mutex>(*mutex) : std::unique_lock<std::shared_mutex>();
    }
    std::shared_lock<std::shared_mutex> shared() const {
        return mutex ? std::shared_lock<std::shared_mutex>(*mutex) : std::shared_lock<std::shared_mutex>();
    }
};

/** Destroys a context under the lock's exclusive side. */
struct LockedContextDeleter {
    LayerLock lock;
    void operator()(PskContext c) const {
        const auto held = lock.exclusive();
        pskDestroyContext(c);
    }
};
using LockedContext = std::unique_ptr<PskContext_T, LockedContextDeleter>;

/** pskCreateContext under the lock's exclusive side; the context (or null) destroyed under it too. */
inline LockedContext createLockedContext(const PskContextCreateInfo& info, LayerLock lock, PskResult* result) {
    PskContext raw = nullptr;
    {
        const auto held = lock.exclusive();
        *result = pskCreateContext(&info, &raw);
    }
    return LockedContext(*result == PSK_SUCCESS ? raw : nullptr, LockedContextDeleter{lock});
}

}  // namespace psk::test
