#include "forward/tuning_table.hpp"

#include <cstdio>
#include <sstream>

#include "util/bounded_file.hpp"
#include "util/error.hpp"

namespace psk {

namespace {

struct ParameterInfo {
    const char* name;
    uint32_t min, max;  // the values a table may give (the planner checks what fits a device)
};
// Indexed by TuningParameter.
constexpr ParameterInfo kParameters[kTuningParameterCount] = {
    {"states.walk_min_groups", 1, UINT32_MAX},
    {"output.feat_chunk", 1, 1024},
    {"output.key_tile", 1, 1024},
    {"output.wn", 1, 64},
    {"features.tile", 0, 15},
    {"features.rows", 1, 1024},
    {"baselines.tile", 0, 15},
    {"output.cooperative", 0, 1},
    {"output.sg_m", 1, 16},
    {"features.learned_tile", 0, 64},
    {"baselines.fp32_tile", 0, 15},
    {"float32.cooperative", 0, 1},
    {"baselines.fp32_rows", 0, 1},
    {"output.stage_batch", 1, 32},
    {"states.sg_m", 1, 16},
    {"output.z_packed", 0, 1},
    {"output.generic_rows", 0, 1},
    {"generic.stage_rolled", 0, 1},
    {"prefix.pack_min_groups", 1, UINT32_MAX},
};

// Bounds that keep a hostile or broken file from costing more than a small one.
constexpr size_t kMaxTableBytes = 1u << 20;
constexpr size_t kMaxEntries = 4096;
constexpr size_t kMaxChipIds = 64;

std::string entries(size_t n) { return cat(n, n == 1 ? " entry" : " entries"); }

const char* typeName(PskDataType t) { return t == PSK_DATA_TYPE_FLOAT16 ? "f16" : t == PSK_DATA_TYPE_BFLOAT16 ? "bf16" : "f32"; }

std::string hex(uint32_t v) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%x", v);
    return text;
}

/** `text` less what a quoted word cannot hold (quotes, '#', control characters). */
std::string quotable(const std::string& text) {
    std::string kept;
    for (char c : text)
        if (c != '"' && c != '#' && static_cast<unsigned char>(c) >= 0x20) kept += c;
    return kept;
}

/** One line's words: whitespace-separated, `name="..."` quoted (no escapes), the comment cut off. */
class LineWords {
public:
    LineWords(std::string_view line, const std::string& where) {
        size_t i = 0;
        while (i < line.size()) {
            const char c = line[i];
            if (c == '#') break;
            if (c == ' ' || c == '\t') {
                ++i;
                continue;
            }
            std::string word;
            bool quoted = false;
            while (i < line.size() && (quoted || (line[i] != ' ' && line[i] != '\t' && line[i] != '#'))) {
                if (line[i] == '"') quoted = !quoted;
                else word += line[i];
                ++i;
            }
            if (quoted) fail(PSK_ERROR_BAD_FILE, where, ": a quote is not closed");
            words.push_back(std::move(word));
        }
    }
    std::vector<std::string> words;
};

/** A decimal or 0x-hexadecimal unsigned 32-bit number, nothing else. */
bool parseNumber(const std::string& text, uint32_t* out) {
    if (text.empty() || text.size() > 12) return false;
    int base = 10;
    size_t i = 0;
    if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        base = 16;
        i = 2;
    }
    uint64_t v = 0;
    for (; i < text.size(); ++i) {
        const char c = text[i];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return false;
        v = v * base + d;
        if (v > UINT32_MAX) return false;
    }
    *out = uint32_t(v);
    return true;
}

uint32_t number(const std::string& text, const std::string& where, const char* what) {
    uint32_t v = 0;
    if (!parseNumber(text, &v)) fail(PSK_ERROR_BAD_FILE, where, ": ", what, " '", text, "' is not a 32-bit unsigned number");
    return v;
}

bool flag(const std::string& text, const std::string& where, const char* what) {
    if (text == "0") return false;
    if (text == "1") return true;
    fail(PSK_ERROR_BAD_FILE, where, ": ", what, " takes 0 or 1, not '", text, "'");
}

