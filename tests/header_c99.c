/*
 * The public header used from C99 alone: create a context with all defaults, print the device,
 * run a tiny softmax forward on float arrays and compare with a plain C loop.
 * Built with -std=c99 -Wall -Wextra -pedantic -Werror; returns 0 on success.
 */
#include <polysketch/polysketch.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#define N 5  /* seqLen */
#define H 16 /* headDim = valueDim */

static int failed(const char* what, PskResult result) {
    fprintf(stderr, "header_c99: %s failed: %s (%d)\n", what, pskResultToString(result), (int)result);
    return 1;
}

/* Deterministic values in [-1, 1) without libc's rand(). */
static float pseudoRandom(unsigned* state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xFFFFu) / 32768.0f - 1.0f;
}

int main(void) {
    PskContext context = NULL;
    PskAttention attention = NULL;
    PskAttentionCreateInfo info = {0};
    PskForwardHostInfo forward = {0};
    PskDeviceInfo device;
    PskResult result;
    float q[N * H], k[N * H], v[N * H], out[N * H];
    double maxError = 0.0;
    unsigned state = 12345u;
    int i, j, d, status = 0;
    const double scale = 1.0 / sqrt((double)H);

    if (pskGetVersion() != PSK_HEADER_VERSION) {
        fprintf(stderr, "header_c99: library version %u does not match header version %u\n", (unsigned)pskGetVersion(),
                (unsigned)PSK_HEADER_VERSION);
        return 1;
    }

    result = pskCreateContext(NULL, &context);
    if (result != PSK_SUCCESS) return failed("pskCreateContext", result);

    result = pskGetDeviceInfo(context, &device);
    if (result != PSK_SUCCESS) {
        pskDestroyContext(context);
        return failed("pskGetDeviceInfo", result);
    }
    printf("device: %s (%s %s), Vulkan %u.%u.%u\n", device.name, device.driverName, device.driverInfo,
           (unsigned)(device.apiVersion >> 22), (unsigned)((device.apiVersion >> 12) & 0x3FFu),
           (unsigned)(device.apiVersion & 0xFFFu));

    info.kind = PSK_ATTENTION_KIND_SOFTMAX;
    info.headDim = H; /* scale 0: the default 1/sqrt(h); one head; float32; BHND */
    result = pskCreateAttention(context, &info, &attention);
    if (result != PSK_SUCCESS) {
        pskDestroyContext(context);
        return failed("pskCreateAttention", result);
    }

    for (i = 0; i < N * H; ++i) {
        q[i] = pseudoRandom(&state);
        k[i] = pseudoRandom(&state);
        v[i] = pseudoRandom(&state);
        out[i] = -1000.0f;
    }
    forward.batchSize = 1;
    forward.seqLen = N;
    forward.q = q;
    forward.k = k;
    forward.v = v;
    forward.out = out;
    forward.qBytes = sizeof(q);
    forward.kBytes = sizeof(k);
    forward.vBytes = sizeof(v);
    forward.outBytes = sizeof(out);
    result = pskAttentionForwardHost(attention, &forward);
    if (result != PSK_SUCCESS) {
        pskDestroyAttention(attention);
        pskDestroyContext(context);
        return failed("pskAttentionForwardHost", result);
    }

    /* Reference: O_i = sum_j softmax_j(s q_i.k_j) v_j over every j (no causal mask). */
    for (i = 0; i < N; ++i) {
        double w[N], m = -HUGE_VAL, sum = 0.0;
        for (j = 0; j < N; ++j) {
            double dot = 0.0;
            for (d = 0; d < H; ++d) dot += (double)q[i * H + d] * (double)k[j * H + d];
            w[j] = scale * dot;
            if (w[j] > m) m = w[j];
        }
        for (j = 0; j < N; ++j) {
            w[j] = exp(w[j] - m);
            sum += w[j];
        }
        for (d = 0; d < H; ++d) {
            double o = 0.0, err;
            for (j = 0; j < N; ++j) o += w[j] * (double)v[j * H + d];
            o /= sum;
            err = fabs(o - (double)out[i * H + d]);
            if (!(err <= maxError)) maxError = err; /* also catches NaN */
        }
    }
    printf("softmax n=%d h=%d: max abs error %.3g\n", N, H, maxError);
    if (!(maxError < 1e-4)) {
        fprintf(stderr, "header_c99: max abs error %.3g exceeds 1e-4\n", maxError);
        status = 1;
    }

    pskDestroyAttention(attention);
    pskDestroyContext(context);
    pskDestroyAttention(NULL);
    pskDestroyContext(NULL);
    if (strcmp(pskResultToString(PSK_SUCCESS), "PSK_SUCCESS") != 0) {
        fprintf(stderr, "header_c99: pskResultToString(PSK_SUCCESS) is \"%s\"\n", pskResultToString(PSK_SUCCESS));
        status = 1;
    }
    if (status == 0) printf("header_c99: OK\n");
    return status;
}
