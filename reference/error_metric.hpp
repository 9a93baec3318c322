// The conformance error metric shared by the tests and the tools: max |got - want| / max |want|,
// the largest deviation relative to the largest reference magnitude. It is scale-free and does not
// blow up on near-zero entries; a NaN in `got` or a size mismatch gives infinity.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace psk::ref {

inline double relativeMaxError(const std::vector<float>& got, const std::vector<double>& want) {
    if (got.size() != want.size()) return INFINITY;
    double maxRef = 0, maxErr = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        maxRef = std::max(maxRef, std::fabs(want[i]));
        const double e = std::fabs(double(got[i]) - want[i]);
        if (!(e <= maxErr)) maxErr = std::isnan(e) ? INFINITY : e;
    }
    return maxRef > 0 ? maxErr / maxRef : maxErr;
}

/** An error as recorded and printed: "%.3e" (std::to_string's six decimals read 0.000000 for most
 *  float32 errors). */
inline std::string formatError(double error) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3e", error);
    return buf;
}

}  // namespace psk::ref
