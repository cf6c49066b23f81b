/*
 * The CUDA-on-CPU shim's execution model: every CUDA thread of a block is a
 * fiber, the blocks of a grid run one after another on the launching
 * thread, and __syncthreads / the warp functions are the only points where
 * one fiber hands over to another (see lf_shim.h for the schedule and
 * ../README.md for the rules kernels must follow).
 *
 * Why fibers (not OS threads): a block needs up to 1024 threads that block
 * at barriers; OS threads would make the interleaving the kernel's outcome
 * depends on a matter of chance, fibers make it a fixed, seeded function of
 * the schedule, so a test result is reproducible and a race the schedule
 * exposes fails every run. Why our own: no fiber library gives CUDA's
 * barrier semantics or checks its rules.
 *
 * How a switch works: each fiber gets its own mmap'd stack (guard page
 * below) and is created once with makecontext/setcontext, after which it
 * parks in fiber_main's loop; from then on every switch is _setjmp/_longjmp
 * (no system call; glibc's swapcontext makes a sigprocmask call per switch:
 * lf_shim_measure_switch compares them). Fibers persist across blocks and
 * launches and are re-created only after a launch that failed left them in
 * the middle of a kernel. Under AddressSanitizer every switch is announced
 * with __sanitizer_start/finish_switch_fiber.
 *
 * Invariants:
 *  - One launch at a time, process-wide (launch_mutex): the scheduler
 *    state S belongs to the launch holding it. A launch runs every block on
 *    the launching OS thread, one after another, so that thread's copy of
 *    each __shared__ variable (a static thread_local) is the running
 *    block's; it is poisoned at every block's start, found through the
 *    symbol table (find_static_shared). Blocks on several OS threads would
 *    need nothing else from __shared__; the scheduler state would have to
 *    become per thread.
 *  - Within a block, fibers run in rounds: the fibers runnable when a round
 *    starts run once each, in the round's order, to their next scheduling
 *    point. Every arrival at a scheduling point yields, even the one that
 *    completes it, so no fiber runs two segments in one round.
 *  - Block barrier: completes when ALL threads of the block wait at it, at
 *    the same source line. A thread that exited never arrives: the others
 *    then deadlock, which is reported (CUDA requires every thread of the
 *    block to reach each __syncthreads; the early-return pattern is
 *    undefined there, so it is an error here).
 *  - Warp collective with mask M: completes when every lane of M that has
 *    not exited (a lane missing from a partial last warp counts as exited)
 *    waits at a warp call with mask M and the same function. The calling
 *    lane must be in M; lanes whose masks overlap must agree on the mask
 *    and the function; a shuffle may read only a lane that takes part. The
 *    source lane is computed as PTX's shfl.sync defines it (lane operand
 *    masked to 5 bits, width segments, out-of-segment reads keep the own
 *    value).
 *  - No fiber runnable, some not finished: deadlock, reported naming a
 *    thread that never arrives and where it is.
 *  - A broken rule ends the launch at once: no later block runs, the error
 *    is sticky (cudaErrorLaunchFailure) with a message naming the kernel,
 *    block, thread, rule and source line.
 *
 * Reference: CUDA C++ Programming Guide, "Synchronization Functions",
 * "Warp Vote / Shuffle / Reduce Functions"; PTX ISA, shfl.sync and bar.sync.
 */
#include <atomic>
#include <cinttypes>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <setjmp.h>
#include <sys/mman.h>
#include <time.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <ucontext.h>
#include <unistd.h>
#include "cuda_device_shim.h"
#include "shim_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define LF_SHIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LF_SHIM_ASAN 1
#endif
#endif
#ifdef LF_SHIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

/* What the header's threadIdx/blockIdx/... read. */
__thread const lf_shim_block_info *lf_shim_tls_block;
__thread const uint3 *lf_shim_tls_thread_idx;
__thread void *lf_shim_tls_dynamic_shared;


namespace {

enum fstate : unsigned char { F_RUNNABLE, F_BLOCK, F_WARP, F_DONE };

struct fiber {
    jmp_buf env;
    void *map = nullptr; /* the mapping: guard page, then the stack */
    size_t map_bytes = 0;
    char *stack_lo = nullptr;
    size_t stack_bytes = 0;
    bool ready = false;   /* parked in fiber_main's loop, between two kernel calls */
    bool in_body = false; /* inside the kernel (resumed from the park) */
    void *asan_fake = nullptr;
    int tid = 0, lane = 0, warp = 0;
    uint3 tidx{0, 0, 0};
    fstate state = F_DONE;
    /* where it waits */
    const char *file = nullptr;
    int line = 0;
    int op = 0;
    unsigned mask = 0;
    uint64_t value = 0;
    int b = 0, width = 32;
    uint64_t result = 0;

