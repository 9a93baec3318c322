/*
 * tinylm: a small transformer language model (samples/tinylm/MODEL.md) run entirely on the GPU by
 * an app that owns its Vulkan device; polysketch records the attention into the app's command
 * buffers (pskCmdAttentionForward for a prompt, pskCmdDecodeStep per generated token).
 *
 *   tinylm generate MODEL --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--seed S]
 *   tinylm eval MODEL --data TASK.eval.safetensors [--limit N] [--golden G]
 *   tinylm check MODEL [--golden G] [--prompt-len P] [--tokens N]
 *   tinylm bench MODEL --context 1024,2048,... [--tokens 128] [--json FILE]
 *   tinylm --write-random-model PATH [--attention softmax|polynomial|polysketch] [...]
 * Every mode takes --device N (a Vulkan device index) and --validate (the validation layer on the
 * app's instance; any message fails the run). Exit codes: 0 success, 1 a check failed or the
 * device failed, 2 a bad model or data file or a bad command line.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model.h"
#include "st.h"

#define TOLERANCE 1e-4 /* MODEL.md: max |app - torch| / max(1, max |torch|) */

static const char* kUsage =
    "usage:\n"
    "  tinylm generate MODEL (--prompt TEXT | --prompt-tokens 1,2,3) [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
    "  tinylm eval MODEL --data TASK.eval.safetensors [--limit N] [--golden MODEL.golden.safetensors]\n"
    "  tinylm check MODEL [--golden MODEL.golden.safetensors] [--prompt-len P] [--tokens N]\n"
    "  tinylm bench MODEL --context 1024,2048,... [--tokens N] [--json FILE]\n"
    "  tinylm --write-random-model PATH [--attention softmax|polynomial|polysketch] [--sketch learned|random]\n"
    "         [--vocab V] [--d-model D] [--layers L] [--heads H] [--sketch-size R] [--block-size B]\n"
    "         [--local-exact 0|1] [--scale S] [--seed S]\n"
    "options of every mode: --device N (Vulkan device index), --validate (any validation message fails)\n"
    "exit codes: 0 success, 1 a check failed, 2 bad input (model or data file, command line)\n";

