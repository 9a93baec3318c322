#include "vk/instance.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "vk/device_caps.hpp"
#include "util/error.hpp"
#include "vk/vk_result.hpp"

#if defined(_WIN32)
#include <windows.h>
#else
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#endif

namespace psk {

namespace {

/**
 * Why a process-wide limit may be the cause of a failure to load or start Vulkan: empty when this
 * process can still open a file, else "; this process cannot open a file: Too many open files".
 * A driver that leaks file descriptors (or a test that does) makes every later vkCreateInstance
 * fail, and the loader then reports no driver at all.
 */
std::string fileLimitHint() {
#if defined(_WIN32)
    return "";
#else
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ::close(fd);
        return "";
    }
    return cat("; this process cannot open a file: ", std::strerror(errno));
#endif
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
    std::string out;
    for (const std::string& p : parts) {
        if (!out.empty()) out += separator;
        out += p;
    }
    return out;
}

}  // namespace

VulkanLibrary::VulkanLibrary() {
    // The loader's reason for each failed attempt: "not found" is the only one that means no
    // loader is installed.
    std::vector<std::string> reasons;
    bool absent = true;
#if defined(_WIN32)
    HMODULE module = LoadLibraryA("vulkan-1.dll");
    handle_ = reinterpret_cast<void*>(module);
    if (module) {
        getInstanceProcAddr_ = reinterpret_cast<PFN_vkGetInstanceProcAddr>(GetProcAddress(module, "vkGetInstanceProcAddr"));
    } else {
        const DWORD code = GetLastError();
        reasons.push_back(cat("vulkan-1.dll: LoadLibrary error ", code));
        absent = code == ERROR_MOD_NOT_FOUND;
    }
#else
#if defined(__APPLE__)
    const char* names[] = {"libvulkan.1.dylib", "libvulkan.dylib", "libMoltenVK.dylib"};
#else
    const char* names[] = {"libvulkan.so.1", "libvulkan.so"};
#endif
    for (const char* name : names) {
        handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (handle_) break;
        const char* why = dlerror();
        reasons.emplace_back(why ? why : cat(name, ": dlopen failed"));
        const std::string& reason = reasons.back();
        if (reason.find("No such file") == std::string::npos && reason.find("no such file") == std::string::npos &&
            reason.find("image not found") == std::string::npos)
            absent = false;
    }
    if (handle_) getInstanceProcAddr_ = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(handle_, "vkGetInstanceProcAddr"));
#endif
    if (handle_ && !getInstanceProcAddr_) {
        absent = false;
        reasons.emplace_back("the library has no vkGetInstanceProcAddr");
    }
    if (!getInstanceProcAddr_) {
        close();
        if (absent)
            fail(PSK_ERROR_NO_DEVICE, "the Vulkan loader (libvulkan) could not be opened; install libvulkan1 (", join(reasons, "; "),
                 ")");
        // Installed but not loadable (out of file descriptors, of memory or of static TLS space, a
        // broken installation): not NO_DEVICE, and the message says what failed.
        fail(PSK_ERROR_VULKAN, "the Vulkan loader (libvulkan) is installed but could not be loaded: ", join(reasons, "; "),
             fileLimitHint());
    }
}

VulkanLibrary::~VulkanLibrary() { close(); }

void VulkanLibrary::close() {
    if (!handle_) return;
#if defined(_WIN32)
    FreeLibrary(reinterpret_cast<HMODULE>(handle_));
#else
    dlclose(handle_);
#endif
    handle_ = nullptr;
}

