// psk bench: the JSON and CSV files.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "bench.hpp"
#include "cli_util.hpp"
#include "json.hpp"

namespace psk::bench {

namespace {

using json::number;
using json::quote;

std::string u(uint64_t v) { return std::to_string(v); }
const char* b(bool v) { return v ? "true" : "false"; }

double msPerToken(const Result& r) { return r.gpu.medianMs / (double(r.config.batch) * r.config.n); }
double tflops(const Result& r) { return r.gpu.medianMs > 0 ? r.flops / (r.gpu.medianMs * 1e-3) / 1e12 : 0; }

std::string csvField(const std::string& s) {
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

std::string configJson(const Config& c) {
    const bool ps = c.kind == PSK_ATTENTION_KIND_POLYSKETCH;
    std::ostringstream o;
    o << "\"kind\": " << quote(cli::kindName(c.kind)) << ", \"dtype\": " << quote(cli::dataTypeName(c.dtype)) << ", \"batch\": " << c.batch
      << ", \"heads\": " << c.heads << ", \"kv_heads\": " << c.kvHeads << ", \"context\": " << c.n << ", \"n\": " << c.n
      << ", \"head_dim\": " << c.headDim << ", \"value_dim\": " << c.valueDim << ", \"causal\": true"
      << ", \"degree\": " << (c.degree ? u(c.degree) : "null") << ", \"sketch_size\": " << (ps ? u(c.sketchSize) : "null")
      << ", \"block_size\": " << (ps ? u(c.blockSize) : "null") << ", \"local_exact\": " << (ps ? b(c.localExact) : "null")
      << ", \"learned_sketch\": " << (ps ? b(c.learned) : "null");
    return o.str();
}

/** psk bench --decode: one entry per (kind, shape, context). */
std::string decodeJson(const RunInfo& info, const std::vector<Result>& results) {
    std::ostringstream o;
    o << "{\n";
    o << "  \"tool\": \"psk bench\",\n";
    o << "  \"mode\": \"decode\",\n";
    o << "  \"library_version\": " << quote(info.libraryVersion) << ",\n";
    o << "  \"command\": " << quote(info.command) << ",\n";
    o << "  \"started_utc\": " << quote(info.startedUtc) << ",\n";
    o << "  \"device\": {\"name\": " << quote(info.deviceName) << ", \"driver\": " << quote(info.driverName)
      << ", \"driver_info\": " << quote(info.driverInfo) << ", \"type\": " << info.deviceType << "},\n";
    o << "  \"steps\": " << info.runs << ",\n";
    o << "  \"warmup\": " << info.warmup << ",\n";
    o << "  \"time\": \"per step: GPU timestamps around the commands of one pskDecodeStepHost call (PskForwardStats.gpuMilliseconds; "
         "host copies of the token in and the row out excluded), or with timing resident (--resident) between consecutive steps "
         "recorded in one command buffer (pskCmdDecodeStep) after warm-up steps on a second state; median, mean, min and max over "
         "the timed steps, which follow a state-only prefill (out = NULL) to the context length\",\n";
    o << "  \"results\": [";
    for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        o << (i ? ",\n" : "\n") << "    {" << configJson(r.config) << ",\n     ";
        if (r.ok) {
            o << "\"status\": \"ok\", \"median_ms\": " << number(r.gpu.medianMs) << ", \"mean_ms\": " << number(r.gpu.meanMs)
              << ", \"min_ms\": " << number(r.gpu.minMs) << ", \"max_ms\": " << number(r.gpu.maxMs)
              << ", \"state_bytes\": " << u(r.stateBytes) << ", \"step_scratch_bytes\": " << u(r.workspaceBytes)
              << ", \"prefill_wall_ms\": " << number(r.prefillWallMs) << ", \"timed_start_unix\": " << number(r.timedStartUnix, 16)
              << ", \"timed_end_unix\": " << number(r.timedEndUnix, 16) << ", \"timing\": " << quote(r.timing)
              << ", \"warmup_steps\": " << r.warmupRuns << ", \"warmup_ms\": " << number(r.warmupMs) << ", \"samples_ms\": [";
            for (size_t k = 0; k < r.samplesMs.size(); ++k) o << (k ? ", " : "") << number(r.samplesMs[k]);
            o << "]";
        } else {
            o << "\"status\": \"skipped\", \"reason\": " << quote(r.reason);
        }
        o << "}";
    }
    o << "\n  ]\n}\n";
    return o.str();
}

std::string decodeCsv(const std::vector<Result>& results) {
    std::ostringstream o;
    o << "kind,dtype,batch,heads,kv_heads,context,head_dim,value_dim,degree,sketch_size,block_size,local_exact,status,steps,"
         "median_ms,mean_ms,min_ms,max_ms,state_bytes,step_scratch_bytes,prefill_wall_ms,timed_start_unix,timed_end_unix,reason,timing,"
         "warmup_steps,warmup_ms\n";
    for (const Result& r : results) {
        const Config& c = r.config;
        const bool ps = c.kind == PSK_ATTENTION_KIND_POLYSKETCH;
        o << cli::kindName(c.kind) << ',' << cli::dataTypeName(c.dtype) << ',' << c.batch << ',' << c.heads << ',' << c.kvHeads << ','
          << c.n << ',' << c.headDim << ',' << c.valueDim << ',' << (c.degree ? u(c.degree) : "") << ',' << (ps ? u(c.sketchSize) : "")
          << ',' << (ps ? u(c.blockSize) : "") << ',' << (ps ? (c.localExact ? "1" : "0") : "") << ',' << (r.ok ? "ok" : "skipped")
          << ',';
        if (r.ok)
            o << r.samplesMs.size() << ',' << number(r.gpu.medianMs) << ',' << number(r.gpu.meanMs) << ',' << number(r.gpu.minMs) << ','
              << number(r.gpu.maxMs) << ',' << u(r.stateBytes) << ',' << u(r.workspaceBytes) << ',' << number(r.prefillWallMs) << ','
              << number(r.timedStartUnix, 16) << ',' << number(r.timedEndUnix, 16) << ',';
        else
            o << ",,,,,,,,,,";
        o << csvField(r.ok ? "" : r.reason) << ',' << r.timing << ',' << r.warmupRuns << ',' << number(r.warmupMs) << '\n';
    }
    return o.str();
}

}  // namespace

std::string toJson(const RunInfo& info, const std::vector<Result>& results) {
    if (info.decode) return decodeJson(info, results);
    std::ostringstream o;
    o << "{\n";
    o << "  \"tool\": \"psk bench\",\n";
    o << "  \"library_version\": " << quote(info.libraryVersion) << ",\n";
    o << "  \"command\": " << quote(info.command) << ",\n";
    o << "  \"started_utc\": " << quote(info.startedUtc) << ",\n";
    o << "  \"device\": {\"name\": " << quote(info.deviceName) << ", \"driver\": " << quote(info.driverName)
      << ", \"driver_info\": " << quote(info.driverInfo) << ", \"type\": " << info.deviceType << "},\n";
    o << "  \"runs\": " << info.runs << ",\n";
    o << "  \"warmup\": " << info.warmup << ",\n";
    o << "  \"timing\": " << quote(info.resident ? "resident" : "host") << ",\n";
    o << "  \"warmup_ms\": " << number(info.warmupMs) << ",\n";
    if (info.resident) {
        o << "  \"host_runs\": " << info.hostRuns << ",\n";
        o << "  \"time\": \"resident: median, min and max of GPU timestamps around pskCmdAttentionForward's commands in one command "
             "buffer submitted back to back on device buffers uploaded once (no host copies or NaN checks between runs), after at "
             "least warmup runs and warmup_ms of such submissions; the device is psk's own, given to the library as an app's "
             "(PskExternalVulkan), so 'plan' may differ from the host form's 'host_plan'. stage_median_ms and host_median_ms: "
             "host_runs pskAttentionForwardHost calls on the library's own context right after (PskForwardStats)\",\n";
    } else {
        o << "  \"time\": \"median, min and max of the GPU timestamps around the attention dispatches (PskForwardStats.gpuMilliseconds); "
             "stage_median_ms: the median of each stage's time (PskForwardStats.stageMilliseconds, timestamps between the stages)\",\n";
    }
    if (info.peer.name.empty()) {
        o << "  \"peer\": null,\n";
    } else {
        o << "  \"peer\": {\"name\": " << quote(info.peer.name) << ", \"available\": " << b(info.peer.available);
        if (info.peer.available)
            o << ", \"version\": " << quote(info.peer.version) << ", \"threads\": " << info.peer.threads
              << ", \"what\": \"torch.nn.functional.scaled_dot_product_attention on the CPU, float32, wall time\"";
        else
            o << ", \"reason\": " << quote(info.peer.reason);
        o << "},\n";
    }
    o << "  \"results\": [";
    for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        const Config& c = r.config;
        const bool ps = c.kind == PSK_ATTENTION_KIND_POLYSKETCH;
        o << (i ? ",\n" : "\n") << "    {";
        o << "\"kind\": " << quote(cli::kindName(c.kind)) << ", \"dtype\": " << quote(cli::dataTypeName(c.dtype))
          << ", \"layout\": " << quote(cli::layoutName(c.layout)) << ", \"batch\": " << c.batch << ", \"heads\": " << c.heads
          << ", \"kv_heads\": " << c.kvHeads << ", \"n\": " << c.n << ", \"head_dim\": " << c.headDim << ", \"value_dim\": " << c.valueDim
          << ", \"causal\": " << b(c.causal) << ", \"degree\": " << (c.degree ? u(c.degree) : "null")
          << ", \"sketch_size\": " << (ps ? u(c.sketchSize) : "null") << ", \"block_size\": " << (ps ? u(c.blockSize) : "null")
          << ", \"local_exact\": " << (ps ? b(c.localExact) : "null") << ", \"learned_sketch\": " << (ps ? b(c.learned) : "null")
          << ", \"chunk\": " << (c.chunk ? u(c.chunk) : "null")
          << ", \"varlen\": " << (c.varlen.empty() ? std::string("null") : "[" + [&] {
                 std::string l;
                 for (uint32_t x : c.varlen) l += (l.empty() ? "" : ", ") + std::to_string(x);
                 return l;
             }() + "]")
          << ",\n     ";
        o << "\"flop\": " << number(r.flops, 15);
        if (r.ok) {
            o << ", \"status\": \"ok\", \"median_ms\": " << number(r.gpu.medianMs) << ", \"min_ms\": " << number(r.gpu.minMs)
              << ", \"max_ms\": " << number(r.gpu.maxMs) << ", \"ms_per_token\": " << number(msPerToken(r))
              << ", \"tokens_per_s\": " << number(1e3 / msPerToken(r)) << ", \"tflops\": " << number(tflops(r))
              << ", \"workspace_bytes\": " << u(r.workspaceBytes) << ", \"stage_median_ms\": {";
            for (uint32_t st = 0; st < PSK_FORWARD_STAGE_COUNT; ++st)
                o << (st ? ", " : "") << quote(stageName(st)) << ": " << number(r.stageMedianMs[st]);
            o << "}, \"stage_hbm_bytes\": {";
            const StageBytes sb = stageBytes(c, r.fusedQuery, r.zOperandBytes, r.zWalk);
            for (uint32_t st = 0; st < PSK_FORWARD_STAGE_COUNT; ++st)
                o << (st ? ", " : "") << quote(stageName(st)) << ": " << number(sb.bytes[st], 15);
            o << "}, \"samples_ms\": [";
            for (size_t k = 0; k < r.samplesMs.size(); ++k) o << (k ? ", " : "") << number(r.samplesMs[k]);
            o << "],\n     \"timing\": " << quote(r.timing) << ", \"warmup_runs\": " << r.warmupRuns << ", \"warmup_ms\": " << number(r.warmupMs)
              << ", \"timed_start_unix\": " << number(r.timedStartUnix, 16) << ", \"timed_end_unix\": " << number(r.timedEndUnix, 16)
              << ", \"plan\": " << quote(r.plan);
            if (r.timing == "resident") {
                o << ", \"stage_source\": \"host\", \"host_median_ms\": " << (r.hostOk ? number(r.host.medianMs) : "null")
                  << ", \"host_plan\": " << quote(r.hostPlan) << ", \"host_reason\": " << quote(r.hostReason);
            }
        } else {
            o << ", \"status\": \"skipped\", \"reason\": " << quote(r.reason) << ", \"timing\": " << quote(r.timing);
        }
        if (!info.peer.name.empty() && info.peer.available) {
            o << ",\n     \"peer\": ";
            if (r.peerOk) {
                o << "{\"status\": \"ok\", \"median_ms\": " << number(r.peer.medianMs) << ", \"min_ms\": " << number(r.peer.minMs)
                  << ", \"max_ms\": " << number(r.peer.maxMs) << ", \"ms_per_token\": "
                  << number(r.peer.medianMs / (double(c.batch) * c.n));
                if (r.ok && r.gpu.medianMs > 0) o << ", \"speedup\": " << number(r.peer.medianMs / r.gpu.medianMs, 4);
                o << "}";
            } else {
                o << "{\"status\": \"skipped\", \"reason\": " << quote(r.peerReason) << "}";
            }
        }
        o << "}";
    }
    o << "\n  ]\n}\n";
    return o.str();
}