    fiber() = default;
    fiber(const fiber &) = delete;
    fiber &operator=(const fiber &) = delete;
    ~fiber() {
        if (map) munmap(map, map_bytes);
    }
};

struct group {
    int op;
    unsigned mask;
    unsigned arrived;
    const char *file;
    int line;
};

struct scheduler {
    jmp_buf env;
    void *asan_fake = nullptr;
    const void *main_bottom = nullptr; /* the launching thread's stack, for ASan */
    size_t main_bytes = 0;
    std::vector<std::unique_ptr<fiber>> pool;
    fiber *cur = nullptr;
    fiber *initializing = nullptr;
    /* the launch */
    const char *kernel = "";
    lf_shim::launch_body body = nullptr;
    void *ctx = nullptr;
    lf_shim_block_info block{};
    uint64_t block_linear = 0;
    int nthreads = 0, nwarps = 0;
    std::vector<unsigned> exited; /* per warp: lanes finished or missing */
    std::vector<std::vector<group>> groups;
    int barrier_arrived = 0;
    int barrier_op = 0;
    const char *barrier_file = nullptr;
    int barrier_line = 0;
    bool failed = false;
    char msg[1024];
    lf_shim_schedule_kind kind = LF_SHIM_SCHEDULE_SHUFFLE;
    uint64_t seed = 0;
    unsigned char *dyn = nullptr; /* the dynamic shared buffer */
    size_t dyn_bytes = 0;
    std::vector<fiber *> order;

