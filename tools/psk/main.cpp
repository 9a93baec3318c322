// psk: the polysketch command-line tool.
#include <cstdio>
#include <cstring>

#include "commands.hpp"

namespace {

void usage(FILE* out) {
    std::fprintf(out,
                 "usage: psk <command> [options]\n"
                 "\n"
                 "commands:\n"
                 "  info   list every Vulkan device with the capabilities polysketch uses\n"
                 "  demo   random q, k, v on the best device: softmax vs exact polynomial,\n"
                 "         time and error against the float64 CPU reference\n"
                 "  run    one attention call on q, k, v .npy files, the output to a .npy file\n"
                 "  bench  sweep context lengths, kinds, storage types and shapes: GPU time,\n"
                 "         TFLOP/s, workspace; JSON, CSV, a plot and a PyTorch CPU peer\n"
                 "  conformance\n"
                 "         every kernel path the device runs against the float64 CPU reference,\n"
                 "         with the test suite's cases and thresholds; exit status 1 on a failure\n"
                 "  tune   time the planner's tunable tile choices for a list of shapes on this\n"
                 "         device and write a tuning table that the library reads\n"
                 "  micro  measure the barrier round and the L2 / HBM dependent-load latency on\n"
                 "         the device (the performance model's machine constants)\n"
                 "  compile\n"
                 "         compile every kernel of a plan on a device without running it and print\n"
                 "         the driver's statistics (registers, spills, instructions); works on a\n"
                 "         driver without a GPU behind it (Mesa RADV's null device)\n"
                 "\n"
                 "Run 'psk <command> --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char* cmd = argv[1];
    if (!std::strcmp(cmd, "info")) return runInfo(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "demo")) return runDemo(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "run")) return runRun(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "bench")) return runBench(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "conformance")) return runConformance(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "tune")) return runTune(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "micro")) return runMicro(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "compile")) return runCompile(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "--help") || !std::strcmp(cmd, "-h") || !std::strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    std::fprintf(stderr, "psk: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
