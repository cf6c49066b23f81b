/*
 * llmforge communicator: the collectives data-parallel training and ZeRO are
 * built from, behind one opaque handle (DESIGN.md "Communicator").
 *
 * Implementations ("kinds"):
 *   single  one process: rank 0 of 1; every collective is a copy or a no-op.
 *           Needs no MPI and never initialises it.
 *   mpi     one process per rank, started by mpirun/mpiexec (Open MPI, MPICH)
 *           or srun; float buffers in host memory. Standard MPI-3 only.
 *   tcp     one process per rank, started torchrun-style (RANK, WORLD_SIZE,
 *           MASTER_ADDR, MASTER_PORT: torchrun, `llmforge launch --rdzv tcp`),
 *           joined by a TCP rendezvous at MASTER_ADDR:MASTER_PORT; float
 *           buffers in host memory; collectives through rank 0. No MPI.
 *   nccl    one process per GPU: the float collectives and lf_comm_broadcast
 *           on device memory through NCCL, ordered against the caller's
 *           stream (lf_comm_set_stream); broadcast_bytes, barrier and the
 *           f64/i64 reductions on host memory over an "mpi" control handle
 *           (or "single" for one rank; under torchrun the "tcp" kind). Lives in lf_comm_nccl / lf_comm_nccl_shim
 *           and exists once lf_comm_nccl_register() was called.
 *           NCCL's environment (NCCL_DEBUG, NCCL_SOCKET_IFNAME,
 *           NCCL_IB_DISABLE, NCCL_ASYNC_ERROR_HANDLING, ...) is passed
 *           through untouched: NCCL reads it itself.
 *
 * Guarantees every kind gives:
 *  - Every rank calls the same collectives in the same order with the same
 *    sizes (as MPI requires). Each call is one numbered collective ("#k").
 *  - No collective waits forever: each returns within options.timeout_s of
 *    its start (plus a short diagnosis grace, at most 5 s) with
 *    LF_ERR_TIMEOUT and a message naming the collective, its number, the
 *    caller's context (lf_comm_set_context) and the ranks that did not
 *    arrive. The library never exits; the caller reports the message and
 *    ends the job with lf_comm_abort().
 *  - Float reductions are identical on every rank. single, mpi (and nccl on
 *    the NCCL shim): element i of a sum is ((x_0 + x_1) + x_2) + ... in rank
 *    order, in float32, the same bits on every rank, every run and with any
 *    MPI library; AVG is that sum divided by the world size (a division,
 *    not a multiplication). nccl on NCCL: NCCL's ring or tree order, the
 *    same on every rank and run to run for one job layout, NCCL version and
 *    NCCL_ALGO/NCCL_PROTO, but not the rank-order fold: each element of a
 *    sum over P ranks lies within 2 (P - 1) u sum_p |x_p| of it (u = 2^-24).
 *    MAX, MIN, gathers and broadcasts are exact for every kind. bf16
 *    collectives: see "bf16" below.
 *  - Uneven partitions: n elements split into `size` contiguous parts, the
 *    first n % size parts one element longer (see lf_comm_partition()).
 *
 * Thread safety: a handle is used by one thread at a time. lf_comm_open and
 * lf_comm_close of "mpi" handles must come from the same thread (MPI is
 * initialised on the first open and finalised when the last one closes).
 */
#ifndef LLMFORGE_COMM_H
#define LLMFORGE_COMM_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_comm lf_comm;

/* Reduction applied by the all_reduce / reduce_scatter family. */
typedef enum lf_comm_op {
    LF_COMM_SUM = 0,
    LF_COMM_AVG = 1, /* sum / world size; floats and doubles only */
    LF_COMM_MAX = 2, /* e.g. "did any rank overflow" on a 0/1 flag */
    LF_COMM_MIN = 3,
} lf_comm_op;

/* ---------------------------------------------------------------- rank discovery
 * Which launcher started this process, read from its environment. A pure
 * function of the variables, through a getenv-like callback so tests can fake
 * an environment. Checked in this order (the first launcher whose variables
 * are present wins, so mpirun inside a Slurm allocation counts as Open MPI):
 *   Open MPI        OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
 *                   OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
 *   MPICH (Hydra)   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
 *   Slurm (srun)    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_NODELIST
 *   torchrun        RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
 */