    ~scheduler() { free(dyn); }
};

scheduler S;
std::mutex launch_mutex;
std::atomic<uint64_t> total_switches{0};
__thread bool tls_in_launch = false;

/* ------------------------------------------------------------ switching */
inline void asan_start(void **fake_save, const void *bottom, size_t bytes) {
#ifdef LF_SHIM_ASAN
    __sanitizer_start_switch_fiber(fake_save, bottom, bytes);
#else
    (void)fake_save, (void)bottom, (void)bytes;
#endif
}
inline void asan_finish(void *fake_save, const void **old_bottom, size_t *old_bytes) {
#ifdef LF_SHIM_ASAN
    __sanitizer_finish_switch_fiber(fake_save, old_bottom, old_bytes);
#else
    (void)fake_save, (void)old_bottom, (void)old_bytes;
#endif
}

/* scheduler -> fiber; returns when the fiber yields, exits or fails. The
 * switches stay out of line so that no caller's locals live across a
 * _setjmp. */
__attribute__((noinline)) void resume(fiber *f) {
    S.cur = f;
    lf_shim_tls_thread_idx = &f->tidx;
    total_switches.fetch_add(2, std::memory_order_relaxed);
    asan_start(&S.asan_fake, f->stack_lo, f->stack_bytes);
    if (_setjmp(S.env) == 0) _longjmp(f->env, 1);
    asan_finish(S.asan_fake, nullptr, nullptr);
    S.cur = nullptr;
}

/* fiber -> scheduler; returns when the scheduler resumes this fiber */
__attribute__((noinline)) void yield(fiber *f) {
    asan_start(&f->asan_fake, S.main_bottom, S.main_bytes);
    if (_setjmp(f->env) == 0) _longjmp(S.env, 1);
    asan_finish(f->asan_fake, &S.main_bottom, &S.main_bytes);
}

void fiber_exit(fiber *f);

/* Every fiber's life: park, then one kernel call per resume from the park. */
void fiber_main() {
    fiber *f = S.initializing;
    asan_finish(nullptr, &S.main_bottom, &S.main_bytes);
    yield(f); /* parked: init_fiber returns */
    for (;;) {
        S.body(S.ctx);
        fiber_exit(f);
        f->in_body = false;
        yield(f);
    }
}

size_t page_bytes() {
    static size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

/* Create (or re-create after a failed launch) f's context on its stack. */
__attribute__((noinline)) bool init_fiber(fiber *f) {
    if (!f->map) {
        size_t stack = (lf_shim_rt::fiber_stack_bytes() + page_bytes() - 1) & ~(page_bytes() - 1);
        size_t bytes = stack + page_bytes();
        void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                       -1, 0);
        if (m == MAP_FAILED) return false;
        if (mprotect(m, page_bytes(), PROT_NONE) != 0) {
            munmap(m, bytes);
            return false;
        }
        f->map = m;
        f->map_bytes = bytes;
        f->stack_lo = (char *)m + page_bytes();
        f->stack_bytes = stack;
    }
#ifdef LF_SHIM_ASAN
    /* frames abandoned by a failed launch left their redzones poisoned */
    __asan_unpoison_memory_region(f->stack_lo, f->stack_bytes);
#endif
    ucontext_t uc;
    if (getcontext(&uc) != 0) return false;
    uc.uc_stack.ss_sp = f->stack_lo;
    uc.uc_stack.ss_size = f->stack_bytes;
    uc.uc_link = nullptr;
    makecontext(&uc, fiber_main, 0);
    S.initializing = f;
    asan_start(&S.asan_fake, f->stack_lo, f->stack_bytes);
    if (_setjmp(S.env) == 0) setcontext(&uc);
    asan_finish(S.asan_fake, nullptr, nullptr);
    f->ready = true;
    f->in_body = false;
    return true;
}

/* ------------------------------------------------------------ messages */
const char *base_name(const char *path) {
    const char *s = path ? strrchr(path, '/') : nullptr;
    return s ? s + 1 : (path ? path : "?");
}

const char *op_name(int op) {
    switch (op) {
    case lf_shim::WARP_SYNC: return "__syncwarp";
    case lf_shim::WARP_SHFL_IDX: return "__shfl_sync";
    case lf_shim::WARP_SHFL_UP: return "__shfl_up_sync";
    case lf_shim::WARP_SHFL_DOWN: return "__shfl_down_sync";
    case lf_shim::WARP_SHFL_XOR: return "__shfl_xor_sync";
    case lf_shim::WARP_BALLOT: return "__ballot_sync";
    case lf_shim::WARP_ANY: return "__any_sync";
    case lf_shim::WARP_ALL: return "__all_sync";
    case lf_shim::WARP_REDUCE_ADD_U: return "__reduce_add_sync";
    case lf_shim::WARP_REDUCE_MIN_U:
    case lf_shim::WARP_REDUCE_MIN_I: return "__reduce_min_sync";
    case lf_shim::WARP_REDUCE_MAX_U:
    case lf_shim::WARP_REDUCE_MAX_I: return "__reduce_max_sync";
    }
    return "?";
}
const char *barrier_name(int op) {
    switch (op) {
    case lf_shim::BLOCK_COUNT: return "__syncthreads_count";
    case lf_shim::BLOCK_AND: return "__syncthreads_and";
    case lf_shim::BLOCK_OR: return "__syncthreads_or";
    }
    return "__syncthreads";
}

/* "kernel 'k' block (x,y,z) thread (x,y,z): " + the rule, once per launch */
__attribute__((format(printf, 2, 3))) void record(const fiber *who, const char *fmt, ...) {
    if (S.failed) return;
    S.failed = true;
    int n = snprintf(S.msg, sizeof S.msg, "kernel '%s' block (%u,%u,%u) thread (%u,%u,%u): ", S.kernel,
                     S.block.block_idx.x, S.block.block_idx.y, S.block.block_idx.z, who->tidx.x, who->tidx.y,
                     who->tidx.z);
    if (n < 0 || (size_t)n >= sizeof S.msg) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S.msg + n, sizeof S.msg - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Called on the running fiber: end the launch now. */
[[noreturn]] void abandon() {
    fiber *me = S.cur;
    me->ready = false; /* its frames are dropped; re-created before its next use */
    asan_start(nullptr, S.main_bottom, S.main_bytes);
    _longjmp(S.env, 1);
}

/* ------------------------------------------------------------ block barrier */
void complete_barrier() {
    uint64_t r = 0;
    int count = 0;
    for (int t = 0; t < S.nthreads; t++) count += S.pool[t]->value != 0;
    switch (S.barrier_op) {
    case lf_shim::BLOCK_COUNT: r = (uint64_t)count; break;
    case lf_shim::BLOCK_AND: r = count == S.nthreads; break;
    case lf_shim::BLOCK_OR: r = count > 0; break;
    default: r = 0;
    }
    for (int t = 0; t < S.nthreads; t++) {
        fiber *x = S.pool[t].get();
        x->result = r;
        x->state = F_RUNNABLE;
    }
    S.barrier_arrived = 0;
}

/* ------------------------------------------------------------ warp collectives */
fiber *lane_fiber(int warp, int lane) { return S.pool[(size_t)warp * 32 + (size_t)lane].get(); }

/* The lanes that exist in warp w (a partial last warp has fewer than 32). */
unsigned existing_lanes(int w) {
    int n = S.nthreads - w * 32;
    return n >= 32 ? 0xffffffffu : ((1u << n) - 1u);
}

/* Source lane of a shuffle, as PTX shfl.sync computes it; *pval = 0 when
 * the lane keeps its own value. */
int shfl_source(int op, int lane, int b, int width, int *pval) {
    int segmask = (32 - width) & 31;
    int cval = op == lf_shim::WARP_SHFL_UP ? 0 : 31;
    int bval = b & 31;
    int max_lane = (lane & segmask) | (cval & ~segmask);
    int min_lane = lane & segmask;
    int j = lane;
    int p = 1;
    switch (op) {
    case lf_shim::WARP_SHFL_UP: j = lane - bval; p = j >= max_lane; break;
    case lf_shim::WARP_SHFL_DOWN: j = lane + bval; p = j <= max_lane; break;
    case lf_shim::WARP_SHFL_XOR: j = lane ^ bval; p = j <= max_lane; break;
    case lf_shim::WARP_SHFL_IDX: j = min_lane | (bval & ~segmask); p = j <= max_lane; break;
    }
    *pval = p;
    return p ? j : lane;
}

bool is_shfl(int op) {
    return op == lf_shim::WARP_SHFL_IDX || op == lf_shim::WARP_SHFL_UP || op == lf_shim::WARP_SHFL_DOWN ||
           op == lf_shim::WARP_SHFL_XOR;
}

/* Complete group gi of warp w if every live lane of its mask arrived.
 * May record a broken rule (the caller then abandons). */
void try_complete(int w, size_t gi) {
    group g = S.groups[(size_t)w][gi];
    unsigned live = g.mask & ~S.exited[(size_t)w];
    if (g.arrived != live) return;
    uint64_t acc = 0;
    bool first = true;
    for (int l = 0; l < 32; l++) {
        if (!(g.arrived >> l & 1u)) continue;
        const fiber *x = lane_fiber(w, l);
        switch (g.op) {
        case lf_shim::WARP_BALLOT:
        case lf_shim::WARP_ANY:
        case lf_shim::WARP_ALL: acc |= (uint64_t)(x->value != 0) << l; break;
        case lf_shim::WARP_REDUCE_ADD_U: acc = (uint32_t)(acc + (uint32_t)x->value); break;
        case lf_shim::WARP_REDUCE_MIN_U:
            acc = first || (uint32_t)x->value < (uint32_t)acc ? (uint32_t)x->value : acc;
            break;
        case lf_shim::WARP_REDUCE_MAX_U:
            acc = first || (uint32_t)x->value > (uint32_t)acc ? (uint32_t)x->value : acc;
            break;
        case lf_shim::WARP_REDUCE_MIN_I:
            acc = first || (int32_t)x->value < (int32_t)acc ? (uint32_t)x->value : acc;
            break;
        case lf_shim::WARP_REDUCE_MAX_I:
            acc = first || (int32_t)x->value > (int32_t)acc ? (uint32_t)x->value : acc;
            break;
        }
        first = false;
    }
    for (int l = 0; l < 32; l++) {
        if (!(g.arrived >> l & 1u)) continue;
        fiber *x = lane_fiber(w, l);
        uint64_t r = 0;
        if (is_shfl(g.op)) {
            int pval;
            int j = shfl_source(g.op, l, x->b, x->width, &pval);
            if (pval && !(g.arrived >> j & 1u)) {
                if (!(g.mask >> j & 1u))
                    record(x, "%s at %s:%d reads lane %d, outside its mask 0x%08x", op_name(g.op),
                           base_name(x->file), x->line, j, g.mask);
                else if (!(existing_lanes(w) >> j & 1u))
                    record(x, "%s at %s:%d reads lane %d, which is not a thread of this block (its last warp has %d lanes)",
                           op_name(g.op), base_name(x->file), x->line, j, S.nthreads - w * 32);
                else
                    record(x, "%s at %s:%d reads lane %d, which has exited", op_name(g.op), base_name(x->file),
                           x->line, j);
                return;
            }
            r = lane_fiber(w, j)->value;
        } else if (g.op == lf_shim::WARP_BALLOT) {
            r = acc;
        } else if (g.op == lf_shim::WARP_ANY) {
            r = acc != 0;
        } else if (g.op == lf_shim::WARP_ALL) {
            r = acc == g.arrived;
        } else if (g.op != lf_shim::WARP_SYNC) {
            r = acc;
        }
        x->result = r;
    }
    for (int l = 0; l < 32; l++)
        if (g.arrived >> l & 1u) lane_fiber(w, l)->state = F_RUNNABLE;
    S.groups[(size_t)w].erase(S.groups[(size_t)w].begin() + (long)gi);
}

void fiber_exit(fiber *f) {
    f->state = F_DONE;
    S.exited[(size_t)f->warp] |= 1u << f->lane;
    auto &gs = S.groups[(size_t)f->warp];
    for (size_t gi = 0; gi < gs.size();) {
        size_t before = gs.size();
        if (gs[gi].mask >> f->lane & 1u) try_complete(f->warp, gi);
        if (S.failed) abandon();
        if (gs.size() == before) gi++;
    }
}

/* ------------------------------------------------------------ schedule */
uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t s = a ^ (b * 0xd6e8feb86659fd93ull);
    return splitmix(&s);
}

void order_round(std::vector<fiber *> &v, uint64_t round) {
    if (S.kind == LF_SHIM_SCHEDULE_FORWARD) return;
    if (S.kind == LF_SHIM_SCHEDULE_REVERSE) {
        for (size_t i = 0, j = v.size(); i + 1 < j; i++, j--) std::swap(v[i], v[j - 1]);
        return;
    }
    uint64_t s = mix(mix(S.seed, S.block_linear), round);
    for (size_t i = v.size(); i > 1; i--) {
        size_t j = (size_t)(splitmix(&s) % i);
        std::swap(v[i - 1], v[j]);
    }
}

uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The order of the blocks: a bijection of [0, G) (SHUFFLE: i -> a*i + c mod
 * G, a coprime with G, both from the seed). Depends on the seed and G
 * only, so relaunching a kernel repeats its schedule. */
struct block_order {
    uint64_t G, a = 1, c = 0;
    lf_shim_schedule_kind kind;
    block_order(uint64_t g, lf_shim_schedule_kind k, uint64_t seed) : G(g), kind(k) {
        if (k != LF_SHIM_SCHEDULE_SHUFFLE || G < 2) return;
        uint64_t s = mix(seed, G);
        a = splitmix(&s) % G;
        while (gcd(a, G) != 1) a = (a + 1) % G;
        c = splitmix(&s) % G;
    }
    uint64_t at(uint64_t i) const {
        if (kind == LF_SHIM_SCHEDULE_FORWARD || G < 2) return i;
        if (kind == LF_SHIM_SCHEDULE_REVERSE) return G - 1 - i;
        return (uint64_t)(((unsigned __int128)a * i + c) % G);
    }
};

/* ------------------------------------------------------------ static shared memory */
/* Every __shared__ variable is a function-local static thread_local
 * (cuda_device_shim.h): an STT_TLS symbol named _ZZ... in the symbol table
 * of its ELF object, at st_value in the object's TLS block. The symbol
 * tables are read once per object file (/proc/self/exe for the program);
 * each launch asks dl_iterate_phdr for the launching thread's TLS blocks. */
struct tls_var {
    size_t offset, bytes;
};
struct tls_object {
    std::string path;
    std::vector<tls_var> vars;
};
std::vector<tls_object> tls_objects; /* parsed files, under launch_mutex */
struct shared_range {
    char *lo;
    size_t bytes;
};
std::vector<shared_range> shared_ranges; /* this launch's */

void read_tls_symbols(const char *path, std::vector<tls_var> *out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ElfW(Ehdr) eh;
    std::vector<ElfW(Shdr)> sh;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_shentsize != sizeof(ElfW(Shdr)) || eh.e_shnum == 0) {
        close(fd);
        return;
    }
    sh.resize(eh.e_shnum);
    if (pread(fd, sh.data(), sh.size() * sizeof sh[0], (off_t)eh.e_shoff) != (ssize_t)(sh.size() * sizeof sh[0])) {
        close(fd);
        return;
    }
    for (const ElfW(Shdr) &symtab : sh) {
        if (symtab.sh_type != SHT_SYMTAB || symtab.sh_link >= sh.size() || symtab.sh_entsize != sizeof(ElfW(Sym)))
            continue;
        const ElfW(Shdr) &strtab = sh[symtab.sh_link];
        std::vector<ElfW(Sym)> syms(symtab.sh_size / sizeof(ElfW(Sym)));
        std::vector<char> names(strtab.sh_size + 1, 0);
        if (pread(fd, syms.data(), syms.size() * sizeof syms[0], (off_t)symtab.sh_offset) !=
                (ssize_t)(syms.size() * sizeof syms[0]) ||
            pread(fd, names.data(), strtab.sh_size, (off_t)strtab.sh_offset) != (ssize_t)strtab.sh_size)
            continue;
        for (const ElfW(Sym) &y : syms)
            if ((y.st_info & 0xf) == STT_TLS && y.st_size > 0 && y.st_name < strtab.sh_size &&
                strncmp(&names[y.st_name], "_ZZ", 3) == 0)
                out->push_back(tls_var{(size_t)y.st_value, (size_t)y.st_size});
    }
    close(fd);
}

