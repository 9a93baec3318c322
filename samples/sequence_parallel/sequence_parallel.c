/*
 * sequence_parallel: one causal polysketch attention over a sequence split across MPI ranks
 * (polysketch_mpi.h). Each rank holds a contiguous chunk of the tokens, runs on its own Vulkan
 * device (or lavapipe), and computes its chunk's rows; what crosses the network is one prefix scan
 * of fixed-size states and, in local-exact mode, the rows of the block that straddles each chunk
 * boundary, whatever the sequence length.
 *
 *   mpirun -np 4 sequence_parallel [--n TOKENS] [--heads H] [--runs R] [--check]
 *
 * Rank r takes tokens [r n / P, (r + 1) n / P). --check also runs the whole sequence on rank 0
 * (gathered) and prints the largest relative difference. Prints the median time of R runs, the
 * bytes each rank passed to MPI, and the state size that bounds them.
 */
#include <polysketch/polysketch_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAD_DIM 64
#define SKETCH 32
#define BLOCK 256

static float gaussian(unsigned long long* s) {
    /* xorshift64* and Box-Muller: any deterministic normal numbers will do */
    double u[2];
    for (int i = 0; i < 2; ++i) {
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        u[i] = ((*s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
    }
    return (float)(sqrt(-2.0 * log(u[0] + 1e-300)) * cos(6.283185307179586 * u[1]));
}

/* Token t of head hd, [H, n, d] (BHND, B = 1), generated from its global index so that every
 * rank can make its own chunk without the others. */
static void fill(float* x, unsigned H, unsigned long long first, unsigned len, unsigned d, unsigned long long salt) {
    for (unsigned hd = 0; hd < H; ++hd)
        for (unsigned t = 0; t < len; ++t) {
            unsigned long long s = (salt * 1000003ull + hd) * 0x9E3779B97F4A7C15ull + first + t + 1;
            for (unsigned i = 0; i < d; ++i) x[((size_t)hd * len + t) * d + i] = gaussian(&s);
        }
}

static int compareDoubles(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    unsigned long long n = 65536;
    unsigned H = 4, runs = 3, check = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--heads") && i + 1 < argc) H = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--check")) check = 1;
        else {
            if (rank == 0) fprintf(stderr, "usage: mpirun -np P sequence_parallel [--n TOKENS] [--heads H] [--runs R] [--check]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (runs < 1) runs = 1;
    const unsigned long long first = n * (unsigned long long)rank / ranks, last = n * (unsigned long long)(rank + 1) / ranks;
    const unsigned len = (unsigned)(last - first);

    PskContextCreateInfo ci = {0};
    PskContext ctx = NULL;
    PskResult result = pskCreateContext(&ci, &ctx);
    PskAttention attention = NULL;
    if (result == PSK_SUCCESS) {
        PskAttentionCreateInfo ai = {0};
        ai.kind = PSK_ATTENTION_KIND_POLYSKETCH;
        ai.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
        ai.numQueryHeads = H;
        ai.headDim = HEAD_DIM;
        ai.sketchSize = SKETCH;
        ai.blockSize = BLOCK;
        ai.scale = 0.125f;
        ai.seed = 1;
        result = pskCreateAttention(ctx, &ai, &attention);
    }
    /* A rank that failed still takes part (with a NULL attention): the call fails on every rank. */
    const size_t count = (size_t)H * len * HEAD_DIM;
    float* q = malloc(count * 4);
    float* k = malloc(count * 4);
    float* v = malloc(count * 4);
    float* out = malloc(count * 4);
    if (!q || !k || !v || !out) {
        fprintf(stderr, "rank %d: out of host memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fill(q, H, first, len, HEAD_DIM, 1);
    fill(k, H, first, len, HEAD_DIM, 2);
    fill(v, H, first, len, HEAD_DIM, 3);

    PskMpiForwardInfo info = {0};
    info.seqLen = len;
    info.q = q;
    info.k = k;
    info.v = v;
    info.out = out;
    info.qBytes = info.kBytes = info.vBytes = info.outBytes = count * 4;
    double* seconds = calloc(runs, sizeof(double));
    PskMpiForwardStats stats = {0};
    char message[512] = "";
    for (unsigned r = 0; r < runs && seconds; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        result = pskMpiAttentionForwardHost(attention, MPI_COMM_WORLD, &info, &stats, message, sizeof(message));
        if (result != PSK_SUCCESS) break;
        double slowest = 0;
        MPI_Allreduce(&stats.seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        seconds[r] = slowest;
    }
    if (result != PSK_SUCCESS) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, pskResultToString(result), message);
        MPI_Finalize();
        return 1;
    }
    qsort(seconds, runs, sizeof(double), compareDoubles);
    unsigned long long sent = stats.scanBytes + stats.boundaryBytesSent + stats.agreementBytes, most = 0;
    MPI_Reduce(&sent, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ranks %d, n %llu (%u per rank), H %u, h %d, r %d, b %d, local exact\n", ranks, n, len, H, HEAD_DIM, SKETCH, BLOCK);
        printf("median of %u runs: %.3f s (slowest rank)\n", runs, seconds[runs / 2]);
        printf("bytes passed to MPI per rank (largest): %llu  (scan %llu = H F (dv+1) floats, boundary <= %llu, agreement %llu)\n",
               most, (unsigned long long)stats.scanBytes, (unsigned long long)(BLOCK - 1) * H * 2 * HEAD_DIM * 4,
               (unsigned long long)stats.agreementBytes);
    }

    if (check) {
        /* Rank 0 gathers the rows and recomputes the whole sequence alone. */
        float* whole = NULL;
        int* counts = NULL;
        int* displs = NULL;
        if (rank == 0) {
            whole = malloc((size_t)H * n * HEAD_DIM * 4);
            counts = malloc(sizeof(int) * ranks);
            displs = malloc(sizeof(int) * ranks);
        }
        /* One head at a time: each head's rows are contiguous per rank (BHND). */
        double worst = 0, scale = 0;
        float *fq = NULL, *fk = NULL, *fv = NULL, *fo = NULL;
        if (rank == 0) {
            const size_t all = (size_t)H * n * HEAD_DIM;
            fq = malloc(all * 4), fk = malloc(all * 4), fv = malloc(all * 4), fo = malloc(all * 4);
            fill(fq, H, 0, (unsigned)n, HEAD_DIM, 1);
            fill(fk, H, 0, (unsigned)n, HEAD_DIM, 2);
            fill(fv, H, 0, (unsigned)n, HEAD_DIM, 3);
            PskForwardHostInfo f = {0};
            f.seqLen = (unsigned)n;
            f.q = fq, f.k = fk, f.v = fv, f.out = fo;
            f.qBytes = f.kBytes = f.vBytes = f.outBytes = all * 4;
            result = pskAttentionForwardHost(attention, &f);
            for (int r = 0; r < ranks; ++r) {
                const unsigned long long a = n * (unsigned long long)r / ranks, b = n * (unsigned long long)(r + 1) / ranks;
                counts[r] = (int)((b - a) * HEAD_DIM);
                displs[r] = (int)(a * HEAD_DIM);
            }
        }
        for (unsigned hd = 0; hd < H; ++hd) {
            MPI_Gatherv(out + (size_t)hd * len * HEAD_DIM, (int)(len * HEAD_DIM), MPI_FLOAT, whole, counts, displs, MPI_FLOAT, 0,
                        MPI_COMM_WORLD);
            if (rank == 0)
                for (size_t i = 0; i < (size_t)n * HEAD_DIM; ++i) {
                    const double want = fo[(size_t)hd * n * HEAD_DIM + i];
                    worst = fmax(worst, fabs(whole[i] - want));
                    scale = fmax(scale, fabs(want));
                }
        }
        if (rank == 0) printf("check against one process: %s, relative max difference %.2e\n", pskResultToString(result), worst / scale);
        free(whole), free(counts), free(displs), free(fq), free(fk), free(fv), free(fo);
    }
    free(seconds), free(q), free(k), free(v), free(out);
    pskDestroyAttention(attention);
    pskDestroyContext(ctx);
    MPI_Finalize();
    return 0;
}