typedef const char *(*lf_getenv_fn)(const char *name, void *user);

typedef enum lf_comm_launcher {
    LF_COMM_LAUNCHER_NONE = 0, /* no launcher variables: a plain process */
    LF_COMM_LAUNCHER_OPENMPI = 1,
    LF_COMM_LAUNCHER_MPICH = 2,
    LF_COMM_LAUNCHER_SLURM = 3,
    LF_COMM_LAUNCHER_TORCHRUN = 4,
} lf_comm_launcher;

typedef struct lf_comm_env {
    lf_comm_launcher launcher;
    int rank, size;             /* 0 and 1 when launcher is NONE */
    int local_rank, local_size; /* -1 when the launcher does not say */
    char nodelist[256];         /* SLURM_JOB_NODELIST ("" otherwise; longer lists end in "...") */
    char master_addr[256];      /* torchrun's MASTER_ADDR ("" otherwise) */
    int master_port;            /* torchrun's MASTER_PORT (0 otherwise) */
} lf_comm_env;

/* Fill *out from the environment seen through `get` (NULL: the process's
 * getenv). Errors name the variables:
 *   LF_ERR_CONFIG  a rank variable without its size variable (or the reverse),
 *                  a value that is not a non-negative integer, size 0,
 *                  rank >= size, local rank >= local size, local size > size,
 *                  torchrun's WORLD_SIZE > 1 without MASTER_ADDR/MASTER_PORT,
 *                  MASTER_PORT outside 1..65535.
 *   LF_ERR_INVALID_ARG  out is NULL. */
lf_status lf_comm_env_detect(lf_comm_env *out, lf_getenv_fn get, void *user);
/* "none", "openmpi", "mpich", "slurm", "torchrun". Never NULL. */
const char *lf_comm_launcher_name(lf_comm_launcher l);

/* ---------------------------------------------------------------- open / close */
typedef struct lf_comm_options {
    double timeout_s;       /* bound on every collective, in (0, 1e6]; default 300 */
    size_t segment_elems;   /* floats per round of the reduce-scatter/all-gather pipeline:
                             bounds the scratch memory (about segment_elems floats)
                             and each MPI message; 0 = default 4M */
    lf_getenv_fn getenv_fn; /* environment for rank discovery; NULL = getenv */
    void *getenv_user;
    int device_tensors; /* 1: the caller's float buffers are device memory (the cuda
                             backend's tensors): "auto" then opens "nccl" on several ranks
                             where the program registered it; default 0 */
} lf_comm_options;

lf_comm_options lf_comm_options_default(void);

/* Open a communicator. `kind`:
 *   "single"  one process.
 *   "mpi"     MPI_COMM_WORLD. Initialises MPI (MPI_Init_thread) unless the
 *             program already did; checks MPI's rank and size against the
 *             launcher variables (a Slurm batch script that starts the
 *             program without srun is caught here).
 *   "tcp"     the rendezvous at MASTER_ADDR:MASTER_PORT (torchrun's, or
 *             exported next to another launcher's rank variables; with
 *             TORCHELASTIC_USE_AGENT_STORE=True the next port, torchrun's agent
 *             holding MASTER_PORT): rank 0 listens, the others connect,
 *             retrying until timeout_s. World sizes that differ, a rank
 *             that joins twice: LF_ERR_MISMATCH naming both; ranks missing
 *             at the timeout: LF_ERR_TIMEOUT naming them (rank 0) or
 *             MASTER_ADDR:MASTER_PORT (the others); MASTER_* missing or
 *             malformed: LF_ERR_CONFIG; MASTER_PORT taken: LF_ERR_IO.
 *   "auto"    with size > 1 from rank discovery: "nccl" when
 *             opts->device_tensors and the kind is registered; else "tcp"
 *             when the launcher is torchrun, "mpi" for Open MPI, MPICH,
 *             Slurm; with size 1, "single".
 *   "nccl"    NCCL on the calling thread's current CUDA device (open the
 *             cuda backend first), bootstrapped over its control handle:
 *             rank 0's ncclUniqueId broadcast there, ncclCommInitRankConfig
 *             non-blocking, polled against timeout_s. LF_ERR_UNSUPPORTED
 *             when not registered, or under torchrun without a "tcp" kind;
 *             LF_ERR_DEVICE (CUDA), LF_ERR_IO / LF_ERR_TIMEOUT (NCCL init).
 * opts may be NULL (defaults). On success *out owns the handle; free it with
 * lf_comm_close(). Returns LF_ERR_INVALID_ARG (NULL out, unknown kind),
 * LF_ERR_RANGE (timeout), LF_ERR_CONFIG (inconsistent launcher variables),
 * LF_ERR_MISMATCH (MPI world disagrees with the launcher variables),
 * LF_ERR_UNSUPPORTED (MPI finalised earlier in this process, MPI without
 * MPI-3, nccl), LF_ERR_IO (an MPI call failed), LF_ERR_NOMEM. */