/** Splits "key=value"; fails without '='. */
std::pair<std::string, std::string> keyValue(const std::string& word, const std::string& where) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) fail(PSK_ERROR_BAD_FILE, where, ": '", word, "' is not key=value");
    return {word.substr(0, eq), word.substr(eq + 1)};
}

TuningDevice parseDevice(const std::vector<std::string>& words, const std::string& where) {
    TuningDevice d;
    if (words.size() == 2 && words[1] == "any") {
        d.any = true;
        return d;
    }
    bool vendor = false, id = false, chipIds = false;
    for (size_t i = 1; i < words.size(); ++i) {
        const auto [k, v] = keyValue(words[i], where);
        if (k == "vendor" && !vendor) {
            d.vendorId = number(v, where, "vendor");
            vendor = true;
        } else if (k == "id" && !id) {
            d.deviceId = number(v, where, "id");
            id = true;
        } else if (k == "driver" && !d.driverVersion) {
            d.driverVersion = number(v, where, "driver");
        } else if (k == "name" && d.name.empty()) {
            d.name = v;
        } else if (k == "chip" && d.chip.empty()) {
            d.chip = v;
        } else if (k == "chip_ids" && !chipIds) {
            chipIds = true;
            size_t begin = 0;
            while (begin <= v.size()) {
                size_t end = v.find(',', begin);
                if (end == std::string::npos) end = v.size();
                if (d.chipIds.size() >= kMaxChipIds) fail(PSK_ERROR_BAD_FILE, where, ": chip_ids lists more than ", kMaxChipIds, " ids");
                const uint32_t sibling = number(v.substr(begin, end - begin), where, "a chip id");
                for (uint32_t other : d.chipIds)
                    if (other == sibling) fail(PSK_ERROR_BAD_FILE, where, ": chip id ", hex(sibling), " is listed twice");
                d.chipIds.push_back(sibling);
                begin = end + 1;
            }
        } else {
            fail(PSK_ERROR_BAD_FILE, where,
                 ": the device line takes vendor, id, driver, name, chip and chip_ids once each (or is 'device any'), not '", k, "'");
        }
    }
    if (!vendor || !id) fail(PSK_ERROR_BAD_FILE, where, ": the device line needs vendor= and id= (or is 'device any')");
    for (uint32_t sibling : d.chipIds)
        if (sibling == d.deviceId) fail(PSK_ERROR_BAD_FILE, where, ": chip_ids lists the table's own id ", hex(sibling), " (it names the others)");
    return d;
}