int collect_object(struct dl_phdr_info *info, size_t, void *first) {
    bool *is_first = (bool *)first;
    bool program = *is_first;
    *is_first = false;
    if (!info->dlpi_tls_data) return 0; /* no TLS, or none allocated in this thread yet */
    std::string path = program ? "/proc/self/exe" : (info->dlpi_name ? info->dlpi_name : "");
    if (path.empty()) return 0;
    const tls_object *obj = nullptr;
    for (const tls_object &o : tls_objects)
        if (o.path == path) obj = &o;
    if (!obj) {
        tls_objects.push_back(tls_object{path, {}});
        read_tls_symbols(path.c_str(), &tls_objects.back().vars);
        obj = &tls_objects.back();
    }
    for (const tls_var &v : obj->vars)
        shared_ranges.push_back(shared_range{(char *)info->dlpi_tls_data + v.offset, v.bytes});
    return 0;
}

void find_static_shared() {
    shared_ranges.clear();
    bool first = true;
    dl_iterate_phdr(collect_object, &first);
}

void poison_static_shared(unsigned char b) {
    for (const shared_range &r : shared_ranges) memset(r.lo, b, r.bytes);
}

/* ------------------------------------------------------------ blocks */

/* The first thread that never reaches what blocked thread `w` waits for. */
void describe_deadlock() {
    if (S.barrier_arrived > 0) {
        for (int t = 0; t < S.nthreads; t++) {
            const fiber *m = S.pool[t].get();
            if (m->state == F_BLOCK) continue;
            if (m->state == F_DONE)
                record(m, "exited without reaching %s at %s:%d, which %d of the block's %d threads wait at (deadlock)",
                       barrier_name(S.barrier_op), base_name(S.barrier_file), S.barrier_line, S.barrier_arrived,
                       S.nthreads);
            else
                record(m, "waits in %s at %s:%d (mask 0x%08x) and never reaches %s at %s:%d, which %d of the block's "
                          "%d threads wait at (deadlock)",
                       op_name(m->op), base_name(m->file), m->line, m->mask, barrier_name(S.barrier_op),
                       base_name(S.barrier_file), S.barrier_line, S.barrier_arrived, S.nthreads);
            return;
        }
    }
    for (int t = 0; t < S.nthreads; t++) {
        const fiber *f = S.pool[t].get();
        if (f->state != F_WARP) continue;
        for (const group &g : S.groups[(size_t)f->warp]) {
            if (!(g.mask >> f->lane & 1u)) continue;
            unsigned missing = g.mask & ~S.exited[(size_t)f->warp] & ~g.arrived;
            int l = missing ? __builtin_ctz(missing) : f->lane;
            const fiber *m = lane_fiber(f->warp, l);
            record(f, "%s at %s:%d (mask 0x%08x) waits for lane %d, which waits in %s at %s:%d (mask 0x%08x) "
                      "(deadlock)",
                   op_name(g.op), base_name(g.file), g.line, g.mask, l, op_name(m->op), base_name(m->file), m->line,
                   m->mask);
            return;
        }
    }
    record(S.pool[0].get(), "deadlock");
}