lf_status lf_comm_open(lf_comm **out, const char *kind, const lf_comm_options *opts);
/* 1 when lf_comm_open can open `kind` in this program (built in, or
 * registered: "nccl" after lf_comm_nccl_register), 0 otherwise. */
int lf_comm_kind_available(const char *kind);

/* Release the handle; NULL is a no-op. nccl: ncclCommFinalize (bounded by
 * the timeout), ncclCommDestroy, then its control handle. The last "mpi"
 * handle of a process that initialised MPI finalises it — unless a collective failed or timed
 * out on that handle, in which case MPI is left as is (finalising would wait
 * for the missing peers); the caller is expected to lf_comm_abort() then. */
void lf_comm_close(lf_comm *c);

/* Stop every process of the job with exit code `code` (MPI_Abort for mpi).
 * The decision belongs to the caller (the CLI / trainer), after it reported
 * the error. For mpi (and nccl over mpi: ncclCommAbort first) it does not
 * return. For single it returns LF_OK and the caller exits as usual. For
 * tcp it tells every other rank that this one ends the job (their current
 * or next collective fails at once with LF_ERR_IO naming it), shuts the
 * connections (at most about a second) and returns LF_OK; the caller exits.
 * LF_ERR_INVALID_ARG for NULL; LF_ERR_INTERNAL if MPI_Abort returns. */
lf_status lf_comm_abort(lf_comm *c, int code);

const char *lf_comm_name(const lf_comm *c); /* "single", "mpi", "tcp", "nccl" */
/* 1 when the handle's float collectives and lf_comm_broadcast take device
 * memory (nccl), 0 for host memory (single, mpi; also for NULL). */
int lf_comm_device_buffers(const lf_comm *c);
/* The compute stream (a cudaStream_t, passed as void *) that the device
 * collectives of a device-buffer handle are ordered against: each waits for
 * the work queued on it before the call and the work queued after the call
 * waits for the collective. NULL: the legacy default stream. Kinds with host
 * buffers ignore it (LF_OK). Call it before the first collective, on every
 * rank alike or not at all; the stream must outlive the handle's use of it.
 * LF_ERR_INVALID_ARG (NULL handle), LF_ERR_DEVICE (CUDA refused). */
lf_status lf_comm_set_stream(lf_comm *c, void *stream);

int lf_comm_rank(const lf_comm *c);
int lf_comm_size(const lf_comm *c);
int lf_comm_local_rank(const lf_comm *c); /* rank among the processes of this host */
int lf_comm_local_size(const lf_comm *c);
double lf_comm_timeout(const lf_comm *c);
/* How this process was launched (what lf_comm_env_detect found at open). */
const lf_comm_env *lf_comm_launch_env(const lf_comm *c);

/* Context named in error messages until changed, e.g. "step 12"; printf-style,
 * truncated at 127 bytes. NULL clears it. */
