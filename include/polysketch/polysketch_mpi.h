/*
 * polysketch_mpi.h: sequence parallelism over MPI (docs/SEQUENCE_PARALLEL.md).
 *
 * An optional component, library polysketch_mpi (CMake target polysketch::polysketch_mpi), built
 * only where MPI is found. It links MPI and the polysketch library; the polysketch library itself
 * never needs MPI.
 *
 * One causal polysketch attention over a sequence split into contiguous chunks, one per rank of a
 * communicator, in rank order: rank 0 holds tokens 0 .. n_0 - 1, rank 1 the next n_1, and so on.
 * Each rank computes the rows of its own chunk, equal to the rows of one forward over the whole
 * sequence (within float32 rounding). What crosses the network does not depend on the chunk
 * lengths: an exclusive prefix sum (MPI_Exscan) of one fixed-size state per (sequence, key/value
 * head), and in local-exact mode the rows of the block that straddles each chunk boundary.
 *
 * How (docs/SEQUENCE_PARALLEL.md): every rank sums phi(k_j)^T [v_j | 1] over its tokens (a
 * state-only forward), the exclusive scan of those sums over the ranks gives each rank everything
 * before its chunk, and the rank finishes its chunk from that initial state with one forward that
 * continues a decode state (PskForwardHostInfo.state).
 */
#ifndef POLYSKETCH_MPI_H_
#define POLYSKETCH_MPI_H_

#include <mpi.h>

#include "polysketch.h"

#if defined(_WIN32)
#  if defined(PSK_BUILDING_MPI_LIBRARY)
#    define PSK_MPI_API __declspec(dllexport)
#  else
#    define PSK_MPI_API __declspec(dllimport)
#  endif
#else
#  define PSK_MPI_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PskMpiForwardInfo {
    uint32_t batchSize; /**< B, the same on every rank; 0 means 1 */
    /** This rank's chunk length n_r, >= 1 (a rank with no token is an error on every rank). */
    uint32_t seqLen;
    /**
     * This rank's chunk as for pskAttentionForwardHost, in the attention's data type and layout
     * with its default strides: q [B, Hq, n_r, h], k [B, Hkv, n_r, h], v [B, Hkv, n_r, dv],
     * out [B, Hq, n_r, dv] (BHND; BNHD as the layout says). Sizes in bytes are required.
     */
    const void* q;
    const void* k;
    const void* v;
    void* out;
    size_t qBytes;
    size_t kBytes;
    size_t vBytes;
    size_t outBytes;
} PskMpiForwardInfo;

/** What one call did on this rank. */
typedef struct PskMpiForwardStats {
    /** Tokens before this rank's chunk (its offset in the whole sequence). */
    uint64_t firstToken;
    /** Tokens of the whole sequence (the sum over the ranks). */
    uint64_t totalTokens;
    /**
     * Bytes this rank passed to MPI as payload, by what they carry: the prefix scan of the states
     * (one call of B Hkv F (dv + 1) floats, whatever n), the boundary rows (local exact: at most
     * b - 1 rows of k and v per (sequence, key/value head) received), the agreement on the
     * arguments (a fixed 64 bytes per rank, all-gathered) and the error check.
     */
    uint64_t scanBytes;
    uint64_t boundaryBytesSent;
    uint64_t boundaryBytesReceived;
    uint64_t agreementBytes;
    /** Wall-clock seconds of the whole call on this rank, and of its MPI calls alone. */
    double seconds;
    double communicationSeconds;
} PskMpiForwardStats;

/**
 * Computes this rank's rows of causal polysketch attention over the sequence the ranks of `comm`
 * hold together (collective: every rank of comm must call it, with the same attention
 * configuration and batch size). `attention` is this rank's own object (created on its own
 * context, e.g. its own GPU) with kind POLYSKETCH, CAUSAL, data type FLOAT32 or whatever state
 * passing accepts, and the same configuration and sketch on every rank.
 *
 * Errors are collective too: every rank returns an error when any rank's arguments are bad or
 * disagree (configuration, sketch, B, a rank with seqLen 0, a NULL array, a size too small, a
 * total above 2^53 tokens), and `message` (if not NULL, `messageSize` bytes) receives a sentence
 * naming the first failing rank and its problem (the same sentence on every rank). Codes: a rank
 * whose own arguments failed returns its own code (INVALID_ARGUMENT, INVALID_SHAPE,
 * BUFFER_TOO_SMALL, UNSUPPORTED, ...), the others PSK_ERROR_INVALID_ARGUMENT. A failure of the device work itself is agreed on the
 * same way after each step, so no rank waits in a collective for one that gave up. An MPI failure
 * gives PSK_ERROR_COMMUNICATION (MPI's default error handler aborts first unless the app changed it).
 * `stats` may be NULL. Nothing is written to `out` on error.
 */
PSK_MPI_API PskResult pskMpiAttentionForwardHost(PskAttention attention, MPI_Comm comm, const PskMpiForwardInfo* info,
                                             PskMpiForwardStats* stats, char* message, size_t messageSize);

#ifdef __cplusplus
}
#endif

#endif /* POLYSKETCH_MPI_H_ */