void run_block(uint64_t linear, unsigned char poison) {
    const dim3 &gd = S.block.grid_dim;
    S.block_linear = linear;
    S.block.block_idx.x = (unsigned)(linear % gd.x);
    S.block.block_idx.y = (unsigned)(linear / gd.x % gd.y);
    S.block.block_idx.z = (unsigned)(linear / ((uint64_t)gd.x * gd.y));
    poison_static_shared(poison);
    const dim3 &bd = S.block.block_dim;
    for (int t = 0; t < S.nthreads; t++) {
        fiber *f = S.pool[t].get();
        f->tid = t;
        f->lane = t & 31;
        f->warp = t >> 5;
        f->tidx.x = (unsigned)t % bd.x;
        f->tidx.y = (unsigned)t / bd.x % bd.y;
        f->tidx.z = (unsigned)t / (bd.x * bd.y);
        f->state = F_RUNNABLE;
        f->value = 0;
    }
    for (int w = 0; w < S.nwarps; w++) {
        S.exited[(size_t)w] = ~existing_lanes(w);
        S.groups[(size_t)w].clear();
    }
    S.barrier_arrived = 0;
    for (uint64_t round = 0;; round++) {
        S.order.clear();
        for (int t = 0; t < S.nthreads; t++)
            if (S.pool[t]->state == F_RUNNABLE) S.order.push_back(S.pool[t].get());
        if (S.order.empty()) break;
        order_round(S.order, round);
        for (fiber *f : S.order) {
            if (!f->in_body) f->in_body = true;
            resume(f);
            if (S.failed) return;
        }
    }
    for (int t = 0; t < S.nthreads; t++)
        if (S.pool[t]->state != F_DONE) {
            describe_deadlock();
            return;
        }
}

} // namespace