void lf_comm_set_context(lf_comm *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Message of the last failure on this handle ("" if none); valid until the
 * next call on the handle. */
const char *lf_comm_errmsg(const lf_comm *c);

/* Number of collectives started on this handle so far (the "#k" of messages). */
int64_t lf_comm_seq(const lf_comm *c);

/* Part `rank` of n elements split into `size` parts: the first n % size parts
 * hold n/size + 1 elements, the others n/size; parts are contiguous and in
 * rank order (DeepSpeed's ceil/floor partition, no padding). */
void lf_comm_partition(size_t n, int size, int rank, size_t *offset, size_t *count);

/* ---------------------------------------------------------------- collectives
 * Common returns: LF_OK; LF_ERR_INVALID_ARG (NULL handle or buffer with
 * n > 0, op not valid for the type, root outside the world, a previous
 * collective on this handle failed — the handle is then unusable and the
 * message repeats the first failure); LF_ERR_RANGE (n beyond what the
 * collective supports, see each); LF_ERR_TIMEOUT (see top); LF_ERR_IO (MPI
 * reported an error, e.g. a peer died; tcp: a peer's connection ended, or
 * another rank failed this collective and said so); LF_ERR_MISMATCH (tcp:
 * ranks called different collectives or sizes, found when the frames
 * arrive); LF_ERR_NOMEM (scratch); LF_ERR_UNSUPPORTED (the kind lacks the
 * collective).
 * Buffers are host memory for single, mpi and tcp, borrowed for the call only;
 * for nccl the float collectives and lf_comm_broadcast take device memory
 * (cudaMalloc) and lf_comm_broadcast_bytes and the f64/i64 reductions host
 * memory (lf_comm_device_buffers tells). nccl's calls return when the
 * collective has run; a timeout aborts the NCCL communicator
 * (ncclCommAbort) and NCCL errors are LF_ERR_IO (peer, network),
 * LF_ERR_DEVICE (CUDA) or LF_ERR_INVALID_ARG with NCCL's message.
 * After LF_ERR_TIMEOUT the MPI library may still write into the buffers
 * until the process ends: abort, do not reuse them. */

/* buf (n) := op over ranks of buf, in place. Any n. */
lf_status lf_comm_all_reduce(lf_comm *c, float *buf, size_t n, lf_comm_op op);

/* recv (count of this rank's part) := part `rank` of (op over ranks of send (n)).
 * recv may be exactly send + offset(rank) (in place); otherwise the buffers
 * must not overlap. n < 2^31. */
lf_status lf_comm_reduce_scatter(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op);

/* The same, started: on a kind with asynchronous collectives (nccl: its
 * communication stream) the reduce-scatter is enqueued after the compute
 * stream's work so far and the call returns; *ticket names it for
 * lf_comm_wait. Elsewhere it runs to completion here and *ticket is 0. The
 * buffers must stay untouched until it is waited for. */
lf_status lf_comm_reduce_scatter_start(lf_comm *c, const float *send, float *recv, size_t n, lf_comm_op op,
                                       int64_t *ticket);
/* lf_comm_all_reduce, started the same way (data parallel's per-unit
 * gradient sums overlapped with backward, ZeRO stage 0). */
lf_status lf_comm_all_reduce_start(lf_comm *c, float *buf, size_t n, lf_comm_op op, int64_t *ticket);
/* lf_comm_all_gather, started the same way (ZeRO-3's prefetch). */
lf_status lf_comm_all_gather_start(lf_comm *c, const float *send, float *recv, size_t n, int64_t *ticket);
/* Order the compute stream (lf_comm_set_stream) after the collective of
 * `ticket`: work enqueued there afterwards sees its result. The host does
 * not block (ticket 0 or one already waited for: nothing to do). */
lf_status lf_comm_wait(lf_comm *c, int64_t ticket);
/* Block until every started collective has completed, under the
 * watchdog: one still running comm.timeout_s after its start fails as a
 * blocking collective would (LF_ERR_TIMEOUT naming it, the communicator
 * aborted). The compute stream is ordered after them all. */
lf_status lf_comm_wait_all(lf_comm *c);
/* 1 when started collectives run asynchronously on this kind (nccl). */
int lf_comm_async(const lf_comm *c);

/* Milliseconds of communication on this handle since it opened:
 *   busy     the collectives' own time: each blocking call's host time, and
 *            for a started collective (nccl) its time on the communication
 *            stream (CUDA event timing), counted when lf_comm_wait_all (or a
 *            start that needs its slot) finds it complete;
 *   exposed  the time the caller waited: the host time inside every
 *            collective, start, wait and wait_all call.
 * busy - exposed is communication that ran behind the caller's work (clamp
 * it at 0: the two clocks differ). Kinds without asynchronous collectives
 * run a start to completion, so there busy == exposed. Either pointer may be
 * NULL; a NULL handle gives 0. */
void lf_comm_times(const lf_comm *c, double *busy_ms, double *exposed_ms);

/* recv (n) := the parts of every rank, part p from rank p's send (count of
 * part p). send may be exactly recv + offset(rank) (in place). n < 2^31. */
lf_status lf_comm_all_gather(lf_comm *c, const float *send, float *recv, size_t n);

/* buf (n) := root's buf. */
lf_status lf_comm_broadcast(lf_comm *c, float *buf, size_t n, int root);
lf_status lf_comm_broadcast_bytes(lf_comm *c, void *buf, size_t bytes, int root);

/* Every rank has arrived. */
lf_status lf_comm_barrier(lf_comm *c);

/* ---------------------------------------------------------------- bf16
 * The float collectives above on bfloat16 elements (raw bits, uint16_t),
 * with the same arguments, placements, limits, partitions and returns (n
 * counts elements): DeepSpeed's communication_data_type "bf16", half the
 * bytes of fp32 on the wire where the kind moves bf16 itself.
 *  - single, mpi, tcp, and nccl on the NCCL shim: a reduction widens every
 *    rank's values to fp32 (exact), folds them in rank order in fp32 as the
 *    fp32 collective does, and rounds the result once to the nearest bf16
 *    (ties to even; NaN stays NaN): element i is bf16(fold_p x_p,i), the same
 *    bits on every rank and every run, within 2^-9 |fold| of the fp32
 *    collective's result on the same inputs. The host kinds move fp32 on
 *    the wire (the conversion is done here, with 4 n bytes of scratch): the
 *    semantics, not the bandwidth.
 *  - nccl on NCCL: ncclBfloat16, NCCL's ring or tree order with a bf16
 *    rounding after each of the P - 1 additions: each element of a sum
 *    lies within (P - 1) 2^-8 sum_p |x_p| of the exact sum of the inputs
 *    (each partial sum's rounding is at most 2^-9 of it relative, two such
 *    per hop bounded together), the same on every rank for one job layout.
 *  - gathers and broadcasts are bit-exact for every kind (a signalling NaN
 *    may come back quiet on the host kinds, which widen and round).
 * The started forms (lf_comm_*_start_bf16) are asynchronous on nccl only,
 * as the fp32 ones. */
lf_status lf_comm_all_reduce_bf16(lf_comm *c, uint16_t *buf, size_t n, lf_comm_op op);
lf_status lf_comm_reduce_scatter_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, lf_comm_op op);
lf_status lf_comm_reduce_scatter_start_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, lf_comm_op op,
                                            int64_t *ticket);
lf_status lf_comm_all_gather_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n);
lf_status lf_comm_all_gather_start_bf16(lf_comm *c, const uint16_t *send, uint16_t *recv, size_t n, int64_t *ticket);
lf_status lf_comm_broadcast_bf16(lf_comm *c, uint16_t *buf, size_t n, int root);

/* Small reductions (loss sums, token counts, flags): in place over n values,
 * n <= 4096. Deterministic in rank order like the float ones. AVG is
 * LF_ERR_INVALID_ARG for int64. */
lf_status lf_comm_all_reduce_f64(lf_comm *c, double *v, size_t n, lf_comm_op op);
lf_status lf_comm_all_reduce_i64(lf_comm *c, int64_t *v, size_t n, lf_comm_op op);

#ifdef __cplusplus
}
#endif
#endif