namespace {

bool hasLayer(const GlobalFunctions& vkg, const char* name) {
    uint32_t count = 0;
    vkg.vkEnumerateInstanceLayerProperties(&count, nullptr);
    std::vector<VkLayerProperties> layers(count);
    vkg.vkEnumerateInstanceLayerProperties(&count, layers.data());
    return std::any_of(layers.begin(), layers.end(), [&](const VkLayerProperties& l) { return std::strcmp(l.layerName, name) == 0; });
}

/** An instance extension of the implementation and implicit layers, or (layer != null) of that layer. */
bool hasInstanceExtension(const GlobalFunctions& vkg, const char* name, const char* layer = nullptr) {
    uint32_t count = 0;
    vkg.vkEnumerateInstanceExtensionProperties(layer, &count, nullptr);
    std::vector<VkExtensionProperties> exts(count);
    vkg.vkEnumerateInstanceExtensionProperties(layer, &count, exts.data());
    exts.resize(count);
    return std::any_of(exts.begin(), exts.end(), [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

bool envIs(const char* name, const char* value) {
    const char* env = std::getenv(name);
    return env && std::strcmp(env, value) == 0;
}

// The best-practices check (PSK_VALIDATION_BEST_PRACTICES=1) that is filtered out, and why: every
// kernel with a specialization-constant workgroup size (GLSL local_size_x_id) reaches SPIR-V as
// the WorkgroupSize built-in, which SPIR-V 1.6 deprecates in favour of the LocalSizeId execution
// mode. The layer warns on every pipeline of a device with VK_KHR_maintenance4 (every Vulkan 1.3
// device). LocalSizeId is not an option for the library's one SPIR-V build: it requires
// maintenance4 on the device (VUID-RuntimeSpirv-LocalSizeId-06434), which Vulkan 1.1 / 1.2 devices
// need not have, and glslang emits it only for SPIR-V 1.6 (--target-env vulkan1.3). The built-in
// is valid on every Vulkan version; docs/RELIABILITY.md has the details.
constexpr const char* kFilteredMessageIds[] = {"UNASSIGNED-BestPractices-SpirvDeprecated_WorkgroupSize"};

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

/**
 * Whether the loader's messages say a driver is installed but did not start, as opposed to no
 * driver being there: its vkCreateInstance failed (the loader then skips it, and with no other
 * driver returns VK_ERROR_INCOMPATIBLE_DRIVER), or its library did not load for another reason than
 * not existing (out of file descriptors, memory or static TLS, a missing dependency). Newer loaders
 * quote the driver's VkResult ("Received return code -3 from call to vkCreateInstance in ICD ..."):
 * it goes to *driverResult (0 when not quoted).
 */
bool reportsDriverFailure(const std::vector<std::string>& messages, int* driverResult) {
    bool failed = false;
    *driverResult = 0;
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string& m = messages[i];
        if (contains(m, "CreateInstance in ICD")) {
            failed = true;
            const size_t at = m.find("return code ");
            if (at != std::string::npos && !*driverResult) *driverResult = std::atoi(m.c_str() + at + 12);
        }
        // The line before this one is dlopen's reason.
        if (contains(m, "Failed loading library associated with ICD JSON") &&
            !(i > 0 && (contains(messages[i - 1], "No such file or directory") || contains(messages[i - 1], "wrong ELF class"))))
            failed = true;
    }
    return failed;
}

/** The loader's messages, for an error message ("" when there are none). */
std::string quoteLoader(const std::vector<std::string>& messages) {
    if (messages.empty()) return "";
    return cat("; the Vulkan loader said: ", join(messages, " | "));
}

/**
 * Throws for a device that is not there (none at all, or none the selector names): NO_DEVICE, unless
 * the loader reported a driver that did not start, or the process is out of file descriptors. Then
 * the failure may be transient (a GPU driver's instance creation fails when the process is out of
 * descriptors or memory, or the GPU cannot be opened): PSK_ERROR_VULKAN, or the code of the driver's
 * VkResult where the loader quotes it.
 */
[[noreturn]] void failMissingDevice(const std::vector<std::string>& loaderMessages, const std::string& what) {
    int driverResult = 0;
    const std::string limit = fileLimitHint();
    if (reportsDriverFailure(loaderMessages, &driverResult) || !limit.empty()) {
        PskResult code = driverResult ? toPskResult(static_cast<VkResult>(driverResult)) : PSK_ERROR_VULKAN;
        if (code == PSK_ERROR_NO_DEVICE || code == PSK_SUCCESS) code = PSK_ERROR_VULKAN;
        fail(code, what, ": a Vulkan driver is installed but did not start",
             driverResult ? cat(" (its vkCreateInstance returned ", vkResultName(static_cast<VkResult>(driverResult)), " (",
                                driverResult, "))")
                          : std::string(),
             quoteLoader(loaderMessages), limit);
    }
    fail(PSK_ERROR_NO_DEVICE, what, quoteLoader(loaderMessages));
}

}  // namespace

Instance::Instance(int validation, MessageSink sink) : sink_(std::move(sink)) {
    vkg_.load(library_.getInstanceProcAddr());
    if (!vkg_.vkCreateInstance) fail(PSK_ERROR_NO_DEVICE, "the Vulkan loader has no vkCreateInstance");

    uint32_t loaderVersion = VK_API_VERSION_1_0;
    if (vkg_.vkEnumerateInstanceVersion) vkg_.vkEnumerateInstanceVersion(&loaderVersion);
    if (loaderVersion < VK_API_VERSION_1_1)
        fail(PSK_ERROR_NO_DEVICE, "the Vulkan loader supports only Vulkan 1.0; polysketch needs 1.1");
    apiVersion_ = std::min<uint32_t>(loaderVersion, VK_API_VERSION_1_3);

    const char* validationLayer = "VK_LAYER_KHRONOS_validation";
    std::vector<const char*> layers, extensions;
    bool useValidation = false;
    if (validation > 0) {
        useValidation = hasLayer(vkg_, validationLayer) && hasInstanceExtension(vkg_, VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
        if (!useValidation && validation > 1)
            fail(PSK_ERROR_UNSUPPORTED, "validation was required but VK_LAYER_KHRONOS_validation is not installed");
        if (!useValidation && sink_)
            sink_(PSK_MESSAGE_SEVERITY_INFO, PSK_SUCCESS, "validation requested but the layer is not installed; running without it");
    }
    // With the layer on, synchronization validation too (VK_EXT_validation_features; Debian 12's
    // layer, 1.3.239, predates VK_EXT_layer_settings): hazards between commands with no barrier
    // between them are reported as SYNC-HAZARD-* messages. On lavapipe commands run in order, so
    // this is the only check of the barriers a GPU depends on. PSK_VALIDATION_SYNC=0 turns it off;
    // PSK_VALIDATION_BEST_PRACTICES=1 adds the best-practices checks.
    VkValidationFeaturesEXT validationFeatures{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
    std::vector<VkValidationFeatureEnableEXT> enables;
    if (useValidation) {
        layers.push_back(validationLayer);
        extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
        if (!envIs("PSK_VALIDATION_SYNC", "0")) enables.push_back(VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT);
        if (envIs("PSK_VALIDATION_BEST_PRACTICES", "1")) enables.push_back(VK_VALIDATION_FEATURE_ENABLE_BEST_PRACTICES_EXT);
        if (!enables.empty()) {
            if (hasInstanceExtension(vkg_, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME, validationLayer)) {
                extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
                validationFeatures.enabledValidationFeatureCount = static_cast<uint32_t>(enables.size());
                validationFeatures.pEnabledValidationFeatures = enables.data();
                for (VkValidationFeatureEnableEXT e : enables) {
                    if (e == VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT) syncValidation_ = true;
                    if (e == VK_VALIDATION_FEATURE_ENABLE_BEST_PRACTICES_EXT) bestPractices_ = true;
                }
            } else if (sink_) {
                sink_(PSK_MESSAGE_SEVERITY_INFO, PSK_SUCCESS,
                      "the validation layer has no VK_EXT_validation_features: running without synchronization validation");
            }
        }
    }
    VkInstanceCreateFlags flags = 0;
    if (hasInstanceExtension(vkg_, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        // Lets portability drivers (MoltenVK) be enumerated.
        extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }

    // The loader's own warnings and errors while it creates the instance (a driver that failed to
    // load or to create its instance, and was skipped) reach a messenger in vkCreateInstance's pNext
    // chain, and only there: an error then quotes them instead of a bare "no driver". The validation
    // layer's messages about vkCreateInstance and vkDestroyInstance (objects left alive) come to it
    // too. It needs VK_EXT_debug_utils, which the loader itself implements.
    VkDebugUtilsMessengerCreateInfoEXT creationMessenger{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    const bool debugUtils = useValidation || hasInstanceExtension(vkg_, VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    if (debugUtils) {
        if (!useValidation) extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
        creationMessenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        creationMessenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
        if (bestPractices_) creationMessenger.messageType |= VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        creationMessenger.pfnUserCallback = &Instance::onCreationMessage;
        creationMessenger.pUserData = this;
    }

    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "polysketch";
    app.pEngineName = "polysketch";
    app.engineVersion = PSK_HEADER_VERSION;
    app.apiVersion = apiVersion_;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    if (validationFeatures.enabledValidationFeatureCount) info.pNext = &validationFeatures;
    if (debugUtils) {
        creationMessenger.pNext = info.pNext;
        info.pNext = &creationMessenger;
    }
    info.flags = flags;
    info.pApplicationInfo = &app;
    info.enabledLayerCount = static_cast<uint32_t>(layers.size());
    info.ppEnabledLayerNames = layers.data();
    info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
    info.ppEnabledExtensionNames = extensions.data();
    const VkResult r = vkg_.vkCreateInstance(&info, nullptr, &instance_);
    if (r != VK_SUCCESS) {
        instance_ = VK_NULL_HANDLE;
        // VK_ERROR_INCOMPATIBLE_DRIVER is also what the loader returns when every driver it found
        // failed: only with no driver there at all is it NO_DEVICE.
        if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
            failMissingDevice(loaderMessages_, "no usable Vulkan driver (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER (-9))");
        fail(toPskResult(r), "vkCreateInstance failed: ", vkResultName(r), " (", static_cast<int>(r), ")", quoteLoader(loaderMessages_),
             fileLimitHint());
    }
    vki_.load(library_.getInstanceProcAddr(), instance_);
    // A driver skipped while another one started: worth knowing when the device wanted is missing.
    if (sink_)
        for (const std::string& m : loaderMessages_) sink_(PSK_MESSAGE_SEVERITY_INFO, PSK_SUCCESS, cat("the Vulkan loader: ", m));

    if (useValidation && vki_.vkCreateDebugUtilsMessengerEXT) {
        VkDebugUtilsMessengerCreateInfoEXT m{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        m.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        m.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
        // Best-practices warnings come as performance messages.
        if (bestPractices_) m.messageType |= VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        m.pfnUserCallback = &Instance::onDebugMessage;
        m.pUserData = this;
        const VkResult mr = vki_.vkCreateDebugUtilsMessengerEXT(instance_, &m, nullptr, &messenger_);
        if (mr != VK_SUCCESS) {
            vki_.vkDestroyInstance(instance_, nullptr);
            checkVk(mr, "vkCreateDebugUtilsMessengerEXT");
        }
    }
}

Instance::~Instance() {
    if (messenger_) vki_.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
    if (instance_) vki_.vkDestroyInstance(instance_, nullptr);
}

VKAPI_ATTR VkBool32 VKAPI_CALL Instance::onDebugMessage(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                       VkDebugUtilsMessageTypeFlagsEXT,
                                                       const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    auto* self = static_cast<Instance*>(user);
    const char* id = data ? data->pMessageIdName : nullptr;
    if (id)
        for (const char* filtered : kFilteredMessageIds)
            if (std::strcmp(id, filtered) == 0) return VK_FALSE;
    if (!self->sink_) return VK_FALSE;
    std::string text = data && data->pMessage ? data->pMessage : "";
    // The message ID (e.g. SYNC-HAZARD-WRITE-AFTER-WRITE, a VUID) leads, where the text lacks it.
    if (id && *id && text.find(id) == std::string::npos) text = cat("[ ", id, " ] ", text);
    self->sink_(PSK_MESSAGE_SEVERITY_VALIDATION, PSK_SUCCESS, text);
    return VK_FALSE;
}

VKAPI_ATTR VkBool32 VKAPI_CALL Instance::onCreationMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                          VkDebugUtilsMessageTypeFlagsEXT types,
                                                          const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    // The validation layer's: as every validation message. The loader's: kept for error messages.
    if (types & (VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT))
        return onDebugMessage(severity, types, data, user);
    auto* self = static_cast<Instance*>(user);
    constexpr size_t kMaxMessages = 16, kMaxLength = 400;
    if (data && data->pMessage && self->loaderMessages_.size() < kMaxMessages) {
        std::string text = data->pMessage;
        if (text.size() > kMaxLength) text = text.substr(0, kMaxLength) + "...";
        self->loaderMessages_.push_back(std::move(text));
    }
    return VK_FALSE;
}

std::vector<VkPhysicalDevice> Instance::physicalDevices() const {
    uint32_t count = 0;
    PSK_VK(vki_.vkEnumeratePhysicalDevices(instance_, &count, nullptr));
    std::vector<VkPhysicalDevice> devices(count);
    PSK_VK(vki_.vkEnumeratePhysicalDevices(instance_, &count, devices.data()));
    devices.resize(count);
    return devices;
}

VkPhysicalDevice Instance::select(const char* selector) const {
    const std::vector<VkPhysicalDevice> devices = physicalDevices();
    if (devices.empty())
        failMissingDevice(loaderMessages_, "no Vulkan device found (is mesa-vulkan-drivers installed?)");
    std::string wanted = selector ? selector : "";
    const char* from = "";
    if (wanted.empty()) {
        const char* env = std::getenv("PSK_DEVICE");
        if (env) wanted = env;
        if (!wanted.empty()) from = " (from PSK_DEVICE)";
    }
    std::vector<std::string> names;
    for (VkPhysicalDevice pd : devices) {
        VkPhysicalDeviceProperties p{};
        vki_.vkGetPhysicalDeviceProperties(pd, &p);
        names.push_back(p.deviceName);
    }
    auto present = [&] {
        std::string list;
        for (size_t i = 0; i < names.size(); ++i) list += cat(i ? ", " : "", "[", i, "] ", names[i]);
        return cat(" (devices present: ", list, ")");
    };
    if (wanted.empty()) {
        // Best type first; ties keep enumeration order.
        VkPhysicalDevice best = devices[0];
        int bestRank = -1;
        for (VkPhysicalDevice pd : devices) {
            VkPhysicalDeviceProperties p{};
            vki_.vkGetPhysicalDeviceProperties(pd, &p);
            const int rank = deviceTypeRank(p.deviceType);
            if (rank > bestRank) {
                best = pd;
                bestRank = rank;
            }
        }
        return best;
    }
    if (std::all_of(wanted.begin(), wanted.end(), [](unsigned char c) { return std::isdigit(c); })) {
        const unsigned long index = std::strtoul(wanted.c_str(), nullptr, 10);
        if (wanted.size() > 6 || index >= devices.size())
            failMissingDevice(loaderMessages_, cat("device index ", wanted, from, " does not exist", present()));
        return devices[index];
    }
    for (size_t i = 0; i < devices.size(); ++i)
        if (lower(names[i]).find(lower(wanted)) != std::string::npos) return devices[i];
    failMissingDevice(loaderMessages_, cat("no Vulkan device name contains \"", wanted, "\"", from, present()));
}

}  // namespace psk
