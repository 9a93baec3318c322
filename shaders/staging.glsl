// Staging with loads in flight. A staging loop written as
//
//     for (uint i = lid; i < N; i += THREADS) tile[i] = global[i];
//
// has a trip count that depends on the invocation, so a compiler keeps it rolled, and each
// iteration's shared store waits for its own global load: the loop costs one memory latency per
// iteration (64 of them, ~40k cycles from HBM, for a 64 x 64 tile staged by 64 invocations), which
// resident workgroups hide only as far as there are enough of them. STAGED_COPY issues
// STAGE_BATCH loads into registers before the first of their stores, so the latency is paid once
// per batch (docs/MODEL.md, "Staging: loads in flight").
//
// Without branches: a load under a condition (`i < N ? load : 0`, `if (row < rows) ...`) is a
// branch, and a compiler waits for the load inside it, so the batch's loads went one after the
// other all the same (AMD's compiler showed it: docs/MODEL.md, "Loads without branches"). So every
// lane loads: past N at element N - 1, and LOAD clamps its own rows and columns to valid ones;
// what is not in range is selected away afterwards (KEEP).
//
// Nor around the stores: a store under `if (i < N)` is the only use of its load, and AMD's
// compiler sinks each load down to its store and waits there (load, wait, store, load, ...: one in
// flight; psk compile on RADV's null device, docs/MODEL.md "Stores without a guard"). So the copy
// runs in whole batches, whose every i is below N by construction and whose stores take no guard,
// then at most one last batch for the rest, whose steps wholly in range store without a guard too
// and whose one step across N (if any) guards lane by lane. A call site whose N is a specialization
// constant (a whole tile, KEEP zeroing what the tile does not hold) has no guard at all when STRIDE
// divides N, and the driver drops the empty loop when STAGE_BATCH STRIDE does.
#ifndef PSK_STAGING_GLSL
#define PSK_STAGING_GLSL

#extension GL_EXT_control_flow_attributes : require

// A kernel may declare STAGE_BATCH itself (a specialization constant, defining
// PSK_STAGE_BATCH_SPEC before the include): the cooperative output's is a tunable.
#ifndef PSK_STAGE_BATCH_SPEC
const uint STAGE_BATCH = 8u;
#endif
// Rolled batches (STAGE_ROLLED != 0): the whole batches as a loop the compiler is asked not to
// unroll, so that at most one batch of loads is held in registers. With a constant count the loop
// is otherwise unrolled, and a compiler may then issue every load of the tile before the first
// store: one memory round trip, but registers for the whole tile (two per staged element, address
// and value), which can set a kernel's registers and so its occupancy (docs/MODEL.md, "The generic
// kernels, part by part"). A kernel declares it (a specialization constant, defining
// PSK_STAGE_ROLLED_SPEC before the include): the generic kernels' is generic.stage_rolled.
#ifndef PSK_STAGE_ROLLED_SPEC
const uint STAGE_ROLLED = 0u;
#endif