/* ------------------------------------------------------------ the scheduling points */
int lf_shim::block_barrier(const char *file, int line, int op, int pred) {
    fiber *f = S.cur;
    if (!f || !tls_in_launch) return 0; /* not inside a kernel: nvcc rejects such a call */
    if (S.barrier_arrived > 0 &&
        (strcmp(S.barrier_file, file) != 0 || S.barrier_line != line || S.barrier_op != op)) {
        record(f, "reaches %s at %s:%d while %d of the block's threads wait at %s at %s:%d: every thread of a "
                  "block must reach the same __syncthreads",
               barrier_name(op), base_name(file), line, S.barrier_arrived, barrier_name(S.barrier_op),
               base_name(S.barrier_file), S.barrier_line);
        abandon();
    }
    if (S.barrier_arrived == 0) {
        S.barrier_file = file;
        S.barrier_line = line;
        S.barrier_op = op;
    }
    f->state = F_BLOCK;
    f->file = file;
    f->line = line;
    f->op = op;
    f->value = (uint64_t)(pred != 0);
    if (++S.barrier_arrived == S.nthreads) complete_barrier();
    yield(f);
    return (int)f->result;
}

uint64_t lf_shim::warp_collective(const char *file, int line, int op, unsigned mask, uint64_t value, int b,
                                  int width) {
    fiber *f = S.cur;
    if (!f || !tls_in_launch) return 0;
    unsigned bit = 1u << f->lane;
    if (!(mask & bit)) {
        record(f, "%s at %s:%d with mask 0x%08x, which does not include the calling lane %d", op_name(op),
               base_name(file), line, mask, f->lane);
        abandon();
    }
    if (is_shfl(op) && (width < 1 || width > 32 || (width & (width - 1)) != 0)) {
        record(f, "%s at %s:%d with width %d: the width must be a power of two from 1 to 32", op_name(op),
               base_name(file), line, width);
        abandon();
    }
    auto &gs = S.groups[(size_t)f->warp];
    size_t gi = gs.size();
    for (size_t i = 0; i < gs.size(); i++) {
        const group &g = gs[i];
        if (!(g.mask & mask)) continue;
        if (g.mask != mask) {
            record(f, "%s at %s:%d with mask 0x%08x while lanes 0x%08x of its warp wait in %s at %s:%d with mask "
                      "0x%08x: the lanes of a warp-synchronous call must name the same mask",
                   op_name(op), base_name(file), line, mask, g.arrived, op_name(g.op), base_name(g.file), g.line,
                   g.mask);
            abandon();
        }
        if (g.op != op) {
            record(f, "%s at %s:%d while lanes 0x%08x of its mask 0x%08x wait in %s at %s:%d: the lanes of a mask "
                      "must call the same warp function",
                   op_name(op), base_name(file), line, g.arrived, mask, op_name(g.op), base_name(g.file), g.line);
            abandon();
        }
        gi = i;
        break;
    }
    if (gi == gs.size()) gs.push_back(group{op, mask, 0, file, line});
    f->state = F_WARP;
    f->file = file;
    f->line = line;
    f->op = op;
    f->mask = mask;
    f->value = value;
    f->b = b;
    f->width = width;
    gs[gi].arrived |= bit;
    try_complete(f->warp, gi);
    if (S.failed) abandon();
    yield(f);
    return f->result;
}

