// An environment variable set (or removed) for a scope, then restored: the library reads its
// switches (PSK_COOPMAT_*, PSK_DISABLE_TEAM_KERNELS, PSK_DEVICE, PSK_TUNING_TABLE, ...) when a
// context, attention or decode state is created, so a test sets them around that creation. Only
// while no other thread of the test runs.
#pragma once

#include <cstdlib>
#include <string>

namespace psk::test {

/** Sets (value non-null) or removes an environment variable. */
inline void setEnv(const char* name, const char* value) {
#if defined(_WIN32)
    _putenv_s(name, value ? value : "");
#else
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
#endif
}

class ScopedEnv {
public:
    /** `value` null: the variable is removed for the scope. */
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) {
            had_ = true;
            old_ = old;
        }
        setEnv(name, value);
    }
    ~ScopedEnv() { setEnv(name_.c_str(), had_ ? old_.c_str() : nullptr); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_, old_;
    bool had_ = false;
};

}  // namespace psk::test