TuningEntry parseEntry(const std::vector<std::string>& words, const std::string& where, uint32_t line) {
    TuningEntry e;
    e.line = line;
    const std::optional<TuningParameter> p = tuningParameterNamed(words[0]);
    if (!p) {
        std::string known;
        for (uint32_t i = 0; i < kTuningParameterCount; ++i) known += std::string(i ? ", " : "") + kParameters[i].name;
        fail(PSK_ERROR_BAD_FILE, where, ": unknown parameter '", words[0], "' (known: ", known, ")");
    }
    e.parameter = *p;
    if (words.size() < 2) fail(PSK_ERROR_BAD_FILE, where, ": ", words[0], " needs a value");
    const ParameterInfo& info = kParameters[uint32_t(*p)];
    e.value = number(words[1], where, "the value");
    if (e.value < info.min || e.value > info.max)
        fail(PSK_ERROR_BAD_FILE, where, ": ", info.name, " takes ", info.min, " to ", info.max, ", not ", e.value);
    TuningKey& key = e.key;
    for (size_t i = 2; i < words.size(); ++i) {
        // Named copies, not a structured binding: clang before 16 cannot capture those in a lambda.
        const auto kv = keyValue(words[i], where);
        const auto& k = kv.first;
        const auto& v = kv.second;
        auto once = [&](bool set) {
            if (set) fail(PSK_ERROR_BAD_FILE, where, ": key '", k, "' given twice");
        };
        if (k == "h") {
            once(key.headDim.has_value());
            key.headDim = number(v, where, "h");
        } else if (k == "dv") {
            once(key.valueDim.has_value());
            key.valueDim = number(v, where, "dv");
        } else if (k == "r") {
            once(key.sketchLength.has_value());
            key.sketchLength = number(v, where, "r");
        } else if (k == "p") {
            once(key.degree.has_value());
            key.degree = number(v, where, "p");
        } else if (k == "type") {
            once(key.type.has_value());
            if (v == "f32") key.type = PSK_DATA_TYPE_FLOAT32;
            else if (v == "f16") key.type = PSK_DATA_TYPE_FLOAT16;
            else if (v == "bf16") key.type = PSK_DATA_TYPE_BFLOAT16;
            else fail(PSK_ERROR_BAD_FILE, where, ": type takes f32, f16 or bf16, not '", v, "'");
        } else if (k == "causal") {
            once(key.causal.has_value());
            key.causal = flag(v, where, "causal");
        } else if (k == "local") {
            once(key.localExact.has_value());
            key.localExact = flag(v, where, "local");
        } else if (k == "sketch") {
            once(key.learned.has_value());
            if (v != "random" && v != "learned") fail(PSK_ERROR_BAD_FILE, where, ": sketch takes random or learned, not '", v, "'");
            key.learned = v == "learned";
        } else {
            fail(PSK_ERROR_BAD_FILE, where, ": unknown key '", k, "' (known: h, dv, r, p, type, causal, local, sketch)");
        }
    }
    return e;
}

}  // namespace

const char* tuningParameterName(TuningParameter parameter) {
    const uint32_t i = uint32_t(parameter);
    return i < kTuningParameterCount ? kParameters[i].name : "?";
}

std::optional<TuningParameter> tuningParameterNamed(std::string_view name) {
    for (uint32_t i = 0; i < kTuningParameterCount; ++i)
        if (name == kParameters[i].name) return TuningParameter(i);
    return std::nullopt;
}

bool TuningKey::matches(const TuningShape& s) const {
    return (!headDim || *headDim == s.headDim) && (!valueDim || *valueDim == s.valueDim) &&
           (!sketchLength || *sketchLength == s.sketchLength) && (!degree || *degree == s.degree) && (!type || *type == s.type) &&
           (!causal || *causal == s.causal) && (!localExact || *localExact == s.localExact) && (!learned || *learned == s.learned);
}

uint32_t TuningKey::specificity() const {
    return uint32_t(headDim.has_value()) + valueDim.has_value() + sketchLength.has_value() + degree.has_value() + type.has_value() +
           causal.has_value() + localExact.has_value() + learned.has_value();
}

std::string TuningKey::describe() const {
    std::string s;
    auto add = [&](const std::string& part) { s += (s.empty() ? "" : " ") + part; };
    if (headDim) add(cat("h=", *headDim));
    if (valueDim) add(cat("dv=", *valueDim));
    if (sketchLength) add(cat("r=", *sketchLength));
    if (degree) add(cat("p=", *degree));
    if (type) add(cat("type=", typeName(*type)));
    if (causal) add(cat("causal=", *causal ? 1 : 0));
    if (localExact) add(cat("local=", *localExact ? 1 : 0));
    if (learned) add(cat("sketch=", *learned ? "learned" : "random"));
    return s;
}

bool TuningKey::operator==(const TuningKey& o) const {
    return headDim == o.headDim && valueDim == o.valueDim && sketchLength == o.sketchLength && degree == o.degree && type == o.type &&
           causal == o.causal && localExact == o.localExact && learned == o.learned;
}

TuningKey tuningKeyOf(const TuningShape& s) {
    TuningKey k;
    k.headDim = s.headDim;
    k.valueDim = s.valueDim;
    k.type = s.type;
    k.causal = s.causal;
    if (s.degree) k.degree = s.degree;  // softmax has none
    if (s.sketchLength) {                // the sketch's keys: polysketch only
        k.sketchLength = s.sketchLength;
        k.localExact = s.localExact;
        k.learned = s.learned;
    }
    return k;
}

