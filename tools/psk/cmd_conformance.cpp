// psk conformance: the conformance sweep of the test suite (reference/conformance_cases.hpp) on one
// device, from an installed build: softmax and exact polynomial attention, polysketch through each
// kernel path the device runs (generic, lane-team, cooperative-matrix; the emulated cooperative
// backend on request) and incremental decoding, each case against the float64 CPU reference with
// the suite's metric and thresholds. One line per case, a summary, optionally a JSON file. Exit
// status: 0 when every case that ran passed, 1 when one failed (or none ran, or the validation
// layer reported anything), 2 for a bad command line.
#include <polysketch/polysketch.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.hpp"
#include "commands.hpp"
#include "conformance_run.hpp"
#include "json.hpp"

namespace {

using psk::cli::UsageError;
using namespace psk::conformance;

/** The usage text, with the thresholds of reference/conformance_cases.hpp. */
void printUsage() {
    std::printf(
        "usage: psk conformance [--quick | --full] [--device SEL] [--json FILE]\n"
        "                       [--paths LIST] [--filter TEXT] [--validation] [--threshold-scale X]\n"
        "\n"
        "Runs the conformance cases of the test suite on one device through the public API and checks\n"
        "each against the float64 CPU reference: max |out - ref| / max |ref| over the whole output must\n"
        "stay within the threshold of its storage type (float32: %.1e softmax and exact polynomial,\n"
        "%.1e polysketch and decoding; float16 %.1e; bfloat16 %.1e; decoded rows against the forward\n"
        "over the same tokens %.1e). Softmax and exact polynomial run once (FP32 kernels) and their\n"
        "16-bit cases once more on the cooperative and emulated paths; polysketch runs once per\n"
        "kernel path; decoding (float32) through the generic and lane-team paths. A path the device\n"
        "cannot run is skipped, as is a case that runs no kernel of its path (the library chooses kernel\n"
        "by kernel). Prints one line per case (name, path and the implementations that ran, storage,\n"
        "max error, threshold, PASS/FAIL/SKIP) and a summary with the worst error per storage type.\n"
        "\n"
        "  --quick             a few dozen small cases covering every kind, mask, storage type, local\n"
        "                      exact, sketch source, grouped-query heads, layouts, odd n and decoding\n"
        "                      (the default; seconds on a GPU, well under a minute on lavapipe)\n"
        "  --full              the test suite's whole sweep (n up to 8217, head dims 16 to 256, every\n"
        "                      polysketch case in float32 and once more in 16-bit storage)\n"
        "  --device SEL        device index or part of its name (see psk info); default: PSK_DEVICE or\n"
        "                      the best device\n"
        "  --json FILE         also write every case and the summary as JSON\n"
        "  --paths LIST        kernel paths for polysketch: generic, team (CPU drivers' lane-team\n"
        "                      kernels), cooperative (the device's cooperative matrices, 16-bit\n"
        "                      storage), emulated (the cooperative kernels' emulated backend, any\n"
        "                      device, slow); default generic,team,cooperative. Set through\n"
        "                      PSK_DISABLE_TEAM_KERNELS, PSK_DISABLE_COOPMAT and PSK_COOPMAT_EMULATION,\n"
        "                      whatever their values outside\n"
        "  --filter TEXT       only the cases whose name contains TEXT\n"
        "  --validation        require the Khronos validation layer (PSK_VALIDATION=1 enables it when\n"
        "                      installed); any validation message fails the run\n"
        "  --threshold-scale X multiply every threshold by X > 0; a check of the checker: with 1e-12\n"
        "                      float rounding alone exceeds the thresholds and the run must fail\n"
        "\n"
        "Exit status: 0 every case that ran passed, 1 a case failed (or none ran, or the validation\n"
        "layer reported something), 2 bad usage.\n",
        kQuadraticFloat32, kPolysketchFloat32, kFloat16, kBFloat16, kDecodeVsForward);
}

struct Options {
    bool full = false, quickGiven = false, fullGiven = false, validation = false;
    std::string device, json, filter;
    std::vector<Path> paths{Path::Generic, Path::Team, Path::Cooperative};
    double thresholdScale = 1;
};

Options parse(int argc, char** argv, bool* help) {
    Options o;
    psk::cli::ArgReader args(argc, argv);
    while (args.next()) {
        const std::string a = args.name();
        if (a == "--help" || a == "-h") {
            *help = true;
            return o;
        } else if (a == "--quick") {
            args.flag();
            o.quickGiven = true;
        } else if (a == "--full") {
            args.flag();
            o.fullGiven = true;
        } else if (a == "--device") {
            o.device = args.value();
        } else if (a == "--json") {
            o.json = args.value();
            if (o.json.empty()) throw UsageError{"--json needs a file name"};
        } else if (a == "--filter") {
            o.filter = args.value();
        } else if (a == "--validation") {
            args.flag();
            o.validation = true;
        } else if (a == "--paths") {
            o.paths.clear();
            for (const std::string& item : psk::cli::splitList(args.value())) {
                Path p;
                if (!parsePath(item, &p)) throw UsageError{"--paths takes generic, team, cooperative, emulated (got '" + item + "')"};
                if (std::find(o.paths.begin(), o.paths.end(), p) == o.paths.end()) o.paths.push_back(p);
            }
        } else if (a == "--threshold-scale") {
            const std::string v = args.value();
            if (!psk::cli::parseDouble(v, &o.thresholdScale) || !(o.thresholdScale > 0))
                throw UsageError{"--threshold-scale needs a positive number (got '" + v + "')"};
        } else {
            throw UsageError{"unknown option '" + args.raw() + "'"};
        }
    }
    if (o.quickGiven && o.fullGiven) throw UsageError{"--quick and --full conflict; give one"};
    o.full = o.fullGiven;
    return o;
}

// ---- The cases of a run --------------------------------------------------------------------------

enum class Kind { Baseline, Polysketch, Decode };

/** One line of output: a case on a path (decode cases make two: against the reference, the forward). */
struct Job {
    Kind kind;
    size_t index;  // into the mode's list of that kind
    Path path;
    std::string name;
    const char* family;  // "softmax", "poly", "polysketch", "decode"
    const char* check;   // "reference" or "forward"
    PskDataType type;
    Outcome outcome;
};

struct Cases {
    std::vector<BaselineCase> baseline;
    std::vector<PolysketchCase> polysketch;
    std::vector<DecodeCase> decode;
};

bool matches(const Options& o, const std::string& name) { return o.filter.empty() || name.find(o.filter) != std::string::npos; }

/** The jobs of one path, in run order. Softmax and exact polynomial go with the generic path (the
 *  first path's jobs), and their 16-bit cases once more with the cooperative and emulated paths. */
std::vector<Job> jobsOf(const Options& o, const Cases& cases, Path path, bool withBaselines) {
    std::vector<Job> jobs;
    if (withBaselines) {
        for (size_t i = 0; i < cases.baseline.size(); ++i) {
            const BaselineCase& c = cases.baseline[i];
            const std::string n = name(c);
            if (!matches(o, n)) continue;
            jobs.push_back({Kind::Baseline, i, Path::Generic, n, c.kind == PSK_ATTENTION_KIND_SOFTMAX ? "softmax" : "poly", "reference", c.type, {}});
        }
    }
    const bool only16 = path == Path::Cooperative || path == Path::Emulated;
    if (only16) {
        // The 16-bit baseline cases once more through the cooperative kernel (attention_tiled_coopmat).
        for (size_t i = 0; i < cases.baseline.size(); ++i) {
            const BaselineCase& c = cases.baseline[i];
            const std::string n = name(c);
            if (c.type == PSK_DATA_TYPE_FLOAT32 || !matches(o, n)) continue;
            jobs.push_back({Kind::Baseline, i, path, n, c.kind == PSK_ATTENTION_KIND_SOFTMAX ? "softmax" : "poly", "reference", c.type, {}});
        }
    }
    for (size_t i = 0; i < cases.polysketch.size(); ++i) {
        const PolysketchCase& c = cases.polysketch[i];
        const std::string n = "polysketch_" + name(c);
        if (only16 && c.type == PSK_DATA_TYPE_FLOAT32) continue;
        if (!matches(o, n)) continue;
        jobs.push_back({Kind::Polysketch, i, path, n, "polysketch", "reference", c.type, {}});
    }
    if (path == Path::Generic || path == Path::Team) {
        for (size_t i = 0; i < cases.decode.size(); ++i) {
            if (path == Path::Team && cases.decode[i].kind != PSK_ATTENTION_KIND_POLYSKETCH) continue;  // generic kernels only
            const std::string n = name(cases.decode[i]);
            if (!matches(o, n) && !matches(o, n + "_vs_forward")) continue;  // the two checks of one run go together
            jobs.push_back({Kind::Decode, i, path, n, "decode", "reference", PSK_DATA_TYPE_FLOAT32, {}});
            jobs.push_back({Kind::Decode, i, path, n + "_vs_forward", "decode", "forward", PSK_DATA_TYPE_FLOAT32, {}});
        }
    }
    return jobs;
}

const char* statusName(Outcome::Status s) {
    return s == Outcome::Status::Pass ? "PASS" : s == Outcome::Status::Fail ? "FAIL" : "SKIP";
}

std::string sci(double v) {
    if (std::isnan(v)) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2e", v);
    return buf;
}

std::string deviceTypeName(uint32_t type) {
    static const char* names[] = {"other", "integrated GPU", "discrete GPU", "virtual GPU", "CPU"};
    return type < 5 ? names[type] : "unknown";
}

struct PathReport {
    Path path;
    std::string status;  // "ran" or "skipped"
    std::string reason;
};

struct Worst {
    bool any = false;
    double error = 0, threshold = 0;
    std::string name, path;
};

std::string jsonCase(const Job& j) {
    using psk::json::number;
    using psk::json::quote;
    const Outcome& o = j.outcome;
    std::ostringstream s;
    s << "{\"name\": " << quote(j.name) << ", \"kind\": " << quote(j.family) << ", \"check\": " << quote(j.check)
      << ", \"path\": " << quote(pathName(j.path)) << ", \"ran\": " << quote(o.ran) << ", \"storage\": " << quote(storageName(j.type))
      << ", \"status\": " << quote(o.status == Outcome::Status::Pass ? "pass" : o.status == Outcome::Status::Fail ? "fail" : "skip")
      << ", \"error\": " << number(o.error, 4) << ", \"threshold\": " << number(o.threshold, 4) << ", \"seconds\": " << number(o.seconds, 4)
      << ", \"note\": " << quote(o.note) << ", \"kernels\": [";
    for (size_t i = 0; i < o.kernels.size(); ++i) s << (i ? ", " : "") << quote(o.kernels[i]);
    s << "]}";
    return s.str();
}

}  // namespace