/* ------------------------------------------------------------ launch */
void lf_shim::launch(const char *name, const void *key, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                     launch_body body, void *ctx) {
    using namespace lf_shim_rt;
    cudaError_t e = enter();
    if (e != cudaSuccess) {
        (void)ret(e);
        return;
    }
    if (tls_in_launch) {
        (void)fail_sticky(cudaErrorNotSupported, "kernel '%s' launched from inside a kernel: the shim has no dynamic "
                                                 "parallelism",
                          name);
        return;
    }
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > kMaxBlockDim[0] || block.y > kMaxBlockDim[1] ||
        block.z > kMaxBlockDim[2] || threads > (unsigned long long)kMaxThreadsPerBlock) {
        (void)fail(cudaErrorInvalidConfiguration,
                   "kernel '%s': block (%u,%u,%u) is not a valid block (at most 1024 threads, (1024,1024,64) per "
                   "dimension, none 0)",
                   name, block.x, block.y, block.z);
        return;
    }
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > kMaxGridDim[0] || grid.y > kMaxGridDim[1] ||
        grid.z > kMaxGridDim[2]) {
        (void)fail(cudaErrorInvalidConfiguration,
                   "kernel '%s': grid (%u,%u,%u) is not a valid grid (at most (2^31-1,65535,65535), none 0)", name,
                   grid.x, grid.y, grid.z);
        return;
    }
    size_t max_dyn = max_dynamic_shared(key);
    if (shmem > max_dyn) {
        (void)fail(cudaErrorInvalidValue,
                   "kernel '%s': %zu bytes of dynamic shared memory, more than its limit of %zu (raise it with "
                   "cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), up to %zu)",
                   name, shmem, max_dyn, kSharedPerBlockOptin);
        return;
    }
    if (!stream_valid(stream)) {
        (void)fail(cudaErrorInvalidResourceHandle, "kernel '%s': stream %p is not a live stream", name,
                   (void *)stream);
        return;
    }

    std::lock_guard<std::mutex> lock(launch_mutex);
    S.kernel = name;
    S.body = body;
    S.ctx = ctx;
    S.failed = false;
    S.msg[0] = 0;
    S.nthreads = (int)threads;
    S.nwarps = (S.nthreads + 31) / 32;
    S.block.block_dim = block;
    S.block.grid_dim = grid;
    schedule(&S.kind, &S.seed);
    unsigned char poison = poison_byte();
    if (S.exited.size() < (size_t)S.nwarps) {
        S.exited.resize((size_t)S.nwarps);
        S.groups.resize((size_t)S.nwarps);
    }
    while (S.pool.size() < (size_t)S.nthreads) S.pool.push_back(std::unique_ptr<fiber>(new fiber()));
    for (int t = 0; t < S.nthreads; t++) {
        if (S.pool[t]->ready) continue;
        if (!init_fiber(S.pool[t].get())) {
            (void)fail(cudaErrorLaunchOutOfResources, "kernel '%s': cannot map a stack for thread %d", name, t);
            return;
        }
    }
    if (shmem > S.dyn_bytes) {
        void *p = nullptr;
        if (posix_memalign(&p, 128, kSharedPerBlockOptin) != 0) {
            (void)fail(cudaErrorLaunchOutOfResources, "kernel '%s': no memory for the shared memory buffer", name);
            return;
        }
        free(S.dyn);
        S.dyn = (unsigned char *)p;
        S.dyn_bytes = kSharedPerBlockOptin;
    }
    find_static_shared();
    tls_in_launch = true;
    lf_shim_tls_block = &S.block;
    lf_shim_tls_dynamic_shared = S.dyn;
    uint64_t G = (uint64_t)grid.x * grid.y * grid.z;
    block_order bo(G, S.kind, S.seed);
    for (uint64_t i = 0; i < G && !S.failed; i++) {
        if (shmem) memset(S.dyn, poison, shmem);
        run_block(bo.at(i), poison);
    }
    tls_in_launch = false;
    lf_shim_tls_block = nullptr;
    lf_shim_tls_thread_idx = nullptr;
    lf_shim_tls_dynamic_shared = nullptr;
    if (S.failed) {
        for (int t = 0; t < S.nthreads; t++)
            if (S.pool[t]->in_body) S.pool[t]->ready = false; /* stopped inside the kernel */
        (void)fail_sticky(cudaErrorLaunchFailure, "%s", S.msg);
    }
}