// For every i = FIRST + k STRIDE < N (k = 0, 1, ...): v = KEEP ? LOAD : 0 (expressions of i), then
// STORE (a statement of i and v), STAGE_BATCH values loaded before they are stored. FIRST < STRIDE
// (an invocation index and its workgroup's size). LOAD must be valid for every i < N, KEEP false
// or not (clamp its rows and columns); in the last, partial batch lanes past N load at N - 1.
// Whole batches: with W = N - N % (STAGE_BATCH STRIDE), a batch starts at i0 = FIRST + m STAGE_BATCH
// STRIDE < W, so m STAGE_BATCH STRIDE <= W - STAGE_BATCH STRIDE and its last i <= FIRST + W - STRIDE
// < W <= N: no guard.
#define STAGED_COPY(N, STRIDE, FIRST, LOAD, KEEP, STORE)                                               \
    {                                                                                                \
        const uint stage_whole_ = (N) - (N) % (STAGE_BATCH * (STRIDE));                               \
        uint stage_i0_ = (FIRST);                                                                    \
        if (STAGE_ROLLED != 0u) {                                                                    \
            [[dont_unroll]] for (; stage_i0_ < stage_whole_; stage_i0_ += STAGE_BATCH * (STRIDE))     \
                STAGED_WHOLE_(N, STRIDE, LOAD, KEEP, STORE)                                          \
        } else {                                                                                     \
            for (; stage_i0_ < stage_whole_; stage_i0_ += STAGE_BATCH * (STRIDE))                    \
                STAGED_WHOLE_(N, STRIDE, LOAD, KEEP, STORE)                                          \
        }                                                                                            \
        if (stage_i0_ < (N)) {                                                                       \
            /* The last batch's steps, N - W elements left: step u is in range for every lane */      \
            /* while (u + 1) STRIDE <= N - W, for none from u STRIDE >= N - W, and lane by lane */     \
            /* (i < N) only in the step between (none when STRIDE divides N - W). With N and */       \
            /* STRIDE constants the first two are constants per unrolled step: no branch there, */    \
            /* and the loads of the steps out of range are dead. */                                  \
            const uint stage_left_ = (N) - stage_whole_;                                             \
            STAGED_BATCH_(STRIDE, min(stage_i0_ + stage_u_ * (STRIDE), (N) - 1u), LOAD, KEEP,         \
                          (stage_u_ + 1u) * (STRIDE) <= stage_left_ || (stage_u_ * (STRIDE) < stage_left_ && i < (N)), STORE) \
        }                                                                                            \
    }

// A whole batch of STAGED_COPY (every i below N: no guard on its stores).
#define STAGED_WHOLE_(N, STRIDE, LOAD, KEEP, STORE) STAGED_BATCH_(STRIDE, stage_i0_ + stage_u_ * (STRIDE), LOAD, KEEP, true, STORE)

// One batch of STAGED_COPY from stage_i0_: STAGE_BATCH loads (LOAD at i = LOADED_I) into registers,
// then their stores (STORE at i = stage_i0_ + stage_u_ STRIDE, where STORED holds).
#define STAGED_BATCH_(STRIDE, LOADED_I, LOAD, KEEP, STORED, STORE)                                     \
    {                                                                                                \
        float stage_v_[STAGE_BATCH];                                                                 \
        [[unroll]] for (uint stage_u_ = 0u; stage_u_ < STAGE_BATCH; ++stage_u_) {                    \
            const uint i = (LOADED_I);                                                               \
            stage_v_[stage_u_] = (LOAD);                                                             \
        }                                                                                            \
        [[unroll]] for (uint stage_u_ = 0u; stage_u_ < STAGE_BATCH; ++stage_u_) {                    \
            const uint i = stage_i0_ + stage_u_ * (STRIDE);                                           \
            const float v = (KEEP) ? stage_v_[stage_u_] : 0.0;                                       \
            if (STORED) { STORE; }                                                                   \
        }                                                                                            \
    }

// m = max(m, |VALUE|) over every i = FIRST + k STRIDE < N, STAGE_BATCH loads in flight (lanes past N
// load at N - 1 and keep m).
#define STAGED_ABS_MAX(m, N, STRIDE, FIRST, VALUE)                                                     \
    for (uint stage_i0_ = (FIRST); stage_i0_ < (N); stage_i0_ += STAGE_BATCH * (STRIDE)) {            \
        float stage_v_[STAGE_BATCH];                                                                 \
        [[unroll]] for (uint stage_u_ = 0u; stage_u_ < STAGE_BATCH; ++stage_u_) {                    \
            const uint i = min(stage_i0_ + stage_u_ * (STRIDE), (N) - 1u);                            \
            stage_v_[stage_u_] = abs(VALUE);                                                         \
        }                                                                                            \
        [[unroll]] for (uint stage_u_ = 0u; stage_u_ < STAGE_BATCH; ++stage_u_)                      \
            m = stage_i0_ + stage_u_ * (STRIDE) < (N) ? max(m, stage_v_[stage_u_]) : m;               \
    }

#endif
