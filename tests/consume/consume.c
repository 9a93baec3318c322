/*
 * consume: a program outside the polysketch tree that only sees the installed interface
 * (#include <polysketch/polysketch.h> and the library). tests/consume/run_consume.sh builds it
 * three ways (find_package after cmake --install, add_subdirectory, pkg-config) to check that each
 * way of consuming the library compiles, links and runs.
 *
 * It creates a context on the default device, runs a softmax attention (B=1, H=2, n=37, h=16) with
 * pskAttentionForwardHost and compares the output with a plain C loop in double precision:
 * max |got - want| / max |want| must stay below 1e-4. With PSK_REQUIRE_VALIDATION=1 in the
 * environment (as CI sets it) the validation layer is required and any validation message fails.
 * Returns 0 on success.
 */
#include <polysketch/polysketch.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADS 2
#define N 37
#define D 16
#define COUNT (HEADS * N * D)

static unsigned validationMessages = 0;

static void onMessage(PskMessageSeverity severity, PskResult result, const char* message, void* userData) {
    (void)userData;
    if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) {
        ++validationMessages;
        fprintf(stderr, "consume: validation: %s\n", message);
    } else if (severity == PSK_MESSAGE_SEVERITY_ERROR) {
        fprintf(stderr, "consume: %s: %s\n", pskResultToString(result), message);
    }
}

static float pseudoRandom(unsigned* state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xFFFFu) / 32768.0f - 1.0f;
}

int main(void) {
    static float q[COUNT], k[COUNT], v[COUNT], out[COUNT];
    PskContextCreateInfo contextInfo = {0};
    PskAttentionCreateInfo info = {0};
    PskForwardHostInfo forward = {0};
    PskContext context = NULL;
    PskAttention attention = NULL;
    PskResult result;
    const char* require = getenv("PSK_REQUIRE_VALIDATION");
    const double scale = 1.0 / sqrt((double)D);
    double maxError = 0.0, maxWant = 0.0, relative;
    unsigned state = 7u;
    int head, i, j, d, status = 1;

    if (pskGetVersion() != PSK_HEADER_VERSION) {
        fprintf(stderr, "consume: library version %u differs from header version %u\n", (unsigned)pskGetVersion(),
                (unsigned)PSK_HEADER_VERSION);
        return 1;
    }
    contextInfo.messageCallback = onMessage;
    contextInfo.flags = require && strcmp(require, "1") == 0 ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT
                                                              : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    result = pskCreateContext(&contextInfo, &context);
    if (result != PSK_SUCCESS) {
        fprintf(stderr, "consume: pskCreateContext failed: %s\n", pskResultToString(result));
        return 1;
    }
    info.kind = PSK_ATTENTION_KIND_SOFTMAX;
    info.numQueryHeads = HEADS;
    info.headDim = D;
    result = pskCreateAttention(context, &info, &attention);
    if (result == PSK_SUCCESS) {
        for (i = 0; i < COUNT; ++i) {
            q[i] = pseudoRandom(&state);
            k[i] = pseudoRandom(&state);
            v[i] = pseudoRandom(&state);
            out[i] = NAN;
        }
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
    }
    if (result == PSK_SUCCESS) {
        /* O_i = sum_j softmax_j(s q_i.k_j) v_j per head, over every j. */
        for (head = 0; head < HEADS; ++head) {
            const float *qh = q + head * N * D, *kh = k + head * N * D, *vh = v + head * N * D;
            const float* oh = out + head * N * D;
            for (i = 0; i < N; ++i) {
                double w[N], m = -HUGE_VAL, sum = 0.0;
                for (j = 0; j < N; ++j) {
                    double dot = 0.0;
                    for (d = 0; d < D; ++d) dot += (double)qh[i * D + d] * kh[j * D + d];
                    w[j] = scale * dot;
                    if (w[j] > m) m = w[j];
                }
                for (j = 0; j < N; ++j) sum += (w[j] = exp(w[j] - m));
                for (d = 0; d < D; ++d) {
                    double want = 0.0, error;
                    for (j = 0; j < N; ++j) want += w[j] * vh[j * D + d];
                    want /= sum;
                    error = fabs(want - (double)oh[i * D + d]);
                    if (!(error <= maxError)) maxError = error; /* NaN counts as the largest */
                    if (fabs(want) > maxWant) maxWant = fabs(want);
                }
            }
        }
        relative = maxWant > 0.0 ? maxError / maxWant : maxError;
        printf("consume: softmax B=1 H=%d n=%d h=%d: max relative error %.3g\n", HEADS, N, D, relative);
        status = relative < 1e-4 && maxWant > 1e-3 ? 0 : 1;
    } else {
        fprintf(stderr, "consume: failed: %s\n", pskResultToString(result));
    }
    pskDestroyAttention(attention);
    pskDestroyContext(context);
    if (validationMessages > 0) {
        fprintf(stderr, "consume: %u validation message(s)\n", validationMessages);
        status = 1;
    }
    printf("consume: %s\n", status == 0 ? "OK" : "FAILED");
    return status;
}