/* ------------------------------------------------------------ measuring a switch */
namespace {
struct pingpong {
    jmp_buf main_env, fib_env;
    ucontext_t main_uc, fib_uc;
    void *asan_main = nullptr, *asan_fib = nullptr;
    const void *main_bottom = nullptr;
    size_t main_bytes = 0;
    char *stack = nullptr;
    size_t stack_bytes = 0;
    long left = 0;
    bool use_ucontext = false;
};
pingpong *P;

void pingpong_main() {
    pingpong *p = P;
    asan_finish(nullptr, &p->main_bottom, &p->main_bytes);
    if (p->use_ucontext) {
        for (;;) {
            asan_start(&p->asan_fib, p->main_bottom, p->main_bytes);
            swapcontext(&p->fib_uc, &p->main_uc);
            asan_finish(p->asan_fib, &p->main_bottom, &p->main_bytes);
        }
    }
    for (;;) { /* the first pass parks: back to pingpong_enter */
        asan_start(&p->asan_fib, p->main_bottom, p->main_bytes);
        if (_setjmp(p->fib_env) == 0) _longjmp(p->main_env, 1);
        asan_finish(p->asan_fib, &p->main_bottom, &p->main_bytes);
    }
}

__attribute__((noinline)) void pingpong_enter(pingpong *p) {
    asan_start(&p->asan_main, p->stack, p->stack_bytes);
    if (p->use_ucontext) {
        swapcontext(&p->main_uc, &p->fib_uc);
    } else if (_setjmp(p->main_env) == 0) {
        setcontext(&p->fib_uc);
    }
    asan_finish(p->asan_main, nullptr, nullptr);
}

double now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

__attribute__((noinline)) void pingpong_round_trip(pingpong *p) {
    asan_start(&p->asan_main, p->stack, p->stack_bytes);
    if (p->use_ucontext) {
        swapcontext(&p->main_uc, &p->fib_uc);
    } else if (_setjmp(p->main_env) == 0) {
        _longjmp(p->fib_env, 1);
    }
    asan_finish(p->asan_main, nullptr, nullptr);
}

double pingpong_run(pingpong *p, long iterations, bool ucontext) {
    p->use_ucontext = ucontext;
#ifdef LF_SHIM_ASAN
    __asan_unpoison_memory_region(p->stack, p->stack_bytes);
#endif
    getcontext(&p->fib_uc);
    p->fib_uc.uc_stack.ss_sp = p->stack;
    p->fib_uc.uc_stack.ss_size = p->stack_bytes;
    p->fib_uc.uc_link = nullptr;
    makecontext(&p->fib_uc, pingpong_main, 0);
    pingpong_enter(p); /* first entry, not timed */
    double t0 = now_ns();
    for (long i = 0; i < iterations; i++) pingpong_round_trip(p);
    return (now_ns() - t0) / (2.0 * (double)iterations);
}
} // namespace

extern "C" int lf_shim_measure_switch(long iterations, double *ns_shim, double *ns_swapcontext) {
    if (iterations < 1) iterations = 1;
    pingpong p;
    p.stack_bytes = 256 * 1024;
    void *m = mmap(nullptr, p.stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return -1;
    p.stack = (char *)m;
    P = &p;
    double a = pingpong_run(&p, iterations, false);
#ifdef LF_SHIM_ASAN
    double b = 0; /* AddressSanitizer's swapcontext interceptor warns of false positives: not measured */
#else
    double b = pingpong_run(&p, iterations, true);
#endif
    P = nullptr;
    munmap(m, p.stack_bytes);
    if (ns_shim) *ns_shim = a;
    if (ns_swapcontext) *ns_swapcontext = b;
    return 0;
}

extern "C" uint64_t lf_shim_fiber_switches(void) { return total_switches.load(std::memory_order_relaxed); }