const TuningEntry* TuningTable::find(TuningParameter parameter, const TuningShape& shape) const {
    const TuningEntry* best = nullptr;
    for (const TuningEntry& e : entries)
        if (e.parameter == parameter && e.key.matches(shape) && (!best || e.key.specificity() > best->key.specificity())) best = &e;
    return best;
}

TuningTable parseTuningTable(std::string_view text, const std::string& source) {
    if (text.size() > kMaxTableBytes)
        fail(PSK_ERROR_BAD_FILE, "tuning table ", source, ": ", text.size(), " bytes, more than a table may have (", kMaxTableBytes, ")");
    TuningTable table;
    table.source = source;
    enum { Format, Device, Entries } expect = Format;
    uint32_t lineNumber = 0;
    size_t begin = 0;
    while (begin <= text.size()) {
        size_t end = text.find('\n', begin);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(begin, end - begin);
        begin = end + 1;
        ++lineNumber;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        const std::string where = cat("tuning table ", source, " line ", lineNumber);
        for (char c : line)
            if (c == '\0' || (static_cast<unsigned char>(c) < 0x20 && c != '\t'))
                fail(PSK_ERROR_BAD_FILE, where, ": a control character (not a text file?)");
        const std::vector<std::string> words = LineWords(line, where).words;
        if (words.empty()) continue;
        if (expect == Format) {
            if (words.size() != 2 || words[0] != "psk-tuning")
                fail(PSK_ERROR_BAD_FILE, where, ": expected 'psk-tuning 1' (the format line) first");
            if (words[1] != "1") fail(PSK_ERROR_BAD_FILE, where, ": format version ", words[1], " is not one this library reads (1)");
            expect = Device;
        } else if (expect == Device) {
            if (words[0] != "device") fail(PSK_ERROR_BAD_FILE, where, ": expected the device line ('device vendor=... id=...' or 'device any')");
            table.device = parseDevice(words, where);
            expect = Entries;
        } else {
            if (words[0] == "device") fail(PSK_ERROR_BAD_FILE, where, ": a second device line (one table per device)");
            if (table.entries.size() >= kMaxEntries) fail(PSK_ERROR_BAD_FILE, where, ": more than ", kMaxEntries, " entries");
            TuningEntry e = parseEntry(words, where, lineNumber);
            for (const TuningEntry& other : table.entries)
                if (other.parameter == e.parameter && other.key == e.key)
                    fail(PSK_ERROR_BAD_FILE, where, ": ", tuningParameterName(e.parameter), " for the same shapes as line ", other.line);
            table.entries.push_back(e);
        }
    }
    if (expect == Format) fail(PSK_ERROR_BAD_FILE, "tuning table ", source, ": empty (no 'psk-tuning 1' line)");
    if (expect == Device) fail(PSK_ERROR_BAD_FILE, "tuning table ", source, ": no device line");
    return table;
}

TuningTable loadTuningTable(const std::string& path) {
    return parseTuningTable(readBoundedFile(path, kMaxTableBytes, "tuning table " + path), path);
}

std::string writeTuningTable(const TuningDevice& device, const std::vector<std::string>& header, const std::vector<TuningTableLine>& lines) {
    std::ostringstream out;
    auto comment = [&](const std::string& text) {
        std::istringstream split(text);
        std::string part;
        while (std::getline(split, part)) out << "# " << part << "\n";
    };
    for (const std::string& h : header) comment(h);
    out << "psk-tuning 1\n";
    if (device.any) {
        out << "device any\n";
    } else {
        out << "device vendor=" << hex(device.vendorId) << " id=" << hex(device.deviceId);
        if (device.driverVersion) out << " driver=" << hex(*device.driverVersion);
        const std::string name = quotable(device.name), chip = quotable(device.chip);
        if (!name.empty()) out << " name=\"" << name << "\"";
        if (!chip.empty()) out << " chip=\"" << chip << "\"";
        for (size_t i = 0; i < device.chipIds.size(); ++i) out << (i ? "," : " chip_ids=") << hex(device.chipIds[i]);
        out << "\n";
    }
    for (const TuningTableLine& l : lines) {
        out << "\n";
        for (const std::string& c : l.comments) comment(c);
        out << tuningParameterName(l.entry.parameter) << " " << l.entry.value;
        const std::string key = l.entry.key.describe();
        if (!key.empty()) out << " " << key;
        out << "\n";
    }
    return out.str();
}

