/* st.c: the .safetensors reader and writer of tinylm (see st.h). */
#define _POSIX_C_SOURCE 200809L
#include "st.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define ST_MAX_HEADER 100000000ull /* huggingface/safetensors' MAX_HEADER_SIZE */

static int fail(StError* err, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
    return 1;
}

static char* dupString(const char* s, size_t n) {
    char* p = (char*)malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

size_t stDtypeBytes(StDtype dtype) {
    switch (dtype) {
        case ST_F32:
        case ST_I32: return 4;
        case ST_U8: return 1;
        default: return 0;
    }
}

/* Bytes per element of any dtype name the format defines (0: unknown). */
static size_t dtypeNameBytes(const char* name) {
    static const struct {
        const char* name;
        size_t bytes;
    } table[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
                 {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
    size_t i;
    for (i = 0; i < sizeof table / sizeof table[0]; ++i)
        if (strcmp(table[i].name, name) == 0) return table[i].bytes;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Just enough JSON for the header: objects, arrays, strings, non-negative integers; other values
 * are skipped where they are allowed (unknown keys of a tensor entry).
 * ------------------------------------------------------------------------------------------- */

typedef struct Json {
    const char* p;
    const char* end;
    const char* begin;
    StError* err;
    const char* path;
} Json;

static int jsonFail(Json* j, const char* what) {
    return fail(j->err, "\"%s\": safetensors header: %s at byte %ld of the JSON header", j->path, what,
                (long)(j->p - j->begin));
}

static void skipWs(Json* j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) ++j->p;
}

static int expect(Json* j, char c) {
    skipWs(j);
    if (j->p >= j->end || *j->p != c) {
        char what[64];
        snprintf(what, sizeof what, "expected '%c'", c);
        return jsonFail(j, what);
    }
    ++j->p;
    return 0;
}

static int peek(Json* j, char c) {
    skipWs(j);
    return j->p < j->end && *j->p == c;
}

static int hexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int readHex4(Json* j, unsigned* out) {
    int i;
    unsigned v = 0;
    if (j->end - j->p < 4) return jsonFail(j, "truncated \\u escape");
    for (i = 0; i < 4; ++i) {
        const int d = hexDigit(j->p[i]);
        if (d < 0) return jsonFail(j, "bad \\u escape");
        v = v * 16 + (unsigned)d;
    }
    j->p += 4;
    *out = v;
    return 0;
}

/* Parses a string into a malloc'ed, NUL-terminated UTF-8 copy (*out). */
static int parseString(Json* j, char** out) {
    size_t cap = 32, len = 0;
    char* s;
    if (expect(j, '"')) return 1;
    s = (char*)malloc(cap);
    if (!s) return jsonFail(j, "out of memory");
    for (;;) {
        unsigned cp;
        if (j->p >= j->end) {
            free(s);
            return jsonFail(j, "unterminated string");
        }
        if (len + 8 >= cap) {
            char* t = (char*)realloc(s, cap * 2);
            if (!t) {
                free(s);
                return jsonFail(j, "out of memory");
            }
            s = t;
            cap *= 2;
        }
        if (*j->p == '"') {
            ++j->p;
            break;
        }
        if ((unsigned char)*j->p < 0x20) {
            free(s);
            return jsonFail(j, "control character in a string");
        }
        if (*j->p != '\\') {
            s[len++] = *j->p++;
            continue;
        }
        ++j->p;
        if (j->p >= j->end) {
            free(s);
            return jsonFail(j, "unterminated escape");
        }
        switch (*j->p++) {
            case '"': s[len++] = '"'; continue;
            case '\\': s[len++] = '\\'; continue;
            case '/': s[len++] = '/'; continue;
            case 'b': s[len++] = '\b'; continue;
            case 'f': s[len++] = '\f'; continue;
            case 'n': s[len++] = '\n'; continue;
            case 'r': s[len++] = '\r'; continue;
            case 't': s[len++] = '\t'; continue;
            case 'u': break;
            default: free(s); return jsonFail(j, "bad escape");
        }
        if (readHex4(j, &cp)) {
            free(s);
            return 1;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
            unsigned lo;
            if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u') {
                free(s);
                return jsonFail(j, "unpaired surrogate");
            }
            j->p += 2;
            if (readHex4(j, &lo)) {
                free(s);
                return 1;
            }
            if (lo < 0xDC00 || lo > 0xDFFF) {
                free(s);
                return jsonFail(j, "unpaired surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            free(s);
            return jsonFail(j, "unpaired surrogate");
        }
        if (cp == 0) {
            free(s);
            return jsonFail(j, "NUL in a string");
        }
        if (cp < 0x80) {
            s[len++] = (char)cp;
        } else if (cp < 0x800) {
            s[len++] = (char)(0xC0 | (cp >> 6));
            s[len++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            s[len++] = (char)(0xE0 | (cp >> 12));
            s[len++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            s[len++] = (char)(0x80 | (cp & 0x3F));
        } else {
            s[len++] = (char)(0xF0 | (cp >> 18));
            s[len++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            s[len++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            s[len++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    s[len] = '\0';
    if (strlen(s) != len) { /* a raw NUL byte */
        free(s);
        return jsonFail(j, "NUL in a string");
    }
    *out = s;
    return 0;
}

static int parseUint(Json* j, uint64_t* out) {
    uint64_t v = 0;
    int digits = 0;
    skipWs(j);
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > (UINT64_MAX - 9) / 10) return jsonFail(j, "integer too large");
        v = v * 10 + (uint64_t)(*j->p - '0');
        ++j->p;
        ++digits;
    }
    if (!digits) return jsonFail(j, "expected a non-negative integer");
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) return jsonFail(j, "expected an integer");
    *out = v;
    return 0;
}

static int skipValue(Json* j, int depth) {
    skipWs(j);
    if (depth > 64) return jsonFail(j, "nesting too deep");
    if (j->p >= j->end) return jsonFail(j, "unexpected end");
    if (*j->p == '"') {
        char* s;
        if (parseString(j, &s)) return 1;
        free(s);
        return 0;
    }
    if (*j->p == '{' || *j->p == '[') {
        const char close = *j->p == '{' ? '}' : ']';
        const int object = *j->p == '{';
        ++j->p;
        if (peek(j, close)) {
            ++j->p;
            return 0;
        }
        for (;;) {
            if (object) {
                char* k;
                if (parseString(j, &k)) return 1;
                free(k);
                if (expect(j, ':')) return 1;
            }
            if (skipValue(j, depth + 1)) return 1;
            if (peek(j, ',')) {
                ++j->p;
                continue;
            }
            return expect(j, close);
        }
    }
    /* numbers, true, false, null */
    {
        const char* start = j->p;
        while (j->p < j->end && (strchr("+-.eE0123456789", *j->p) || (*j->p >= 'a' && *j->p <= 'z'))) ++j->p;
        if (j->p == start) return jsonFail(j, "unexpected character");
    }
    return 0;
}

static int parseUintArray(Json* j, uint64_t* values, uint32_t max, uint32_t* count, const char* what) {
    *count = 0;
    if (expect(j, '[')) return 1;
    if (peek(j, ']')) {
        ++j->p;
        return 0;
    }
    for (;;) {
        if (*count == max) {
            char m[96];
            snprintf(m, sizeof m, "%s has more than %u entries", what, max);
            return jsonFail(j, m);
        }
        if (parseUint(j, &values[(*count)++])) return 1;
        if (peek(j, ',')) {
            ++j->p;
            continue;
        }
        return expect(j, ']');
    }
}

static int parseTensor(Json* j, StTensor* t) {
    int haveDtype = 0, haveShape = 0, haveOffsets = 0;
    if (expect(j, '{')) return 1;
    if (!peek(j, '}')) {
        for (;;) {
            char* key;
            if (parseString(j, &key)) return 1;
            if (expect(j, ':')) {
                free(key);
                return 1;
            }
            if (strcmp(key, "dtype") == 0) {
                char* d;
                free(key);
                if (parseString(j, &d)) return 1;
                if (strlen(d) >= sizeof t->dtypeName || !dtypeNameBytes(d)) {
                    fail(j->err, "\"%s\": tensor \"%s\" has an unknown dtype \"%s\"", j->path, t->name, d);
                    free(d);
                    return 1;
                }
                strcpy(t->dtypeName, d);
                free(d);
                t->dtype = strcmp(t->dtypeName, "F32") == 0   ? ST_F32
                           : strcmp(t->dtypeName, "I32") == 0 ? ST_I32
                           : strcmp(t->dtypeName, "U8") == 0  ? ST_U8
                                                              : ST_OTHER;
                haveDtype = 1;
            } else if (strcmp(key, "shape") == 0) {
                free(key);
                if (parseUintArray(j, t->shape, ST_MAX_DIMS, &t->ndim, "shape")) return 1;
                haveShape = 1;
            } else if (strcmp(key, "data_offsets") == 0) {
                uint64_t v[2];
                uint32_t n;
                free(key);
                if (parseUintArray(j, v, 2, &n, "data_offsets")) return 1;
                if (n != 2) return fail(j->err, "\"%s\": tensor \"%s\": data_offsets needs 2 entries", j->path, t->name);
                t->begin = v[0];
                t->end = v[1];
                haveOffsets = 1;
            } else {
                free(key);
                if (skipValue(j, 1)) return 1;
            }
            if (peek(j, ',')) {
                ++j->p;
                continue;
            }
            break;
        }
    }
    if (expect(j, '}')) return 1;
    if (!haveDtype || !haveShape || !haveOffsets)
        return fail(j->err, "\"%s\": tensor \"%s\" lacks %s", j->path, t->name,
                    !haveDtype ? "\"dtype\"" : !haveShape ? "\"shape\"" : "\"data_offsets\"");
    return 0;
}

static int compareBegin(const void* a, const void* b) {
    const StTensor* x = *(const StTensor* const*)a;
    const StTensor* y = *(const StTensor* const*)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static int parseHeader(StFile* f, const char* text, size_t size, uint64_t dataBytes, StError* err) {
    Json j;
    size_t cap = 0, i;
    j.p = j.begin = text;
    j.end = text + size;
    j.err = err;
    j.path = f->path;
    if (expect(&j, '{')) return 1;
    if (peek(&j, '}')) {
        ++j.p;
    } else {
        for (;;) {
            char* key;
            if (parseString(&j, &key)) return 1;
            if (expect(&j, ':')) {
                free(key);
                return 1;
            }
            if (strcmp(key, "__metadata__") == 0) {
                free(key);
                if (f->meta) return fail(err, "\"%s\": two __metadata__ entries", f->path);
                if (expect(&j, '{')) return 1;
                f->meta = (StMeta*)calloc(1, sizeof(StMeta));
                if (!peek(&j, '}')) {
                    size_t metaCap = 0;
                    for (;;) {
                        StMeta m;
                        if (parseString(&j, &m.key)) return 1;
                        if (expect(&j, ':')) {
                            free(m.key);
                            return 1;
                        }
                        if (!peek(&j, '"')) {
                            fail(err, "\"%s\": __metadata__ \"%s\" is not a string", f->path, m.key);
                            free(m.key);
                            return 1;
                        }
                        if (parseString(&j, &m.value)) {
                            free(m.key);
                            return 1;
                        }
                        if (stMeta(f, m.key)) {
                            fail(err, "\"%s\": __metadata__ \"%s\" appears twice", f->path, m.key);
                            free(m.key);
                            free(m.value);
                            return 1;
                        }
                        if (f->metaCount == metaCap) {
                            StMeta* t;
                            metaCap = metaCap ? metaCap * 2 : 16;
                            t = (StMeta*)realloc(f->meta, metaCap * sizeof(StMeta));
                            if (!t) return fail(err, "out of memory");
                            f->meta = t;
                        }
                        f->meta[f->metaCount++] = m;
                        if (peek(&j, ',')) {
                            ++j.p;
                            continue;
                        }
                        break;
                    }
                }
                if (expect(&j, '}')) return 1;
            } else {
                StTensor* t;
                if (stFind(f, key)) {
                    fail(err, "\"%s\": tensor \"%s\" appears twice", f->path, key);
                    free(key);
                    return 1;
                }
                if (f->tensorCount == cap) {
                    StTensor* n;
                    cap = cap ? cap * 2 : 64;
                    n = (StTensor*)realloc(f->tensors, cap * sizeof(StTensor));
                    if (!n) {
                        free(key);
                        return fail(err, "out of memory");
                    }
                    f->tensors = n;
                }
                t = &f->tensors[f->tensorCount++];
                memset(t, 0, sizeof *t);
                t->name = key;
                if (parseTensor(&j, t)) return 1;
            }
            if (peek(&j, ',')) {
                ++j.p;
                continue;
            }
            break;
        }
        if (expect(&j, '}')) return 1;
    }
    skipWs(&j);
    if (j.p != j.end) return jsonFail(&j, "trailing bytes after the header object");

    /* Ranges: inside the data buffer, the size the shape gives, no byte in two tensors. */
    for (i = 0; i < f->tensorCount; ++i) {
        const StTensor* t = &f->tensors[i];
        uint64_t bytes = dtypeNameBytes(t->dtypeName);
        uint32_t d;
        for (d = 0; d < t->ndim; ++d) {
            if (t->shape[d] && bytes > UINT64_MAX / t->shape[d])
                return fail(err, "\"%s\": tensor \"%s\": shape too large", f->path, t->name);
            bytes *= t->shape[d];
        }
        if (t->begin > t->end)
            return fail(err, "\"%s\": tensor \"%s\": data_offsets [%llu, %llu] run backwards", f->path, t->name,
                        (unsigned long long)t->begin, (unsigned long long)t->end);
        if (t->end > dataBytes)
            return fail(err,
                        "\"%s\": tensor \"%s\": data_offsets end %llu lies beyond the data (%llu bytes): the file is "
                        "truncated",
                        f->path, t->name, (unsigned long long)t->end, (unsigned long long)dataBytes);
        if (t->end - t->begin != bytes)
            return fail(err, "\"%s\": tensor \"%s\": %llu bytes in data_offsets, but its dtype %s and shape need %llu",
                        f->path, t->name, (unsigned long long)(t->end - t->begin), t->dtypeName,
                        (unsigned long long)bytes);
    }
    if (f->tensorCount > 1) {
        const StTensor** order = (const StTensor**)malloc(f->tensorCount * sizeof *order);
        const StTensor* last = NULL;
        if (!order) return fail(err, "out of memory");
        for (i = 0; i < f->tensorCount; ++i) order[i] = &f->tensors[i];
        qsort(order, f->tensorCount, sizeof *order, compareBegin);
        for (i = 0; i < f->tensorCount; ++i) {
            if (order[i]->begin == order[i]->end) continue; /* empty: holds no byte */
            if (last && order[i]->begin < last->end) {
                fail(err, "\"%s\": tensors \"%s\" and \"%s\" overlap in the data buffer", f->path, last->name,
                     order[i]->name);
                free((void*)order);
                return 1;
            }
            last = order[i];
        }
        free((void*)order);
    }
    return 0;
}

static uint64_t readLe64(const unsigned char* b) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; --i) v = (v << 8) | b[i];
    return v;
}

int stOpen(const char* path, StFile* f, StError* err) {
    struct stat st;
    unsigned char len[8];
    uint64_t headerBytes;
    char* text;
    memset(f, 0, sizeof *f);
    f->path = dupString(path, strlen(path));
    if (!f->path) return fail(err, "out of memory");
    if (stat(path, &st) != 0) return fail(err, "cannot open \"%s\": no such file", path);
    if (!S_ISREG(st.st_mode)) return fail(err, "\"%s\" is not a regular file", path);
    f->fileSize = (uint64_t)st.st_size;
    f->file = fopen(path, "rb");
    if (!f->file) return fail(err, "cannot open \"%s\" for reading", path);
    if (f->fileSize < 8)
        return fail(err, "\"%s\": truncated: %llu bytes, fewer than the 8-byte header length", path,
                    (unsigned long long)f->fileSize);
    if (fread(len, 1, 8, f->file) != 8) return fail(err, "\"%s\": cannot read the header length", path);
    headerBytes = readLe64(len);
    if (headerBytes > ST_MAX_HEADER)
        return fail(err, "\"%s\": header length %llu exceeds the format's limit of %llu bytes (not a safetensors file?)",
                    path, (unsigned long long)headerBytes, ST_MAX_HEADER);
    if (headerBytes > f->fileSize - 8)
        return fail(err, "\"%s\": header length %llu runs past the end of the file (%llu bytes): truncated", path,
                    (unsigned long long)headerBytes, (unsigned long long)f->fileSize);
    text = (char*)malloc((size_t)headerBytes + 1);
    if (!text) return fail(err, "out of memory");
    if (fread(text, 1, (size_t)headerBytes, f->file) != (size_t)headerBytes) {
        free(text);
        return fail(err, "\"%s\": cannot read the header", path);
    }
    f->dataStart = 8 + headerBytes;
    if (parseHeader(f, text, (size_t)headerBytes, f->fileSize - f->dataStart, err)) {
        free(text);
        return 1;
    }
    free(text);
    return 0;
}

void stClose(StFile* f) {
    size_t i;
    if (f->file) fclose(f->file);
    for (i = 0; i < f->tensorCount; ++i) free(f->tensors[i].name);
    for (i = 0; i < f->metaCount; ++i) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->tensors);
    free(f->meta);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const StTensor* stFind(const StFile* f, const char* name) {
    size_t i;
    for (i = 0; i < f->tensorCount; ++i)
        if (f->tensors[i].name && strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char* stMeta(const StFile* f, const char* key) {
    size_t i;
    for (i = 0; i < f->metaCount; ++i)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

uint64_t stElements(const StTensor* t) {
    uint64_t n = 1;
    uint32_t d;
    for (d = 0; d < t->ndim; ++d) n *= t->shape[d];
    return n;
}

int stRead(StFile* f, const StTensor* t, void* dst, StError* err) {
    const uint64_t bytes = t->end - t->begin;
    if (!bytes) return 0;
    if (fseeko(f->file, (off_t)(f->dataStart + t->begin), SEEK_SET) != 0 || fread(dst, 1, (size_t)bytes, f->file) != bytes)
        return fail(err, "\"%s\": cannot read %llu bytes of tensor \"%s\" (did the file change?)", f->path,
                    (unsigned long long)bytes, t->name);
    return 0;
}

/* ---- Writing ---- */

static void jsonString(FILE* out, const char* s) {
    fputc('"', out);
    for (; *s; ++s) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static const char* dtypeName(StDtype d) { return d == ST_F32 ? "F32" : d == ST_I32 ? "I32" : "U8"; }

int stWrite(const char* path, const StWriteTensor* tensors, size_t count, const StMeta* meta, size_t metaCount,
            uint64_t truncateTo, StError* err) {
    FILE* header = tmpfile();
    FILE* out;
    long headerLen;
    uint64_t offset = 0, written = 0, padded;
    size_t i;
    unsigned char len[8];
    char* headerText;
    if (!header) return fail(err, "cannot create a temporary file");
    fputc('{', header);
    if (metaCount) {
        fputs("\"__metadata__\":{", header);
        for (i = 0; i < metaCount; ++i) {
            if (i) fputc(',', header);
            jsonString(header, meta[i].key);
            fputc(':', header);
            jsonString(header, meta[i].value);
        }
        fputc('}', header);
    }
    for (i = 0; i < count; ++i) {
        const StWriteTensor* t = &tensors[i];
        uint64_t bytes = stDtypeBytes(t->dtype);
        uint32_t d;
        for (d = 0; d < t->ndim; ++d) bytes *= t->shape[d];
        if (metaCount || i) fputc(',', header);
        jsonString(header, t->name);
        fprintf(header, ":{\"dtype\":\"%s\",\"shape\":[", dtypeName(t->dtype));
        for (d = 0; d < t->ndim; ++d) fprintf(header, d ? ",%llu" : "%llu", (unsigned long long)t->shape[d]);
        fprintf(header, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset, (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    fputc('}', header);
    headerLen = ftell(header);
    padded = ((uint64_t)headerLen + 7) / 8 * 8; /* as the reference writer: data 8-byte aligned */
    headerText = (char*)malloc((size_t)padded);
    if (!headerText) {
        fclose(header);
        return fail(err, "out of memory");
    }
    rewind(header);
    if (fread(headerText, 1, (size_t)headerLen, header) != (size_t)headerLen) {
        fclose(header);
        free(headerText);
        return fail(err, "cannot read back the temporary header");
    }
    fclose(header);
    memset(headerText + headerLen, ' ', (size_t)(padded - (uint64_t)headerLen));
    out = fopen(path, "wb");
    if (!out) {
        free(headerText);
        return fail(err, "cannot create \"%s\"", path);
    }
    for (i = 0; i < 8; ++i) len[i] = (unsigned char)((padded >> (8 * i)) & 0xFF);
    fwrite(len, 1, 8, out);
    fwrite(headerText, 1, (size_t)padded, out);
    free(headerText);
    written = 8 + padded;
    for (i = 0; i < count; ++i) {
        const StWriteTensor* t = &tensors[i];
        uint64_t bytes = stDtypeBytes(t->dtype);
        uint32_t d;
        for (d = 0; d < t->ndim; ++d) bytes *= t->shape[d];
        if (bytes && fwrite(t->data, 1, (size_t)bytes, out) != bytes) {
            fclose(out);
            return fail(err, "cannot write \"%s\"", path);
        }
        written += bytes;
    }
    if (fclose(out) != 0) return fail(err, "cannot write \"%s\"", path);
    if (truncateTo && truncateTo < written && truncate(path, (off_t)truncateTo) != 0)
        return fail(err, "cannot truncate \"%s\"", path);
    return 0;
}