int runConformance(int argc, char** argv) {
    Options o;
    try {
        bool help = false;
        o = parse(argc, argv, &help);
        if (help) {
            printUsage();
            return 0;
        }
    } catch (const UsageError& e) {
        std::fprintf(stderr, "psk conformance: %s\n", e.message.c_str());
        return 2;
    }
    std::string command = "psk conformance";
    for (int i = 0; i < argc; ++i) command += std::string(" ") + argv[i];

    Cases cases;
    if (o.full) {
        cases.baseline = baselineSweep();
        const std::vector<BaselineCase> baseline16 = baselineSweep16();
        cases.baseline.insert(cases.baseline.end(), baseline16.begin(), baseline16.end());
        cases.polysketch = polysketchSweep();
        const std::vector<PolysketchCase> sixteen = polysketchSweep16();
        cases.polysketch.insert(cases.polysketch.end(), sixteen.begin(), sixteen.end());
        // The test suite's GpuTiles16 cases (h = 16, dv = 24 / 40: partial column tiles, several
        // column tiles per subgroup), which the cooperative path runs with the device's tiling.
        const std::vector<PolysketchCase> tiles = polysketchGpuTilesSweep();
        cases.polysketch.insert(cases.polysketch.end(), tiles.begin(), tiles.end());
        cases.decode = decodeSweep();
    } else {
        cases.baseline = baselineQuick();
        cases.polysketch = polysketchQuick();
        cases.decode = decodeQuick();
    }
    // Every job of every requested path, to size the name column and to refuse a filter that
    // matches nothing before touching the device.
    size_t width = 0, planned = 0;
    for (size_t i = 0; i < o.paths.size(); ++i) {
        for (const Job& j : jobsOf(o, cases, o.paths[i], i == 0)) {
            width = std::max(width, j.name.size());
            ++planned;
        }
    }
    if (planned == 0) {
        std::fprintf(stderr, "psk conformance: no case matches --filter '%s' on the paths given\n", o.filter.c_str());
        return 2;
    }
    std::ofstream jsonFile;
    if (!o.json.empty()) {
        jsonFile.open(o.json, std::ios::binary | std::ios::trunc);
        if (!jsonFile) {
            std::fprintf(stderr, "psk conformance: cannot write %s: %s\n", o.json.c_str(), std::strerror(errno));
            return 2;
        }
    }

    const auto t0 = std::chrono::steady_clock::now();
    Runner runner;
    runner.thresholdScale = o.thresholdScale;
    const PskResult opened = runner.open(o.device, o.validation);
    if (opened != PSK_SUCCESS) {
        std::fprintf(stderr, "psk conformance: cannot create a context: %s\n", runner.describe(opened).c_str());
        return 1;
    }
    PskDeviceInfo dev{};
    pskGetDeviceInfo(runner.context(), &dev);
    const uint32_t version = pskGetVersion();
    const std::string libraryVersion = std::to_string(PSK_VERSION_MAJOR(version)) + "." + std::to_string(PSK_VERSION_MINOR(version)) + "." +
                                       std::to_string(PSK_VERSION_PATCH(version));
    const std::string driver = std::string(dev.driverName) + " " + dev.driverInfo;
    std::printf("psk conformance %s: polysketch %s on %s (%s), driver %s; validation layer %s\n", o.full ? "--full" : "--quick",
                libraryVersion.c_str(), dev.name, deviceTypeName(dev.deviceType).c_str(), driver.c_str(),
                runner.validationOn() ? "on" : "off");
    if (o.thresholdScale != 1) std::printf("thresholds scaled by %g (--threshold-scale)\n", o.thresholdScale);
    std::fflush(stdout);

    std::vector<Job> done;
    std::vector<PathReport> paths;
    size_t skippedWithPath = 0;
    bool firstPath = true;
    for (Path path : o.paths) {
        std::vector<Job> jobs = jobsOf(o, cases, path, firstPath);
        const bool withBaselines = firstPath;
        firstPath = false;
        if (jobs.empty()) continue;
        // Softmax and exact polynomial run with the first path's jobs under the generic path's
        // variables (FP32 kernels), and their 16-bit cases with the cooperative / emulated paths.
        std::string unavailable;
        if (path != Path::Generic) {
            selectPath(path);
            unavailable = runner.pathUnavailable(path);
        }
        paths.push_back({path, unavailable.empty() ? "ran" : "skipped", unavailable});
        if (!unavailable.empty()) {
            std::printf("path %s: skipped: %s\n", pathName(path), unavailable.c_str());
            std::fflush(stdout);
        }
        for (Job& j : jobs) {
            if (!unavailable.empty() && !(withBaselines && j.kind == Kind::Baseline)) {
                ++skippedWithPath;
                continue;
            }
            selectPath(j.path);
            const uint64_t validationBefore = runner.validationMessages();
            try {
                if (j.kind == Kind::Baseline) {
                    j.outcome = runner.run(cases.baseline[j.index], j.path);
                } else if (j.kind == Kind::Polysketch) {
                    j.outcome = runner.run(cases.polysketch[j.index], path);
                } else {
                    // The two checks of a decode case come from one run.
                    if (std::strcmp(j.check, "reference") == 0) {
                        const std::vector<Outcome> both = runner.run(cases.decode[j.index], path);
                        j.outcome = both[0];
                        (&j)[1].outcome = both[1];
                    }
                }
            } catch (const std::exception& e) {
                j.outcome = Outcome{};
                j.outcome.status = Outcome::Status::Fail;
                j.outcome.note = std::string("exception: ") + e.what();
                if (j.kind == Kind::Decode && std::strcmp(j.check, "reference") == 0) (&j)[1].outcome = j.outcome;
            }
            const uint64_t validation = runner.validationMessages() - validationBefore;
            if (validation) {
                j.outcome.status = Outcome::Status::Fail;
                j.outcome.note = std::to_string(validation) + " validation messages";
            }
            const Outcome& r = j.outcome;
            const std::string where = std::string(pathName(j.path)) + " (" + (r.ran.empty() ? "-" : r.ran) + ")";
            std::printf("%-*s  %-36s %-4s  %9s  %9s  %s%s%s\n", int(width), j.name.c_str(), where.c_str(), storageName(j.type),
                        sci(r.error).c_str(), sci(r.threshold).c_str(), statusName(r.status), r.note.empty() ? "" : ": ", r.note.c_str());
            std::fflush(stdout);
            done.push_back(j);
        }
    }
    restoreEnvironment();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // ---- Summary ----
    size_t passed = 0, failed = 0, skipped = skippedWithPath;
    std::map<std::string, Worst> worst;
    std::vector<std::string> failures;
    for (const Job& j : done) {
        const Outcome& r = j.outcome;
        if (r.status == Outcome::Status::Pass) ++passed;
        if (r.status == Outcome::Status::Fail) {
            ++failed;
            failures.push_back(j.name + " [" + pathName(j.path) + "]");
        }
        if (r.status == Outcome::Status::Skip) ++skipped;
        if (r.status == Outcome::Status::Skip || std::isnan(r.error) || !(r.threshold > 0)) continue;
        Worst& w = worst[storageName(j.type)];
        if (!w.any || !(r.error / r.threshold <= w.error / w.threshold)) w = {true, r.error, r.threshold, j.name, pathName(j.path)};
    }
    const uint64_t validation = runner.validationMessages();
    const bool ok = failed == 0 && passed > 0 && validation == 0;
    std::printf("\nsummary: %zu cases: %zu passed, %zu failed, %zu skipped", passed + failed + skipped, passed, failed, skipped);
    if (skippedWithPath) std::printf(" (%zu on paths the device does not run)", skippedWithPath);
    std::printf(", in %.1f s\n", seconds);
    for (const char* type : {"f32", "f16", "bf16"}) {
        const auto it = worst.find(type);
        if (it == worst.end()) continue;
        const Worst& w = it->second;
        std::printf("  worst %-4s %9s of threshold %9s (%.3g%%): %s [%s]\n", type, sci(w.error).c_str(), sci(w.threshold).c_str(),
                    100.0 * w.error / w.threshold, w.name.c_str(), w.path.c_str());
    }
    for (const PathReport& p : paths)
        if (p.status != "ran") std::printf("  path %s skipped: %s\n", pathName(p.path), p.reason.c_str());
    std::printf("  validation messages: %llu (validation layer %s)\n", (unsigned long long)validation, runner.validationOn() ? "on" : "off");
    if (ok) {
        std::printf("PASS: every case that ran is within its threshold\n");
    } else if (failed) {
        std::printf("FAIL: %zu case%s failed:", failed, failed == 1 ? "" : "s");
        for (size_t i = 0; i < failures.size() && i < 10; ++i) std::printf(" %s%s", failures[i].c_str(), i + 1 < failures.size() ? "," : "");
        std::printf("%s\n", failures.size() > 10 ? " ..." : "");
    } else if (validation) {
        std::printf("FAIL: the validation layer reported %llu messages\n", (unsigned long long)validation);
    } else {
        std::printf("FAIL: no case ran on this device\n");
    }

    if (jsonFile.is_open()) {
        using psk::json::number;
        using psk::json::quote;
        std::ostringstream j;
        j << "{\n  \"tool\": \"psk conformance\",\n  \"library_version\": " << quote(libraryVersion) << ",\n  \"command\": " << quote(command)
          << ",\n  \"mode\": " << quote(o.full ? "full" : "quick") << ",\n  \"device\": " << quote(dev.name)
          << ",\n  \"device_type\": " << quote(deviceTypeName(dev.deviceType)) << ",\n  \"driver\": " << quote(driver)
          << ",\n  \"validation_layer\": " << (runner.validationOn() ? "true" : "false")
          << ",\n  \"threshold_scale\": " << number(o.thresholdScale) << ",\n  \"metric\": "
          << quote("max |out - ref| / max |ref| over the whole output; ref: the float64 CPU reference on the inputs rounded to the storage type")
          << ",\n  \"paths\": [";
        for (size_t i = 0; i < paths.size(); ++i)
            j << (i ? ", " : "") << "{\"name\": " << quote(pathName(paths[i].path)) << ", \"status\": " << quote(paths[i].status)
              << ", \"reason\": " << quote(paths[i].reason) << "}";
        j << "],\n  \"cases\": [";
        for (size_t i = 0; i < done.size(); ++i) j << (i ? ",\n    " : "\n    ") << jsonCase(done[i]);
        j << "\n  ],\n  \"summary\": {\"cases\": " << passed + failed + skipped << ", \"passed\": " << passed << ", \"failed\": " << failed
          << ", \"skipped\": " << skipped << ", \"skipped_paths\": " << skippedWithPath << ", \"validation_messages\": " << validation << ", \"seconds\": " << number(seconds, 4)
          << ", \"result\": " << quote(ok ? "pass" : "fail") << ", \"worst\": {";
        bool first = true;
        for (const char* type : {"f32", "f16", "bf16"}) {
            const auto it = worst.find(type);
            if (it == worst.end()) continue;
            const Worst& w = it->second;
            j << (first ? "" : ", ") << quote(type) << ": {\"error\": " << number(w.error, 4) << ", \"threshold\": " << number(w.threshold, 4)
              << ", \"case\": " << quote(w.name) << ", \"path\": " << quote(w.path) << "}";
            first = false;
        }
        j << "}}\n}\n";
        jsonFile << j.str();
        jsonFile.close();
        if (!jsonFile) {
            std::fprintf(stderr, "psk conformance: writing %s failed\n", o.json.c_str());
            return 1;
        }
    }
    return ok ? 0 : 1;
}