/* ---------------------------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------------------------- */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rngState = 0x9E3779B97F4A7C15ull;
static void seedRng(uint64_t seed) { rngState = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull; }
static uint64_t nextRng(void) { /* splitmix64 */
    uint64_t z = (rngState += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform(void) { return (double)(nextRng() >> 11) * (1.0 / 9007199254740992.0); }
static double gaussian(void) {
    double u = uniform(), v = uniform();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static uint32_t argmax(const float* x, uint32_t n) {
    uint32_t i, best = 0;
    for (i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Gap between the largest and the second largest logit. */
static double topGap(const float* x, uint32_t n) {
    uint32_t i;
    double a = -INFINITY, b = -INFINITY;
    for (i = 0; i < n; ++i) {
        if (x[i] > a) {
            b = a;
            a = x[i];
        } else if (x[i] > b) {
            b = x[i];
        }
    }
    return a - b;
}

static uint32_t sample(const float* logits, uint32_t n, double temperature, uint32_t topK) {
    double* p;
    uint32_t i, best;
    double sum = 0, r, threshold = -INFINITY;
    if (temperature <= 0) return argmax(logits, n);
    p = (double*)malloc(n * sizeof(double));
    if (!p) return argmax(logits, n);
    best = argmax(logits, n);
    if (topK > 0 && topK < n) { /* the k-th largest logit */
        float* sorted = (float*)malloc(n * sizeof(float));
        if (sorted) {
            uint32_t k;
            memcpy(sorted, logits, n * sizeof(float));
            for (k = 0; k < topK; ++k) { /* partial selection; n is small */
                uint32_t j, m = k;
                float t;
                for (j = k + 1; j < n; ++j)
                    if (sorted[j] > sorted[m]) m = j;
                t = sorted[k];
                sorted[k] = sorted[m];
                sorted[m] = t;
            }
            threshold = sorted[topK - 1];
            free(sorted);
        }
    }
    for (i = 0; i < n; ++i) {
        p[i] = logits[i] >= threshold ? exp(((double)logits[i] - logits[best]) / temperature) : 0.0;
        sum += p[i];
    }
    r = uniform() * sum;
    for (i = 0; i < n; ++i) {
        r -= p[i];
        if (r <= 0 && p[i] > 0) break;
    }
    free(p);
    return i < n ? i : best;
}

static int compareDouble(const void* a, const void* b) {
    const double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

static double median(double* v, size_t n) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, compareDouble);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Parses "1024,2k,32768" (k = 1024). Returns the count, 0 on a bad list. */
static size_t parseList(const char* s, uint32_t* out, size_t max) {
    size_t count = 0;
    while (*s && count < max) {
        char* end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s) return 0;
        if (*end == 'k' || *end == 'K') {
            v *= 1024;
            ++end;
        }
        if (v == 0 || v > 0xFFFFFFFFul) return 0;
        out[count++] = (uint32_t)v;
        if (*end == ',')
            s = end + 1;
        else if (*end == '\0')
            s = end;
        else
            return 0;
    }
    return *s ? 0 : count;
}

/* ---------------------------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------------------------- */

typedef struct Options {
    const char* mode;
    const char* model;
    const char* prompt;
    const char* promptTokens;
    const char* data;
    const char* golden;
    const char* context;
    const char* json;
    const char* device;
    int validate;
    uint32_t tokens;
    int tokensSet;
    double temperature;
    uint32_t topK;
    uint64_t seed;
    uint32_t limit;
    uint32_t promptLen;
    /* --write-random-model */
    const char* attention;
    const char* sketch;
    uint32_t vocab, dModel, layers, heads, sketchSize, blockSize, localExact;
    double scale;
    const char* defect;
} Options;

static int usageError(const char* fmt, const char* arg) {
    fprintf(stderr, "tinylm: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", kUsage);
    return TINYLM_EXIT_BAD_INPUT;
}

static int parseUint32(const char* s, uint32_t* out) {
    char* end;
    unsigned long v;
    if (!s || !*s || *s == '-') return 1;
    v = strtoul(s, &end, 10);
    if (*end || v > 0xFFFFFFFFul) return 1;
    *out = (uint32_t)v;
    return 0;
}

static int parseOptions(int argc, char** argv, Options* o) {
    int i;
    memset(o, 0, sizeof *o);
    o->tokens = 64;
    o->seed = 1;
    o->attention = "polysketch";
    o->sketch = "learned";
    o->vocab = 256;
    o->dModel = 64;
    o->layers = 2;
    o->heads = 2;
    o->sketchSize = 16;
    o->blockSize = 64;
    o->localExact = 1;
    if (argc < 2) return usageError("%s", "no mode given");
    if (strcmp(argv[1], "--write-random-model") == 0) {
        if (argc < 3) return usageError("%s", "--write-random-model needs a PATH");
        o->mode = "write";
        o->model = argv[2];
        i = 3;
    } else if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("%s", kUsage);
        exit(0);
    } else {
        o->mode = argv[1];
        if (strcmp(o->mode, "generate") && strcmp(o->mode, "eval") && strcmp(o->mode, "check") && strcmp(o->mode, "bench"))
            return usageError("unknown mode '%s'", o->mode);
        if (argc < 3 || argv[2][0] == '-') return usageError("%s needs a MODEL file", o->mode);
        o->model = argv[2];
        i = 3;
    }
    for (; i < argc; ++i) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (strcmp(a, "--validate") == 0) {
            o->validate = 1;
            takes = 0;
        } else if (!v) {
            return usageError("option %s needs a value", a);
        } else if (strcmp(a, "--prompt") == 0) {
            o->prompt = v;
        } else if (strcmp(a, "--prompt-tokens") == 0) {
            o->promptTokens = v;
        } else if (strcmp(a, "--data") == 0) {
            o->data = v;
        } else if (strcmp(a, "--golden") == 0) {
            o->golden = v;
        } else if (strcmp(a, "--context") == 0) {
            o->context = v;
        } else if (strcmp(a, "--json") == 0) {
            o->json = v;
        } else if (strcmp(a, "--device") == 0) {
            o->device = v;
        } else if (strcmp(a, "--tokens") == 0) {
            if (parseUint32(v, &o->tokens) || o->tokens == 0) return usageError("--tokens %s: expected a positive integer", v);
            o->tokensSet = 1;
        } else if (strcmp(a, "--temperature") == 0) {
            char* end;
            o->temperature = strtod(v, &end);
            if (*end || !(o->temperature >= 0) || o->temperature > 1e6)
                return usageError("--temperature %s: expected a number >= 0", v);
        } else if (strcmp(a, "--top-k") == 0) {
            if (parseUint32(v, &o->topK)) return usageError("--top-k %s: expected an integer >= 0", v);
        } else if (strcmp(a, "--seed") == 0) {
            char* end;
            o->seed = strtoull(v, &end, 10);
            if (*end || *v == '-') return usageError("--seed %s: expected an integer >= 0", v);
        } else if (strcmp(a, "--limit") == 0) {
            if (parseUint32(v, &o->limit) || o->limit == 0) return usageError("--limit %s: expected a positive integer", v);
        } else if (strcmp(a, "--prompt-len") == 0) {
            if (parseUint32(v, &o->promptLen) || o->promptLen == 0) return usageError("--prompt-len %s: expected a positive integer", v);
        } else if (strcmp(a, "--attention") == 0) {
            o->attention = v;
        } else if (strcmp(a, "--sketch") == 0) {
            o->sketch = v;
        } else if (strcmp(a, "--defect") == 0) {
            o->defect = v; /* hidden: broken files for the tests */
        } else if (strcmp(a, "--scale") == 0) {
            char* end;
            o->scale = strtod(v, &end);
            if (*end || !(o->scale > 0)) return usageError("--scale %s: expected a positive number", v);
        } else {
            uint32_t* target = strcmp(a, "--vocab") == 0         ? &o->vocab
                               : strcmp(a, "--d-model") == 0     ? &o->dModel
                               : strcmp(a, "--layers") == 0      ? &o->layers
                               : strcmp(a, "--heads") == 0       ? &o->heads
                               : strcmp(a, "--sketch-size") == 0 ? &o->sketchSize
                               : strcmp(a, "--block-size") == 0  ? &o->blockSize
                               : strcmp(a, "--local-exact") == 0 ? &o->localExact
                                                                 : NULL;
            if (!target) return usageError("unknown option %s", a);
            if (parseUint32(v, target)) return usageError("%s: expected a non-negative integer", a);
        }
        i += takes;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * --write-random-model: a valid MODEL.md file with random weights (tests, benchmarks); --defect
 * breaks it on purpose (the tests of bad model files).
 * ------------------------------------------------------------------------------------------- */

typedef struct RandomTensors {
    StWriteTensor t[512];
    size_t count;
    float* data[512];
} RandomTensors;

static float* addTensor(RandomTensors* r, const char* name, uint64_t d0, uint64_t d1, double mean, double stddev) {
    StWriteTensor* t = &r->t[r->count];
    const uint64_t n = d0 * (d1 ? d1 : 1);
    uint64_t i;
    float* data = (float*)malloc(n * sizeof(float));
    char* copy = (char*)malloc(strlen(name) + 1);
    if (!data || !copy || r->count == 512) {
        fprintf(stderr, "tinylm: out of memory\n");
        exit(1);
    }
    strcpy(copy, name);
    for (i = 0; i < n; ++i) data[i] = (float)(mean + stddev * gaussian());
    t->name = copy;
    t->dtype = ST_F32;
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->data = data;
    r->data[r->count++] = data;
    return data;
}

static int writeRandomModel(const Options* o) {
    RandomTensors* r = (RandomTensors*)calloc(1, sizeof(RandomTensors));
    StMeta meta[32];
    size_t metaCount = 0, i;
    char values[32][64];
    const uint32_t D = o->dModel, H = o->heads, V = o->vocab, R = o->sketchSize;
    uint32_t l, h;
    const int softmax = strcmp(o->attention, "softmax") == 0;
    const int polysketch = strcmp(o->attention, "polysketch") == 0;
    const int learned = strcmp(o->sketch, "learned") == 0;
    const char* defect = o->defect ? o->defect : "";
    uint64_t truncateTo = 0;
    StError err;
    int rc;
    if (!r) return 1;
    if (!softmax && !polysketch && strcmp(o->attention, "polynomial") != 0)
        return usageError("--attention %s: expected softmax, polynomial or polysketch", o->attention);
    if (!learned && strcmp(o->sketch, "random") != 0) return usageError("--sketch %s: expected learned or random", o->sketch);
    if (!H || !D || D % H || !V || !o->layers) return usageError("%s", "--d-model must be a positive multiple of --heads");
    h = D / H;
    seedRng(o->seed);
#define META(k, ...)                                                   \
    do {                                                               \
        snprintf(values[metaCount], sizeof values[metaCount], __VA_ARGS__); \
        meta[metaCount].key = (char*)(k);                              \
        meta[metaCount].value = values[metaCount];                     \
        ++metaCount;                                                   \
    } while (0)
    META("format", "polysketch-tinylm");
    META("format_version", "1");
    META("vocab_size", "%u", V);
    META("d_model", "%u", D);
    META("n_layers", "%u", o->layers);
    META("n_heads", "%u", H);
    META("rope_base", "10000");
    META("attention", "%s", strcmp(defect, "bad-metadata") == 0 ? "linear" : o->attention);
    if (softmax) {
        META("scale", "%.9g", 1.0 / sqrt((double)h));
    } else {
        META("degree", "4");
        META("scale", "%.9g", o->scale > 0 ? o->scale : 0.25);
    }
    if (polysketch) {
        META("sketch", "%s", o->sketch);
        META("kind", "%s", o->sketch);
        META("sketch_size", "%u", R);
        if (!learned) META("scaling", "unbiased");
        META("block_size", "%u", o->blockSize);
        META("local_exact", "%u", o->localExact ? 1u : 0u);
    }
    META("task", "random");
    META("train_context", "0");
#undef META
    addTensor(r, "tok_emb", V, D, 0, 1);
    for (l = 0; l < o->layers; ++l) {
        char name[128];
#define ADD(suffix, d0, d1, mean, sd)                                  \
    snprintf(name, sizeof name, "layers.%u.%s", l, suffix);            \
    addTensor(r, name, d0, d1, mean, sd)
        ADD("ln1.scale", D, 0, 1, 0.1);
        ADD("ln1.bias", D, 0, 0, 0.1);
        ADD("attn.wqkv", D, 3 * D, 0, 1 / sqrt((double)D));
        ADD("attn.wo", D, D, 0, 1 / sqrt((double)D));
        ADD("ln2.scale", D, 0, 1, 0.1);
        ADD("ln2.bias", D, 0, 0, 0.1);
        if (!(l == 0 && strcmp(defect, "missing-tensor") == 0)) {
            ADD("mlp.w1", D, 4 * D, 0, 1 / sqrt((double)D));
        }
        ADD("mlp.w2", 4 * D, D, 0, 1 / sqrt(4.0 * D));
        if (!softmax) {
            ADD("attn.ln.scale", h, 0, 1, 0.1);
            ADD("attn.ln.bias", h, 0, 0, 0.1);
        }
        if (polysketch && learned) {
            uint32_t b, lv;
            for (b = 1; b <= 2; ++b)
                for (lv = 0; lv < 2; ++lv) {
                    const uint32_t in = lv == 0 ? h : R;
                    char part[64];
                    snprintf(part, sizeof part, "attn.f%u.%u.ln.scale", b, lv);
                    ADD(part, in, 0, 1, 0.1);
                    snprintf(part, sizeof part, "attn.f%u.%u.ln.bias", b, lv);
                    ADD(part, in, 0, 0, 0.1);
                    if (!(l == o->layers - 1 && b == 1 && lv == 0 && strcmp(defect, "missing-sketch") == 0)) {
                        snprintf(part, sizeof part, "attn.f%u.%u.dense1", b, lv);
                        ADD(part, in, 8 * R, 0, 1 / sqrt((double)in));
                    }
                    snprintf(part, sizeof part, "attn.f%u.%u.dense2", b, lv);
                    ADD(part, 8 * R, R, 0, 1 / sqrt(8.0 * R));
                }
        } else if (polysketch) {
            ADD("attn.g1_0a", h, R, 0, 1);
            ADD("attn.g1_0b", h, R, 0, 1);
        }
#undef ADD
    }
    addTensor(r, "ln_f.scale", D, 0, 1, 0.1);
    addTensor(r, "ln_f.bias", D, 0, 0, 0.1);
    if (strcmp(defect, "wrong-shape") == 0) {
        r->t[r->count - 2].shape[0] = D - 1; /* ln_f.scale [D - 1] */
    } else if (strcmp(defect, "wrong-dtype") == 0) {
        r->t[r->count - 1].dtype = ST_I32; /* ln_f.bias as I32: the same bytes, another dtype */
    } else if (strcmp(defect, "nan") == 0) {
        r->data[0][5] = (float)NAN; /* tok_emb */
    } else if (strcmp(defect, "truncated") == 0) {
        uint64_t bytes = 0;
        for (i = 0; i < r->count; ++i) bytes += 4 * r->t[i].shape[0] * (r->t[i].ndim == 2 ? r->t[i].shape[1] : 1);
        truncateTo = bytes / 2; /* the data is at least half of the file */
    } else if (*defect && strcmp(defect, "bad-metadata") && strcmp(defect, "missing-tensor") && strcmp(defect, "missing-sketch")) {
        return usageError("--defect %s: expected missing-tensor, missing-sketch, wrong-shape, wrong-dtype, truncated, "
                          "bad-metadata or nan",
                          defect);
    }
    rc = stWrite(o->model, r->t, r->count, meta, metaCount, truncateTo, &err);
    if (rc) fprintf(stderr, "tinylm: %s\n", err.text);
    else
        printf("wrote %s: %s attention%s, V=%u D=%u L=%u H=%u h=%u%s\n", o->model, o->attention,
               polysketch ? (learned ? " (learned sketch)" : " (random sketch)") : "", V, D, o->layers, H, h,
               *defect ? " (broken on purpose)" : "");
    for (i = 0; i < r->count; ++i) {
        free((void*)r->t[i].name);
        free(r->data[i]);
    }
    free(r);
    return rc ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Reading golden and evaluation files
 * ------------------------------------------------------------------------------------------- */

/* Tensor `name` of dtype `dtype` with `ndim` dims; shape[d] == 0 means "any". Reads it (malloc). */
static int readAux(StFile* f, const char* name, StDtype dtype, uint32_t ndim, const uint64_t* shape, void** data,
                   const StTensor** tensor, StError* err) {
    const StTensor* t = stFind(f, name);
    uint32_t d;
    const char* want = dtype == ST_F32 ? "F32" : dtype == ST_I32 ? "I32" : "U8";
    if (!t) {
        snprintf(err->text, sizeof err->text, "\"%s\": missing tensor \"%s\" (MODEL.md)", f->path, name);
        return TINYLM_EXIT_BAD_INPUT;
    }
    if (t->dtype != dtype) {
        snprintf(err->text, sizeof err->text, "\"%s\": tensor \"%s\" has dtype %s, expected %s", f->path, name, t->dtypeName, want);
        return TINYLM_EXIT_BAD_INPUT;
    }
    if (t->ndim != ndim) {
        snprintf(err->text, sizeof err->text, "\"%s\": tensor \"%s\" has %u dimensions, expected %u", f->path, name, t->ndim, ndim);
        return TINYLM_EXIT_BAD_INPUT;
    }
    for (d = 0; d < ndim; ++d)
        if (shape[d] && t->shape[d] != shape[d]) {
            snprintf(err->text, sizeof err->text, "\"%s\": tensor \"%s\" has %llu entries in dimension %u, expected %llu", f->path,
                     name, (unsigned long long)t->shape[d], d, (unsigned long long)shape[d]);
            return TINYLM_EXIT_BAD_INPUT;
        }
    *data = malloc((size_t)(t->end - t->begin) + 1);
    if (!*data) {
        snprintf(err->text, sizeof err->text, "out of memory");
        return TINYLM_EXIT_FAILED;
    }
    if (stRead(f, t, *data, err)) return TINYLM_EXIT_BAD_INPUT;
    *tensor = t;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Modes
 * ------------------------------------------------------------------------------------------- */

typedef struct App {
    Options o;
    Gpu* gpu;
    Model* model;
    const ModelConfig* c;
    StError err;
} App;

static double relativeError(const float* app, const float* ref, size_t n, double* refMax) {
    size_t i;
    double maxDiff = 0, maxRef = 0;
    for (i = 0; i < n; ++i) {
        const double d = fabs((double)app[i] - ref[i]);
        if (d > maxDiff || d != d) maxDiff = d != d ? INFINITY : d;
        if (fabs(ref[i]) > maxRef) maxRef = fabs(ref[i]);
    }
    if (refMax) *refMax = maxRef;
    return maxDiff / (maxRef > 1 ? maxRef : 1);
}

/* Greedy decoding against the full forward: `prompt` tokens, then `steps` generated ones. Each
 * generated token must be the argmax of the forward's row at the same position (unless the top
 * two logits are within the tolerance: reported as a tie), and the decoded logits must match the
 * forward's within TOLERANCE. Twice: the prompt as one forward (prefill), and token by token. */
static int checkDecode(App* app, const uint32_t* prompt, uint32_t promptLen, uint32_t steps) {
    const uint32_t V = app->c->vocab;
    const uint32_t total = promptLen + steps;
    uint32_t* tokens = (uint32_t*)malloc(total * sizeof(uint32_t));
    float* decoded = (float*)malloc((size_t)steps * V * sizeof(float));
    float* forward = (float*)malloc((size_t)steps * V * sizeof(float));
    int rc = 0, pass;
    if (!tokens || !decoded || !forward) {
        free(tokens);
        free(decoded);
        free(forward);
        fprintf(stderr, "tinylm: out of memory\n");
        return 1;
    }
    memcpy(tokens, prompt, promptLen * sizeof(uint32_t));
    for (pass = 0; pass < 2 && !rc; ++pass) {
        uint32_t i, mismatches = 0, ties = 0;
        double e;
        /* decoded row i: the logits after consuming tokens[0 .. promptLen + i] */
        if ((rc = modelPrefill(app->model, tokens, promptLen, total, pass == 1, decoded, &app->err))) {
            fprintf(stderr, "tinylm: %s\n", app->err.text);
            break;
        }
        for (i = 0; i + 1 < steps && !rc; ++i) {
            tokens[promptLen + i] = argmax(decoded + (size_t)i * V, V);
            rc = modelStep(app->model, tokens[promptLen + i], decoded + (size_t)(i + 1) * V, &app->err);
        }
        if (!rc) {
            tokens[promptLen + steps - 1] = argmax(decoded + (size_t)(steps - 1) * V, V);
            rc = modelForward(app->model, tokens, total - 1, promptLen - 1, steps, forward, &app->err);
        }
        if (rc) {
            fprintf(stderr, "tinylm: %s\n", app->err.text);
            break;
        }
        e = relativeError(decoded, forward, (size_t)steps * V, NULL);
        for (i = 0; i < steps; ++i) {
            const float* row = forward + (size_t)i * V;
            if (argmax(row, V) != tokens[promptLen + i]) {
                if (topGap(row, V) <= 2 * TOLERANCE * (fabs(row[argmax(row, V)]) > 1 ? fabs(row[argmax(row, V)]) : 1))
                    ++ties;
                else
                    ++mismatches;
            }
        }
        printf("decode (%s): prompt %u + %u greedy steps; logits vs the full forward: max relative error %.3g "
               "(limit %.0e); tokens = forward argmax: %u/%u%s\n",
               pass == 0 ? "prompt as one forward" : "prompt token by token", promptLen, steps, e, TOLERANCE,
               steps - mismatches - ties, steps, ties ? " (the rest near-ties)" : "");
        if (e > TOLERANCE || mismatches) rc = 1;
    }
    free(tokens);
    free(decoded);
    free(forward);
    return rc;
}

static int runCheck(App* app) {
    const uint32_t V = app->c->vocab;
    uint32_t* tokens = NULL;
    uint32_t n = 0, i;
    int rc = 0, failed = 0;
    if (app->o.golden) {
        StFile g;
        void *tok = NULL, *ref = NULL;
        const StTensor *tt, *lt;
        uint64_t shape[2] = {0, 0};
        float* logits;
        double maxRef, e;
        if (stOpen(app->o.golden, &g, &app->err)) {
            stClose(&g);
            fprintf(stderr, "tinylm: %s\n", app->err.text);
            return TINYLM_EXIT_BAD_INPUT;
        }
        rc = readAux(&g, "tokens", ST_I32, 1, shape, &tok, &tt, &app->err);
        if (!rc) {
            n = (uint32_t)tt->shape[0];
            shape[0] = n;
            shape[1] = V;
            rc = readAux(&g, "logits", ST_F32, 2, shape, &ref, &lt, &app->err);
        }
        if (!rc && n == 0) {
            snprintf(app->err.text, sizeof app->err.text, "\"%s\": no tokens", app->o.golden);
            rc = TINYLM_EXIT_BAD_INPUT;
        }
        stClose(&g);
        if (rc) {
            free(tok);
            free(ref);
            fprintf(stderr, "tinylm: %s\n", app->err.text);
            return rc;
        }
        tokens = (uint32_t*)malloc(n * sizeof(uint32_t));
        logits = (float*)malloc((size_t)n * V * sizeof(float));
        for (i = 0; i < n; ++i) tokens[i] = (uint32_t)((const int32_t*)tok)[i];
        free(tok);
        rc = modelForward(app->model, tokens, n, 0, n, logits, &app->err);
        if (rc) {
            free(ref);
            free(logits);
            free(tokens);
            fprintf(stderr, "tinylm: %s\n", app->err.text);
            return rc;
        }
        e = relativeError(logits, (const float*)ref, (size_t)n * V, &maxRef);
        printf("logits vs PyTorch (%s): %u tokens x %u, max |torch| %.3g, max relative error %.3g (limit %.0e): %s\n",
               app->o.golden, n, V, maxRef, e, TOLERANCE, e <= TOLERANCE ? "ok" : "FAILED");
        if (!(e <= TOLERANCE)) failed = 1;
        free(ref);
        free(logits);
    } else {
        /* No golden file: a deterministic random prompt. */
        n = app->o.promptLen ? app->o.promptLen : 40;
        tokens = (uint32_t*)malloc(n * sizeof(uint32_t));
        seedRng(app->o.seed);
        for (i = 0; i < n; ++i) tokens[i] = (uint32_t)(nextRng() % V);
    }
    if (!modelCanDecode(app->model)) {
        printf("decode: skipped (a polynomial model has no decode state)\n");
    } else {
        const uint32_t promptLen = app->o.promptLen && app->o.promptLen <= n ? app->o.promptLen : (n + 1) / 2;
        const uint32_t steps = app->o.tokensSet ? app->o.tokens : 48;
        rc = checkDecode(app, tokens, promptLen, steps);
        if (rc > failed) failed = rc;
    }
    free(tokens);
    return failed;
}

static int runEval(App* app) {
    StFile d;
    void *inputs = NULL, *starts = NULL, *golden = NULL;
    const StTensor *it, *st, *gt;
    uint64_t shape[2] = {0, 0};
    uint32_t N, n, count, e, agree = 0, correctCount = 0, goldenCorrect = 0;
    const char* task;
    float* logits = NULL;
    uint32_t* tokens = NULL;
    int rc = 0;
    if (!app->o.data) return usageError("%s", "eval needs --data TASK.eval.safetensors");
    if (stOpen(app->o.data, &d, &app->err)) {
        stClose(&d);
        fprintf(stderr, "tinylm: %s\n", app->err.text);
        return TINYLM_EXIT_BAD_INPUT;
    }
    rc = readAux(&d, "inputs", ST_U8, 2, shape, &inputs, &it, &app->err);
    if (!rc) {
        shape[0] = it->shape[0];
        rc = readAux(&d, "answer_start", ST_I32, 1, shape, &starts, &st, &app->err);
    }
    task = stMeta(&d, "task");
    if (!rc && task && app->c->task[0] && strcmp(task, app->c->task) != 0) {
        snprintf(app->err.text, sizeof app->err.text, "\"%s\" holds task \"%s\", the model was trained on \"%s\"", app->o.data, task,
                 app->c->task);
        rc = TINYLM_EXIT_BAD_INPUT;
    }
    if (rc) {
        stClose(&d);
        free(inputs);
        free(starts);
        fprintf(stderr, "tinylm: %s\n", app->err.text);
        return rc;
    }
    N = (uint32_t)it->shape[0];
    n = (uint32_t)it->shape[1];
    stClose(&d);
    count = app->o.limit && app->o.limit < N ? app->o.limit : N;
    if (app->o.golden) {
        StFile g;
        if (stOpen(app->o.golden, &g, &app->err)) {
            rc = TINYLM_EXIT_BAD_INPUT;
        } else {
            shape[0] = N;
            rc = readAux(&g, "eval_correct", ST_U8, 1, shape, &golden, &gt, &app->err);
        }
        stClose(&g);
        if (rc) {
            free(inputs);
            free(starts);
            free(golden);
            fprintf(stderr, "tinylm: %s\n", app->err.text);
            return rc;
        }
    }
    logits = (float*)malloc((size_t)n * app->c->vocab * sizeof(float));
    tokens = (uint32_t*)malloc(n * sizeof(uint32_t));
    for (e = 0; e < count && !rc; ++e) {
        const uint8_t* row = (const uint8_t*)inputs + (size_t)e * n;
        const int32_t as = ((const int32_t*)starts)[e];
        uint32_t i, ok = 1;
        if (as < 1 || (uint32_t)as >= n) {
            snprintf(app->err.text, sizeof app->err.text, "\"%s\": example %u has answer_start %d, outside 1 .. %u", app->o.data, e,
                     (int)as, n - 1);
            rc = TINYLM_EXIT_BAD_INPUT;
            break;
        }
        for (i = 0; i < n; ++i) tokens[i] = row[i];
        /* Teacher forcing: one forward; the logits at i - 1 predict token i for the answer positions. */
        if ((rc = modelForward(app->model, tokens, n, (uint32_t)as - 1, n - (uint32_t)as, logits, &app->err))) break;
        for (i = (uint32_t)as; i < n; ++i)
            if (argmax(logits + (size_t)(i - (uint32_t)as) * app->c->vocab, app->c->vocab) != tokens[i]) ok = 0;
        correctCount += ok;
        if (golden) {
            const uint8_t want = ((const uint8_t*)golden)[e];
            goldenCorrect += want ? 1 : 0;
            if ((want != 0) == (ok != 0))
                ++agree;
            else
                printf("example %u: app %s, PyTorch %s\n", e, ok ? "correct" : "wrong", want ? "correct" : "wrong");
        }
    }
    if (!rc) {
        printf("accuracy on %u of %u examples of %s: %.4f (%u correct)\n", count, N, app->o.data, (double)correctCount / count,
               correctCount);
        if (golden) {
            printf("PyTorch on the same examples: %.4f; per-example agreement %u/%u: %s\n", (double)goldenCorrect / count, agree, count,
                   agree == count ? "ok" : "FAILED");
            if (agree != count) rc = 1;
        }
    } else {
        fprintf(stderr, "tinylm: %s\n", app->err.text);
    }
    free(inputs);
    free(starts);
    free(golden);
    free(logits);
    free(tokens);
    return rc;
}

/* Prompt tokens: the bytes of --prompt (byte-level models) or the list of --prompt-tokens. */
static int promptTokens(App* app, uint32_t** out, uint32_t* n) {
    uint32_t i;
    if (app->o.prompt && app->o.promptTokens) return usageError("%s", "give --prompt or --prompt-tokens, not both");
    if (app->o.prompt) {
        const size_t len = strlen(app->o.prompt);
        if (app->c->vocab != 256)
            return usageError("%s", "--prompt needs a byte-level model (vocab_size 256): use --prompt-tokens 1,2,3");
        if (!len) return usageError("%s", "--prompt is empty");
        *out = (uint32_t*)malloc(len * sizeof(uint32_t));
        for (i = 0; i < len; ++i) (*out)[i] = (unsigned char)app->o.prompt[i];
        *n = (uint32_t)len;
        return 0;
    }
    if (app->o.promptTokens) {
        uint32_t buffer[4096];
        const size_t count = parseList(app->o.promptTokens, buffer, 4096);
        if (!count) return usageError("--prompt-tokens %s: expected a comma-separated list of token ids", app->o.promptTokens);
        *out = (uint32_t*)malloc(count * sizeof(uint32_t));
        memcpy(*out, buffer, count * sizeof(uint32_t));
        *n = (uint32_t)count;
        return 0;
    }
    return usageError("%s", "generate needs --prompt TEXT (or --prompt-tokens 1,2,3)");
}

static void printToken(const App* app, uint32_t token) {
    if (app->c->vocab == 256)
        putchar((int)token);
    else
        printf(" %u", token);
    fflush(stdout);
}

static int runGenerate(App* app) {
    const uint32_t V = app->c->vocab;
    uint32_t *prompt = NULL, n = 0, i, token;
    float* logits = (float*)malloc(V * sizeof(float));
    double t0, t1, t2;
    int rc;
    if ((rc = promptTokens(app, &prompt, &n))) {
        free(logits);
        return rc;
    }
    seedRng(app->o.seed);
    for (i = 0; i < n; ++i) printToken(app, prompt[i]);
    t0 = now();
    if (modelCanDecode(app->model)) {
        rc = modelPrefill(app->model, prompt, n, n + app->o.tokens, 0, logits, &app->err);
    } else {
        rc = modelForward(app->model, prompt, n, n - 1, 1, logits, &app->err);
    }
    t1 = now();
    token = sample(logits, V, app->o.temperature, app->o.topK);
    if (!rc) printToken(app, token);
    for (i = 1; i < app->o.tokens && !rc; ++i) {
        if (modelCanDecode(app->model)) {
            rc = modelStep(app->model, token, logits, &app->err);
        } else { /* polynomial: no decode state, the whole prefix again */
            uint32_t* all = (uint32_t*)realloc(prompt, (n + 1) * sizeof(uint32_t));
            if (!all) break;
            prompt = all;
            prompt[n++] = token;
            rc = modelForward(app->model, prompt, n, n - 1, 1, logits, &app->err);
        }
        if (rc) break;
        token = sample(logits, V, app->o.temperature, app->o.topK);
        printToken(app, token);
    }
    t2 = now();
    printf("\n");
    if (rc) {
        fprintf(stderr, "tinylm: %s\n", app->err.text);
    } else {
        printf("prefill: %u tokens in %.1f ms (%.0f tokens/s); generation: %u tokens, %.1f tokens/s (%.2f ms per token)\n", n,
               1e3 * (t1 - t0), n / (t1 - t0), app->o.tokens,
               app->o.tokens > 1 ? (app->o.tokens - 1) / (t2 - t1) : 0.0,
               app->o.tokens > 1 ? 1e3 * (t2 - t1) / (app->o.tokens - 1) : 0.0);
    }
    free(prompt);
    free(logits);
    return rc;
}

static int runBench(App* app) {
    const uint32_t V = app->c->vocab;
    static const char text[] =
        "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness "
        "was upon the face of the deep. And the Spirit of God moved upon the face of the waters. ";
    uint32_t contexts[64];
    size_t count, ci;
    const uint32_t steps = app->o.tokensSet ? app->o.tokens : 128;
    float* logits = (float*)malloc(V * sizeof(float));
    double* times = (double*)malloc(steps * sizeof(double));
    FILE* json = NULL;
    int rc = 0;
    if (!app->o.context) return usageError("%s", "bench needs --context 1024,2048,...");
    count = parseList(app->o.context, contexts, 64);
    if (!count) return usageError("--context %s: expected a comma-separated list of token counts (1024 or 1k)", app->o.context);
    if (!modelCanDecode(app->model)) return usageError("%s", "bench: a polynomial model has no decode state");
    if (app->o.json && !(json = fopen(app->o.json, "w"))) return usageError("cannot write %s", app->o.json);
    if (json)
        fprintf(json, "{\"model\": \"%s\", \"attention\": \"%s\", \"device\": \"%s\", \"driver\": \"%s\", \"tokens\": %u,\n \"results\": [",
                app->o.model, app->c->attention == ATTENTION_SOFTMAX ? "softmax" : "polysketch", gpuDeviceName(app->gpu),
                gpuDriverInfo(app->gpu), steps);
    printf("%s (%s attention) on %s: prompt of L tokens, then %u generated tokens (greedy), wall time\n", app->o.model,
           app->c->attention == ATTENTION_SOFTMAX ? "softmax" : "polysketch", gpuDeviceName(app->gpu), steps);
    printf("| context L | prefill s | prefill tokens/s | ms per generated token: median | mean | min | max |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    {   /* warm-up: first-use costs (pipelines, buffers) out of the first measurement */
        uint32_t warm[64], i;
        for (i = 0; i < 64; ++i) warm[i] = (uint32_t)text[i] % V;
        rc = modelPrefill(app->model, warm, 64, 64 + 4, 0, logits, &app->err);
        for (i = 0; i < 3 && !rc; ++i) rc = modelStep(app->model, argmax(logits, V), logits, &app->err);
    }
    for (ci = 0; ci < count && !rc; ++ci) {
        const uint32_t L = contexts[ci];
        uint32_t* prompt = (uint32_t*)malloc(L * sizeof(uint32_t));
        uint32_t i, token;
        double t0, prefill, sorted[4096], mean = 0, lo = INFINITY, hi = 0, med;
        for (i = 0; i < L; ++i) prompt[i] = (uint32_t)(unsigned char)text[i % (sizeof text - 1)] % V;
        t0 = now();
        rc = modelPrefill(app->model, prompt, L, L + steps, 0, logits, &app->err);
        prefill = now() - t0;
        free(prompt);
        token = argmax(logits, V);
        for (i = 0; i < steps && !rc; ++i) {
            const double s = now();
            rc = modelStep(app->model, token, logits, &app->err);
            times[i] = 1e3 * (now() - s);
            token = argmax(logits, V);
        }
        if (rc) break;
        for (i = 0; i < steps; ++i) {
            mean += times[i] / steps;
            if (times[i] < lo) lo = times[i];
            if (times[i] > hi) hi = times[i];
            if (i < 4096) sorted[i] = times[i];
        }
        med = median(sorted, steps < 4096 ? steps : 4096);
        printf("| %u | %.3f | %.0f | %.3f | %.3f | %.3f | %.3f |\n", L, prefill, L / prefill, med, mean, lo, hi);
        fflush(stdout);
        if (json) {
            fprintf(json, "%s\n  {\"context\": %u, \"prefill_s\": %.6f, \"prefill_tokens_per_s\": %.1f, \"step_ms_median\": %.4f, "
                          "\"step_ms_mean\": %.4f, \"step_ms_min\": %.4f, \"step_ms_max\": %.4f, \"steps_ms\": [",
                    ci ? "," : "", L, prefill, L / prefill, med, mean, lo, hi);
            for (i = 0; i < steps; ++i) fprintf(json, "%s%.4f", i ? ", " : "", times[i]);
            fprintf(json, "]}");
        }
    }
    if (json) {
        fprintf(json, "\n ]}\n");
        fclose(json);
    }
    if (rc) fprintf(stderr, "tinylm: %s\n", app->err.text);
    free(logits);
    free(times);
    return rc;
}

int main(int argc, char** argv) {
    App app;
    GpuOptions g;
    int rc;
    memset(&app, 0, sizeof app);
    if ((rc = parseOptions(argc, argv, &app.o))) return rc;
    if (strcmp(app.o.mode, "write") == 0) return writeRandomModel(&app.o);
    g.device = app.o.device;
    g.validate = app.o.validate;
    rc = gpuCreate(&g, &app.gpu, &app.err);
    if (rc) {
        fprintf(stderr, "tinylm: %s\n", app.err.text);
        gpuDestroy(app.gpu);
        return rc;
    }
    rc = modelLoad(app.gpu, app.o.model, &app.model, &app.err);
    if (rc) {
        fprintf(stderr, "tinylm: %s\n", app.err.text);
    } else {
        app.c = modelConfig(app.model);
        printf("%s: %s attention, V=%u D=%u layers=%u heads=%u h=%u", app.o.model,
               app.c->attention == ATTENTION_SOFTMAX ? "softmax" : app.c->attention == ATTENTION_POLYNOMIAL ? "polynomial" : "polysketch",
               app.c->vocab, app.c->dModel, app.c->nLayers, app.c->nHeads, app.c->headDim);
        if (app.c->attention == ATTENTION_POLYSKETCH)
            printf(" (%s sketch r=%u, block %u, local exact %d)", app.c->learnedSketch ? "learned" : "random", app.c->sketchSize,
                   app.c->blockSize, app.c->localExact);
        printf("; device %s\n", gpuDeviceName(app.gpu));
        if (strcmp(app.o.mode, "check") == 0)
            rc = runCheck(&app);
        else if (strcmp(app.o.mode, "eval") == 0)
            rc = runEval(&app);
        else if (strcmp(app.o.mode, "generate") == 0)
            rc = runGenerate(&app);
        else
            rc = runBench(&app);
    }
    gpuPrintProfile(app.gpu);
    modelDestroy(app.model);
    if (app.o.validate) {
        const uint32_t messages = gpuValidationMessages(app.gpu);
        printf("%u validation message(s)\n", messages);
        if (messages && rc == 0) rc = 1;
    }
    gpuDestroy(app.gpu);
    return rc;
}