bool TuningDevice::listsSibling(uint32_t vendor, uint32_t id) const {
    if (any || vendor != vendorId || id == deviceId) return false;
    for (uint32_t sibling : chipIds)
        if (sibling == id) return true;
    return false;
}

TuningSelection selectTuningTable(const std::string& request, const char* origin, const TuningDeviceIdentity& device,
                                  const std::vector<EmbeddedTuningTable>& builtIn) {
    TuningSelection s;
    const std::string here = cat("vendor ", hex(device.vendorId), " id ", hex(device.deviceId), " driver ", hex(device.driverVersion));
    if (request == "none") {
        s.description = cat("none (", origin, " = none): the model's choices");
        return s;
    }
    auto own = [&](const TuningTable& t) { return !t.device.any && t.device.vendorId == device.vendorId && t.device.deviceId == device.deviceId; };
    auto forThisDevice = [&](const TuningTable& t) { return own(t) || t.device.listsSibling(device.vendorId, device.deviceId); };
    auto sameDriver = [&](const TuningTable& t) { return !t.device.driverVersion || *t.device.driverVersion == device.driverVersion; };
    // What the description adds to "N entries": a sibling's table, another driver's.
    auto notes = [&](const TuningTable& t) {
        std::string n;
        if (t.device.listsSibling(device.vendorId, device.deviceId))
            n += cat("; measured on ", t.device.name.empty() ? "a device" : t.device.name, " (id ", hex(t.device.deviceId), "), ",
                     t.device.chip.empty() ? "the same chip" : cat("a ", t.device.chip), " as this device (id ", hex(device.deviceId),
                     "): applied, re-run psk tune to confirm");
        if (!sameDriver(t))
            n += cat("; measured with driver ", hex(*t.device.driverVersion), ", this device runs ", hex(device.driverVersion),
                     ": applied, re-run psk tune to confirm");
        return n;
    };
    if (!request.empty()) {
        auto table = std::make_shared<TuningTable>(loadTuningTable(request));
        if (!table->device.any && !forThisDevice(*table)) {
            s.description = cat(request, " (", origin, ") is for vendor ", hex(table->device.vendorId), " id ", hex(table->device.deviceId),
                                ", not this device (", here, "): not applied, the model's choices");
            return s;
        }
        s.description = cat(request, " (", origin, ", ", entries(table->entries.size()), table->device.any ? ", any device" : "",
                             notes(*table), ")");
        s.table = std::move(table);
        return s;
    }
    // Built in: the device's own table, else a sibling's (one listing this id among its chip's);
    // within each, one of this driver version first, then the first by name.
    std::shared_ptr<TuningTable> best;
    auto rank = [&](const TuningTable& t) { return (own(t) ? 2 : 0) + (sameDriver(t) ? 1 : 0); };
    for (const EmbeddedTuningTable& e : builtIn) {
        TuningTable t = parseTuningTable(std::string_view(reinterpret_cast<const char*>(e.text), e.size), cat("tuning/devices/", e.name));
        if (!forThisDevice(t)) continue;
        if (!best || rank(t) > rank(*best)) best = std::make_shared<TuningTable>(std::move(t));
    }
    if (!best) {
        s.description = cat("none built in for this device (", here, "): the model's choices");
        return s;
    }
    s.description = cat(best->source, " (built in, ", entries(best->entries.size()), notes(*best), ")");
    s.table = std::move(best);
    return s;
}

}  // namespace psk