std::string toCsv(const RunInfo& info, const std::vector<Result>& results) {
    if (info.decode) return decodeCsv(results);
    std::ostringstream o;
    o << "kind,dtype,layout,batch,heads,kv_heads,n,head_dim,value_dim,causal,degree,sketch_size,block_size,local_exact,"
         "status,median_ms,min_ms,max_ms,ms_per_token,tflops,flop,workspace_bytes,feature_map_ms,block_states_ms,prefix_ms,output_ms,"
         "peer,peer_median_ms,peer_min_ms,peer_max_ms,speedup_vs_peer,reason,timing,warmup_runs,warmup_ms,timed_start_unix,"
         "timed_end_unix,plan,host_median_ms,host_plan\n";
    for (const Result& r : results) {
        const Config& c = r.config;
        const bool ps = c.kind == PSK_ATTENTION_KIND_POLYSKETCH;
        o << cli::kindName(c.kind) << ',' << cli::dataTypeName(c.dtype) << ',' << cli::layoutName(c.layout) << ',' << c.batch << ','
          << c.heads << ',' << c.kvHeads << ',' << c.n << ',' << c.headDim << ',' << c.valueDim << ',' << (c.causal ? "causal" : "full")
          << ',' << (c.degree ? u(c.degree) : "") << ',' << (ps ? u(c.sketchSize) : "") << ',' << (ps ? u(c.blockSize) : "") << ','
          << (ps ? (c.localExact ? "1" : "0") : "") << ',' << (r.ok ? "ok" : "skipped") << ',';
        if (r.ok)
            o << number(r.gpu.medianMs) << ',' << number(r.gpu.minMs) << ',' << number(r.gpu.maxMs) << ',' << number(msPerToken(r)) << ','
              << number(tflops(r)) << ',';
        else
            o << ",,,,,";
        o << number(r.flops, 15) << ',' << (r.ok ? u(r.workspaceBytes) : "") << ',';
        for (uint32_t st = 0; st < PSK_FORWARD_STAGE_COUNT; ++st) o << (r.ok ? number(r.stageMedianMs[st]) : "") << ',';
        std::string peerReason;
        if (info.peer.name.empty()) {
            o << ",,,,";
        } else if (!info.peer.available) {
            o << info.peer.name << ",,,,";
            peerReason = "peer unavailable: " + info.peer.reason;
        } else if (r.peerOk) {
            o << info.peer.name << ',' << number(r.peer.medianMs) << ',' << number(r.peer.minMs) << ',' << number(r.peer.maxMs) << ',';
            if (r.ok && r.gpu.medianMs > 0) o << number(r.peer.medianMs / r.gpu.medianMs, 4);
        } else {
            o << info.peer.name << ",,,,";
            peerReason = "peer skipped: " + r.peerReason;
        }
        std::string reason = r.ok ? "" : r.reason;
        if (!peerReason.empty()) reason += (reason.empty() ? "" : "; ") + peerReason;
        o << ',' << csvField(reason) << ',' << r.timing << ',';
        if (r.ok)
            o << r.warmupRuns << ',' << number(r.warmupMs) << ',' << number(r.timedStartUnix, 16) << ',' << number(r.timedEndUnix, 16)
              << ',' << csvField(r.plan) << ',' << (r.hostOk ? number(r.host.medianMs) : "") << ',' << csvField(r.hostPlan);
        else
            o << ",,,,,,";
        o << '\n';
    }
    return o.str();
}

bool writeText(const std::string& path, const std::string& text, std::string& error) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
        error = "cannot create " + path + ": " + std::strerror(errno);
        return false;
    }
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) {
        error = "cannot write " + path;
        return false;
    }
    return true;
}

}  // namespace psk::bench
