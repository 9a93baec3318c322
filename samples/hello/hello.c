/*
 * hello: the smallest complete use of polysketch from C99.
 *
 * Creates a context on the best device, a causal exact polynomial attention of degree 4 with
 * grouped-query heads, runs it once on random host arrays, and compares the output with a plain
 * C loop in double precision. Prints the device, the GPU time and the max relative error
 * (max |got - want| / max |want|); exits with 1 if the error is above 1e-4 or a call fails.
 *
 *   hello              run on the default device (PSK_DEVICE=<index or name> picks another)
 *   hello --validate   require the Vulkan validation layer; any validation message fails the run
 */
#include <polysketch/polysketch.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Shapes: q [B, HQ, N, D], k and v [B, HKV, N, D], out [B, HQ, N, D] (layout BHND). */
#define B 1
#define HQ 4
#define HKV 2 /* query heads 0-1 read key/value head 0, heads 2-3 read head 1 */
#define N 100
#define D 32
#define DEGREE 4
#define MAX_RELATIVE_ERROR 1e-4

static unsigned validationMessages = 0;

/* Every message of the context: errors explain a failed call; validation messages are bugs. */
static void onMessage(PskMessageSeverity severity, PskResult result, const char* message, void* userData) {
    (void)userData;
    if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) {
        ++validationMessages; /* one context used from one thread: no lock needed */
        fprintf(stderr, "hello: validation: %s\n", message);
    } else if (severity == PSK_MESSAGE_SEVERITY_ERROR) {
        fprintf(stderr, "hello: error %s: %s\n", pskResultToString(result), message);
    }
}

/* Deterministic uniform values in [-1, 1). */
static float uniform(uint64_t* state) {
    *state = *state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return (float)(uint32_t)(*state >> 40) / 8388608.0f - 1.0f;
}

/* The same attention as a plain loop: w_ij = (s q_i.k_j)^p for j <= i, O_i = sum w v / (1 + sum w). */
static void polynomialReference(const float* q, const float* k, const float* v, double scale, double* out) {
    int b, hq, i, j, d;
    for (b = 0; b < B; ++b)
        for (hq = 0; hq < HQ; ++hq) {
            const int hkv = hq / (HQ / HKV);
            const float* qh = q + ((size_t)b * HQ + hq) * N * D;
            const float* kh = k + ((size_t)b * HKV + hkv) * N * D;
            const float* vh = v + ((size_t)b * HKV + hkv) * N * D;
            double* oh = out + ((size_t)b * HQ + hq) * N * D;
            for (i = 0; i < N; ++i) {
                double acc[D] = {0}, denominator = 1.0;
                for (j = 0; j <= i; ++j) {
                    double dot = 0.0, w;
                    for (d = 0; d < D; ++d) dot += (double)qh[i * D + d] * kh[j * D + d];
                    w = pow(scale * dot, DEGREE);
                    denominator += w;
                    for (d = 0; d < D; ++d) acc[d] += w * vh[j * D + d];
                }
                for (d = 0; d < D; ++d) oh[i * D + d] = acc[d] / denominator;
            }
        }
}

int main(int argc, char** argv) {
    static float q[B * HQ * N * D], k[B * HKV * N * D], v[B * HKV * N * D], out[B * HQ * N * D];
    static double want[B * HQ * N * D];
    PskContextCreateInfo contextInfo = {0};
    PskAttentionCreateInfo info = {0};
    PskForwardHostInfo forward = {0};
    PskForwardStats stats = {0};
    PskDeviceInfo device;
    PskContext context = NULL;
    PskAttention attention = NULL;
    PskResult result;
    uint64_t state = 2024;
    double maxError = 0.0, maxWant = 0.0, relativeError;
    const double scale = 1.0 / sqrt((double)D);
    size_t i;
    int status = 1;

    contextInfo.messageCallback = onMessage;
    if (argc > 1 && strcmp(argv[1], "--validate") == 0) contextInfo.flags = PSK_CONTEXT_REQUIRE_VALIDATION_BIT;
    result = pskCreateContext(&contextInfo, &context);
    if (result != PSK_SUCCESS) {
        fprintf(stderr, "hello: pskCreateContext failed: %s\n", pskResultToString(result));
        return 1;
    }
    if (pskGetDeviceInfo(context, &device) == PSK_SUCCESS) printf("device: %s\n", device.name);

    info.kind = PSK_ATTENTION_KIND_POLYNOMIAL;
    info.flags = PSK_ATTENTION_CAUSAL_BIT;
    info.degree = DEGREE;
    info.scale = (float)scale; /* the default for polynomial kinds is 1 */
    info.numQueryHeads = HQ;
    info.numKeyValueHeads = HKV;
    info.headDim = D; /* valueDim 0: same as headDim; float32; layout BHND */
    result = pskCreateAttention(context, &info, &attention);
    if (result != PSK_SUCCESS) goto done; /* the callback has printed the reason */

    for (i = 0; i < sizeof(q) / sizeof(q[0]); ++i) q[i] = uniform(&state);
    for (i = 0; i < sizeof(k) / sizeof(k[0]); ++i) k[i] = uniform(&state);
    for (i = 0; i < sizeof(v) / sizeof(v[0]); ++i) v[i] = uniform(&state);

    forward.batchSize = B;
    forward.seqLen = N;
    forward.q = q;
    forward.k = k;
    forward.v = v;
    forward.out = out;
    forward.qBytes = sizeof(q);
    forward.kBytes = sizeof(k);
    forward.vBytes = sizeof(v);
    forward.outBytes = sizeof(out);
    forward.stats = &stats;
    result = pskAttentionForwardHost(attention, &forward);
    if (result != PSK_SUCCESS) goto done;

    polynomialReference(q, k, v, scale, want);
    for (i = 0; i < sizeof(out) / sizeof(out[0]); ++i) {
        const double error = fabs((double)out[i] - want[i]);
        if (!(error <= maxError)) maxError = error; /* a NaN counts as the largest error */
        if (fabs(want[i]) > maxWant) maxWant = fabs(want[i]);
    }
    relativeError = maxWant > 0.0 ? maxError / maxWant : maxError;
    printf("causal polynomial attention, degree %d, B=%d Hq=%d Hkv=%d n=%d d=%d: %.3f ms on the device\n", DEGREE, B,
           HQ, HKV, N, D, stats.gpuMilliseconds);
    printf("max relative error against a plain C loop: %.3g (threshold %.0e)\n", relativeError, MAX_RELATIVE_ERROR);
    status = relativeError <= MAX_RELATIVE_ERROR && maxWant > 1e-3 ? 0 : 1; /* a zero output proves nothing */

done:
    if (result != PSK_SUCCESS) fprintf(stderr, "hello: failed with %s\n", pskResultToString(result));
    pskDestroyAttention(attention); /* NULL is fine */
    pskDestroyContext(context);
    if (validationMessages > 0) {
        fprintf(stderr, "hello: %u validation message(s)\n", validationMessages);
        status = 1;
    }
    printf("hello: %s\n", status == 0 ? "OK" : "FAILED");
    return status;
}
