/* A persistent worker pool for parallel loops of generated code.
 *
 * tdsl_parallel_for(fn, closure, lo, hi, threads, site) runs a parallel loop over [lo, hi)
 * as tasks fn(&{closure, begin, end}) over contiguous chunks, on the caller and workers
 * created once (each thread its own run of them first: the claim words below). It
 * chooses how many: as many as threads, or more where the loop is long (tasks_for);
 * `site` is the loop site's own word, where the pool keeps what the site's last run cost
 * per iteration.
 * Creating threads per launch costs ~50 us; waking parked workers costs a few, and a
 * worker that was busy moments ago is still spinning and starts at once.
 *
 * One launch at a time: a launch that finds the pool busy (another Python thread, or a
 * parallel loop inside a parallel task) runs its tasks on the calling thread.
 *
 * tdsl_parallel_hold() / tdsl_parallel_release() bracket a run of many launches (a graph
 * executor's run of a network): between them the workers do not park, however long the
 * caller takes between two parallel loops (serial kernels, Python between kernels), and
 * for HOLD_GRACE_NS after the last release, so that back-to-back runs find them awake, as
 * OpenMP's blocktime and onnxruntime's intra-op spinning do. A parked worker that woke for
 * the next loop started it late (futex wake and scheduling: tens of microseconds on a
 * quiet machine, more where the idle core's vCPU has to be woken). One exception: a
 * worker whose spin lost its core to another thread parks even while held (may_park).
 * Holds count: runs on several threads hold the pool together. The first hold wakes
 * parked workers, so that they come up while the caller sets up the run rather than at
 * its first loop.
 *
 * A worker that ran none of its tasks in NUDGE_AFTER launches in a row is not running:
 * on Linux it is often queued behind the caller on the caller's own CPU (a wake-up sent
 * while the other vCPU was halted: the kernel sees it preempted, not idle, and places the
 * woken worker beside its waker, where it waits until the load balancer moves it, many
 * milliseconds later; the caller meanwhile runs every task alone). The caller then moves
 * it off its CPU (nudge), and the worker lifts that restriction once it runs.
 *
 * Each loop handed to the workers leaves a record in the trace ring (trace.c): when the
 * first worker claimed a task, when the caller's own ran out and when the loop was done;
 * bench/tail.py reads them to say why a slow call was slow.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE   /* sched_setaffinity, sched_getcpu */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#ifdef __linux__
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef void *(*task_fn)(void *);

#define MAX_WORKERS 255
#define SPIN_NS 50000 /* how long an idle worker spins before it parks */
#define HOLD_GRACE_NS 1000000 /* and after the last hold: a caller's own work between runs */
/* A spinning worker whose clock jumps by more than this between two looks lost its core
 * (another thread ran there: a yield took that long, or it was preempted); alone on its
 * core, a look and a yield take about a microsecond. */
#define LOST_NS 20000

/* the trace ring (trace.c): a loop's launch, a worker parking and waking */
int64_t tdsl_trace_now(void);
int tdsl_trace_enabled(void);
void tdsl_trace_record(int64_t t, int64_t kind, int64_t a, int64_t b, int64_t c, int64_t d,
                       int64_t e, int64_t f);
enum { TRACE_LOOP = 3, TRACE_PARK = 4, TRACE_WAKE = 5 };

static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;

static int num_workers;
static atomic_long generation;   /* bumped once per launch, to wake workers */
/* the job: task i is job_fn(&{job_closure, job_lo + i*job_chunk, that + job_chunk})
 * within job_hi */
static task_fn job_fn;
static void *job_closure;
static int64_t job_lo, job_hi, job_chunk;

/* The task generated code's parallel loops take (codegen/llvm/parallel.py, TASK). */
typedef struct {
  void *closure;
  int64_t begin, end;
} range_task;

/* How long a task of a long loop should take (ns); 0: never more tasks than threads
 * (tdsl_parallel_set_task_ns). A task costs a claim (a compare-and-swap on its thread's own
 * slot, another's only when it takes from it) and a call through the trampoline: about
 * 10 ns of CPU per task on this pool's target (znver5 VM, 2 threads: a 4096-task split of
 * a sin(cos(x)) loop against a 2-task one, process CPU time). What a finer split can cost
 * beyond that is a task taken from another thread, whose data is in the other core's
 * cache. At 50 us a task's own cost is far below 1% of it, and a worker that stalls
 * mid-loop (preempted: 1-130 ms on a shared VM) holds up its loop, once it runs again, by
 * at most one such task rather than by the rest of its share; a loop under 50 us of work
 * per thread is split as before, one task per thread. Off by default: on a quiet machine
 * 50 us tasks made a RoBERTa run ~9% slower (the caller waited ten times as long for
 * tasks a worker held: taken from the other core's cache) and no model faster at p50;
 * a server on a machine whose cores are taken from it may turn it on. */
static atomic_llong task_ns = 0;
/* a site's word: its last run's nanoseconds per iteration, times 2^COST_SHIFT (a loop
 * iteration can take less than a nanosecond) */
#define COST_SHIFT 10

/* The claim words: each thread of a launch (slot 0 the caller, slot w worker w) owns a
 * contiguous run of the job's tasks, the run a split into one task per thread would give
 * it, in its slot's word (end << 32) | next. It claims its own from the front; a thread
 * whose run is done takes another's from the back. So where no thread stalls, each
 * thread runs the part of the loop it ran before the split was finer (and the previous
 * loop's output it reads is mostly in its own cache), and a thread that stalls leaves its
 * untouched tasks to the others. A launch writes the job's fields, then publishes the
 * words; a task is claimed by a compare-and-swap that proves the word still belongs to
 * that job, and the job cannot end (so its fields cannot change) before every claimed task
 * has finished. */
static struct {
  _Alignas(64) atomic_ullong w;
  unsigned long long begin;   /* the run's first task: next == begin, its owner has not started */
  atomic_llong progress;      /* when its owner last claimed one of its tasks (ns) */
} slots[MAX_WORKERS + 1];
/* Whether a thread takes from a run whose owner has started only when the owner is late:
 * its current task has run more than twice as long as the thief's own longest task of the
 * launch (preempted, or its core taken). On time, the owner finishes its run itself, as
 * in a split into one task per thread: where no thread stalls, the finer split moves no
 * task to the other core's cache. A run whose owner has not started is taken at once. */
static atomic_int steal_late_only = 1;
static atomic_int job_threads;   /* slots in use */
static atomic_long pending;      /* claimed or unclaimed tasks not finished yet */
static int parked_caller;
static atomic_int holds;          /* runs holding the workers awake now */
static atomic_llong hold_end;     /* when the last hold was released (ns) */

/* What tdsl_parallel_stats reports (tdsl.runtime.threadpool.stats): launches handed to
 * the workers, times a worker went to sleep (no launch within its spin), times a
 * launching thread did (its workers had not finished within its spin), the workers
 * asleep now, holds taken (tdsl_parallel_hold), holds in force now, and the workers' sleeps
 * after a spin that lost its core (the only ones while a hold is in force). A worker that
 * sleeps between most of a network's loops did not run during its spins: another process
 * had its core. */
static atomic_long n_launches, n_worker_sleeps, n_caller_sleeps, n_holds, n_lost_sleeps;
/* and where a launch's time went: the tasks launched, those the workers ran (the rest
 * the launching thread did), and nanoseconds the launching thread waited, its claims run
 * out, for tasks a worker still held: the whole loop waits for a worker that lost its
 * core mid-task */
static atomic_long n_tasks, n_wait_ns;
/* tasks a thread took from the run of another that had started it (the owner was late,
 * or steal_late_only is off): each ran away from the cache that holds its data */
static atomic_long n_taken;
/* written by the workers once per task: a cache line of its own, not one the caller
 * writes per launch */
static struct {
  _Alignas(64) atomic_long n;
  char pad[64 - sizeof(atomic_long)];
} worker_tasks;
static atomic_int sleeping;
/* when a worker first claimed a task of the current launch (0: none yet), and when the
 * last wake-up was sent (a launch or a run's first hold): the trace's worker delays */
static struct {
  _Alignas(64) atomic_llong first_claim;
  atomic_llong woken;
} trace_times;

/* The nudge (see the top): per worker, the last launch (generation) in which it claimed a
 * task, and the CPU the caller has moved it off, plus one, where the worker has not run
 * since (0: none; its CPU mask is then the pool's less that CPU, and it restores the
 * pool's). The launches in a row each worker missed are the launching thread's, under
 * launch_mu. */
#define NUDGE_AFTER 3
static atomic_long ran_gen[MAX_WORKERS + 1];
static atomic_int nudged[MAX_WORKERS + 1];
static int missed[MAX_WORKERS + 1];
static atomic_long n_nudges;
#ifdef __linux__
static cpu_set_t pool_mask;     /* the CPUs the workers may run on: their creator's */
static int have_mask;
#endif

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Runs task i of the current job; returns the loop iterations it covered. */
static int64_t run_task(unsigned long long i) {
  range_task t = {job_closure, job_lo + (int64_t)i * job_chunk, 0};
  t.end = job_hi - t.begin < job_chunk ? job_hi : t.begin + job_chunk;
  job_fn(&t);
  return t.end - t.begin;
}

#define LOW32 0xffffffffull

/* Claims a task from the front (own) or the back (another's) of slot word *w. */
static int claim_task(atomic_ullong *w, int own, unsigned long long *task) {
  unsigned long long c = atomic_load(w);
  for (;;) {
    unsigned long long next = c & LOW32, end = c >> 32;
    if (next >= end) return 0;
    if (atomic_compare_exchange_weak(w, &c, own ? c + 1 : c - (1ull << 32))) {
      *task = own ? next : end - 1;
      return 1;
    }
  }
}

static void pause_cpu(void);

/* Whether thread `self`, whose own tasks of the launch took at most own_max ns (0: it ran
 * none), may take from run v now (word c): not started, or its owner is late
 * (steal_late_only). Late: its current task has run over twice the longest of ours. The
 * tasks of a loop cover equal iterations, so a running owner's task takes about as long
 * as ours; twice as long is a stall (a lost core), not a slower task. The microsecond
 * covers the clock's and a claim's own cost next to tasks of a few. */
static int may_take(int v, unsigned long long c, int64_t own_max, int64_t *now) {
  if (!own_max || (c & LOW32) == slots[v].begin ||
      !atomic_load_explicit(&steal_late_only, memory_order_relaxed))
    return 1;
  if (!*now) *now = now_ns();
  return *now - atomic_load_explicit(&slots[v].progress, memory_order_relaxed) > 2 * own_max + 1000;
}

/* Runs unclaimed tasks of the current job, as thread `self` (0: the caller, w: worker
 * w): its own slot's, then the others' (may_take: while their owners are on time it
 * waits, spinning, for them to claim their own). A worker counts each before it is done
 * (so that a launch that returned has its workers' tasks counted). Returns the loop
 * iterations it ran. */
static int64_t run_tasks(int self, int64_t *ran) {
  int64_t iters = 0, own_max = 0;
  int threads = atomic_load(&job_threads), own = self < threads;
  /* a run of one task is claimed whole: no one could take part of it, nothing to time */
  int timed = own && (atomic_load(&slots[self].w) >> 32) - slots[self].begin > 1;
  unsigned long long i;
  for (;;) {
    int64_t t = 0;
    if (timed) {
      unsigned long long w = atomic_load_explicit(&slots[self].w, memory_order_relaxed);
      timed = (w & LOW32) < (w >> 32);        /* once its run is out, no more stamps */
    }
    if (timed) {
      /* stamped before the claim: a thief that sees the claim sees this stamp */
      t = now_ns();
      atomic_store_explicit(&slots[self].progress, t, memory_order_relaxed);
    }
    int mine = own && claim_task(&slots[self].w, 1, &i), got = mine, wait = 0;
    int64_t now = 0;
    for (int k = 1; !got && k <= threads; k++) {
      int v = (self + k) % threads;
      if (own && v == self) continue;
      unsigned long long c = atomic_load(&slots[v].w);
      if ((c & LOW32) >= (c >> 32)) continue;
      if (may_take(v, c, own_max, &now)) {
        got = claim_task(&slots[v].w, 0, &i);
        if (got && (c & LOW32) != slots[v].begin)
          atomic_fetch_add_explicit(&n_taken, 1, memory_order_relaxed);
      } else
        wait = 1;
    }
    if (!got) {
      if (wait && atomic_load(&pending) > 0) {
        pause_cpu();
        continue;
      }
      return iters;
    }
    if (self && !*ran) {
      atomic_store_explicit(&ran_gen[self], atomic_load(&generation), memory_order_relaxed);
      if (tdsl_trace_enabled()) {
        long long none = 0;
        atomic_compare_exchange_strong(&trace_times.first_claim, &none, now_ns());
      }
    }
    iters += run_task(i);
    if (mine && t) {
      int64_t took = now_ns() - t;
      if (took > own_max) own_max = took;
    }
    ++*ran;
    if (self) atomic_fetch_add_explicit(&worker_tasks.n, 1, memory_order_relaxed);
    if (atomic_fetch_sub(&pending, 1) == 1) {
      pthread_mutex_lock(&mu);
      if (parked_caller) pthread_cond_signal(&done);
      pthread_mutex_unlock(&mu);
    }
  }
}

static void pause_cpu(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* One step of a wait that spins: a pause, and every YIELD_NS a sched_yield, so that a
 * spinning thread gives its core to one of ours that is runnable there (the caller or a
 * worker that claimed a task) when another process holds the other cores; alone on its
 * core, sched_yield returns at once. Returns the time. */
#define YIELD_NS 2000
static int64_t spin_step(int64_t *next_yield) {
  pause_cpu();
  int64_t t = now_ns();
  if (t >= *next_yield) {
    sched_yield();
    *next_yield = t + YIELD_NS;
  }
  return t;
}

/* Whether an idle worker that began waiting at t0 may park at `now`: its own spin is
 * over, and no run holds the pool nor did one within the grace. A worker whose spin lost
 * its core (`lost`: another thread ran there, LOST_NS) parks even while held: spinning on
 * a contended core would spend the CPU time that the scheduler gives a woken thread at
 * once, when the next loop needs it. */
static int may_park(int64_t t0, int64_t now, int lost) {
  if (now < t0 + SPIN_NS) return 0;
  if (lost) return 1;
  return atomic_load(&holds) == 0 && now >= atomic_load(&hold_end) + HOLD_GRACE_NS;
}

/* each worker's kernel thread id (Linux; 0 elsewhere), for tools that read a thread's CPU
 * time or run delay (bench/threadcpu.py tells the pool's CPU from other runtimes') */
static atomic_long worker_tids[MAX_WORKERS + 1];

/* Lifts the caller's restriction from worker `self` (it runs now, on another CPU): its
 * mask back to the pool's, unless someone else set another since the nudge (a user who
 * pinned the pool's threads keeps their pins). */
static void unnudge(int self) {
  int off = atomic_load_explicit(&nudged[self], memory_order_relaxed);
  if (!off) return;
#ifdef __linux__
  cpu_set_t now, away = pool_mask;
  CPU_CLR(off - 1, &away);
  if (sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &away))
    sched_setaffinity(0, sizeof pool_mask, &pool_mask);
#endif
  atomic_store(&nudged[self], 0);
}

#ifdef __linux__
/* The threads runnable on the whole machine now (/proc/loadavg's fourth field, "r/total"),
 * or -1. */
static int runnable_now(void) {
  char buf[128];
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t k = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (k <= 0) return -1;
  buf[k] = 0;
  char *p = buf;
  for (int field = 0; field < 3; field++) {
    while (*p && *p != ' ') p++;
    while (*p == ' ') p++;
  }
  return *p >= '0' && *p <= '9' ? atoi(p) : -1;
}
#endif

/* Moves worker w off the calling thread's CPU: a thread that is queued there and not
 * running goes to another CPU's queue at once (the kernel migrates it and kicks that
 * CPU); one that runs elsewhere stays where it is. Only where no more threads are
 * runnable on the machine than the launch has (the caller, the workers): then a CPU is
 * free and the worker is waiting for no good reason. Where other processes keep the
 * CPUs busy, a worker moved to theirs would run in slices, holding up the loops whose
 * tasks it claimed; it is better left queued, its tasks run by the caller, and the
 * machine is looked at again NUDGE_BACKOFF_NS later. */
#define NUDGE_BACKOFF_NS 10000000
static int64_t nudge_after_ns;
/* 0: never nudge; 1: where a CPU is free (the default); 2: whatever the machine's load
 * (tests and benches: tdsl_parallel_set_nudge) */
static atomic_int nudge_mode = 1;
static void nudge(int w, int threads) {
#ifdef __linux__
  int mode = atomic_load_explicit(&nudge_mode, memory_order_relaxed);
  long tid = atomic_load(&worker_tids[w]);
  int cpu = sched_getcpu();
  if (!mode || !have_mask || !tid || cpu < 0 || !CPU_ISSET(cpu, &pool_mask)) return;
  int64_t t = now_ns();
  if (mode == 1 && t < nudge_after_ns) return;
  int busy = mode == 1 ? runnable_now() : 0;
  if (busy < 0 || busy > threads || busy > CPU_COUNT(&pool_mask)) {
    nudge_after_ns = t + NUDGE_BACKOFF_NS;
    return;
  }
  cpu_set_t away = pool_mask;
  CPU_CLR(cpu, &away);
  if (!CPU_COUNT(&away)) return;
  atomic_store(&nudged[w], cpu + 1);
  if (sched_setaffinity((pid_t)tid, sizeof away, &away) != 0) {
    atomic_store(&nudged[w], 0);
    return;
  }
  atomic_fetch_add_explicit(&n_nudges, 1, memory_order_relaxed);
#else
  (void)w;
  (void)threads;
#endif
}

/* After launch `gen` (the caller holds launch_mu): each worker that owned tasks and
 * claimed none counts a miss; NUDGE_AFTER in a row and it is nudged, once until it runs. */
static void check_missed(long gen, int64_t n, int threads) {
  for (int w = 1; w < threads; w++) {
    /* its run, as run_job dealt it: none where there were fewer tasks than threads */
    if (((unsigned long long)(w + 1) * n + threads - 1) / threads <=
        ((unsigned long long)w * n + threads - 1) / threads)
      continue;
    if (atomic_load_explicit(&ran_gen[w], memory_order_relaxed) == gen) {
      missed[w] = 0;
    } else if (++missed[w] >= NUDGE_AFTER && !atomic_load(&nudged[w])) {
      missed[w] = 0;
      nudge(w, threads);
    }
  }
}

static void *worker_main(void *arg) {
  int self = (int)(intptr_t)arg;
#ifdef __linux__
  atomic_store(&worker_tids[self], (long)syscall(SYS_gettid));
#endif
  long seen = atomic_load(&generation);
  for (;;) {
    int64_t ran = 0;
    unnudge(self);
    run_tasks(self, &ran);
    int64_t t0 = now_ns(), t = t0, next_yield = t0 + YIELD_NS;
    int lost = 0;
    while (atomic_load(&generation) == seen && !may_park(t0, t, lost)) {
      int64_t prev = t;
      t = spin_step(&next_yield);
      lost |= t - prev > LOST_NS;
    }
    if (atomic_load(&generation) == seen) {
      pthread_mutex_lock(&mu);
      int held = atomic_load(&holds) > 0;
      if (atomic_load(&generation) == seen && (!held || lost)) {
        atomic_fetch_add_explicit(&n_worker_sleeps, 1, memory_order_relaxed);
        if (lost) atomic_fetch_add_explicit(&n_lost_sleeps, 1, memory_order_relaxed);
        atomic_fetch_add(&sleeping, 1);
        tdsl_trace_record(0, TRACE_PARK, self, lost, 0, 0, 0, 0);
        /* a launch wakes it, and so does a run's first hold (it then spins until it
         * loses its core again); a parked worker's hold in force waits for the launch */
        int must_wait = held;
        while (atomic_load(&generation) == seen && (must_wait || atomic_load(&holds) == 0)) {
          pthread_cond_wait(&wake, &mu);
          must_wait = 0;
        }
        atomic_fetch_sub(&sleeping, 1);
        if (tdsl_trace_enabled()) {
          int64_t t = now_ns();
          tdsl_trace_record(t, TRACE_WAKE, self, t - atomic_load(&trace_times.woken), 0, 0, 0, 0);
        }
      }
      pthread_mutex_unlock(&mu);
    }
    seen = atomic_load(&generation);
  }
  return 0;
}

static void ensure_workers(int want) {
  if (want > MAX_WORKERS) want = MAX_WORKERS;
#ifdef __linux__
  if (!num_workers && want > 0)
    have_mask = sched_getaffinity(0, sizeof pool_mask, &pool_mask) == 0;
#endif
  while (num_workers < want) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)(num_workers + 1));
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    num_workers++;
  }
}

/* Runs the job whose fields the caller wrote, holding launch_mu, as n tasks on the caller
 * and the workers, `threads` in all, and releases launch_mu. Returns the loop iterations
 * the caller ran and in *busy the nanoseconds it ran tasks. */
static int64_t run_job(int64_t n, int threads, int64_t *busy) {
  atomic_fetch_add_explicit(&n_launches, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&n_tasks, n, memory_order_relaxed);
  atomic_store(&pending, n);
  atomic_store(&job_threads, threads);
  /* thread t's run: tasks [ceil(t*n/threads), ceil((t+1)*n/threads)), so that with fewer
   * tasks than threads the first threads get one each (the caller first) */
  for (int t = 0; t < threads; t++) {
    unsigned long long b = ((unsigned long long)t * n + threads - 1) / threads;
    unsigned long long e = ((unsigned long long)(t + 1) * n + threads - 1) / threads;
    slots[t].begin = b;
    atomic_store_explicit(&slots[t].progress, 0, memory_order_relaxed);
    atomic_store(&slots[t].w, e << 32 | b);
  }
  int asleep = atomic_load(&sleeping);
  atomic_store_explicit(&trace_times.first_claim, 0, memory_order_relaxed);
  int64_t start = now_ns();
  pthread_mutex_lock(&mu);
  long gen = atomic_fetch_add(&generation, 1) + 1;
  if (asleep) atomic_store_explicit(&trace_times.woken, start, memory_order_relaxed);
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&mu);

  int64_t own = 0, mine = run_tasks(0, &own);

  int64_t t0 = now_ns(), until = t0 + SPIN_NS, next_yield = t0 + YIELD_NS;
  *busy = t0 - start;
  int waited = atomic_load(&pending) > 0;
  while (atomic_load(&pending) > 0 && now_ns() < until) spin_step(&next_yield);
  if (atomic_load(&pending) > 0) {
    atomic_fetch_add_explicit(&n_caller_sleeps, 1, memory_order_relaxed);
    pthread_mutex_lock(&mu);
    parked_caller = 1;
    while (atomic_load(&pending) > 0) pthread_cond_wait(&done, &mu);
    parked_caller = 0;
    pthread_mutex_unlock(&mu);
  }
  check_missed(gen, n, threads);
  int64_t end = waited || tdsl_trace_enabled() ? now_ns() : t0;
  if (waited) atomic_fetch_add_explicit(&n_wait_ns, end - t0, memory_order_relaxed);
  if (tdsl_trace_enabled()) {
    int64_t claim = atomic_load(&trace_times.first_claim);
    tdsl_trace_record(start, TRACE_LOOP, n, own, claim ? claim - start : -1, t0 - start,
                      end - start, asleep);
  }
  pthread_mutex_unlock(&launch_mu);
  return mine;
}

/* How many tasks a loop of `ext` iterations gets on `threads` threads, from its site's
 * last cost per iteration (0: none yet): one per thread, or, where the loop's work
 * divided by task_ns exceeds that, so many (each at least one iteration). A loop whose
 * cost is not known yet, or short, is split as it always was. */
static int64_t tasks_for(int64_t ext, int64_t threads, int64_t cost) {
  int64_t n = threads < ext ? threads : ext;
  int64_t target = atomic_load_explicit(&task_ns, memory_order_relaxed);
  if (cost > 0 && target > 0) {
    double fine = (double)cost * (double)ext / (double)(1 << COST_SHIFT) / (double)target;
    if (fine > (double)n) n = fine < (double)ext ? (int64_t)fine : ext;
  }
  return n > 0xffffffffll ? 0xffffffffll : n;
}

void tdsl_parallel_for(task_fn fn, void *closure, int64_t lo, int64_t hi, int64_t threads,
                       int64_t *site) {
  int64_t ext = hi - lo;
  if (ext <= 0) return;
  range_task all = {closure, lo, hi};
  if (threads > ext) threads = ext;
  if (threads > MAX_WORKERS + 1) threads = MAX_WORKERS + 1;
  if (threads <= 1 || pthread_mutex_trylock(&launch_mu) != 0) {
    fn(&all);
    return;
  }
  ensure_workers((int)(threads - 1));
  if (num_workers == 0) {
    fn(&all);
    pthread_mutex_unlock(&launch_mu);
    return;
  }
  int64_t n = tasks_for(ext, threads, __atomic_load_n(site, __ATOMIC_RELAXED));
  int64_t chunk = (ext + n - 1) / n;
  job_fn = fn;
  job_closure = closure;
  job_lo = lo;
  job_hi = hi;
  job_chunk = chunk;
  int64_t busy, mine = run_job((ext + chunk - 1) / chunk, (int)threads, &busy);
  /* the caller's own tasks measure the site (a worker's may have started late); a caller
   * that was preempted meanwhile overstates it, which splits the next run finer, once */
  if (mine > 0) __atomic_store_n(site, (busy << COST_SHIFT) / mine, __ATOMIC_RELAXED);
}

void tdsl_parallel_set_task_ns(int64_t ns) {
  atomic_store(&task_ns, ns > 0 ? ns : 0);
}

int64_t tdsl_parallel_steal_late(void) {
  return atomic_load(&steal_late_only);
}

int64_t tdsl_parallel_set_steal_late(int64_t on) {
  return atomic_exchange(&steal_late_only, on != 0);
}

int64_t tdsl_parallel_set_nudge(int64_t mode) {
  return atomic_exchange(&nudge_mode, mode < 0 ? 0 : mode > 2 ? 2 : (int)mode);
}

int64_t tdsl_parallel_task_ns(void) {
  return atomic_load(&task_ns);
}

void tdsl_parallel_hold(void) {
  atomic_fetch_add_explicit(&n_holds, 1, memory_order_relaxed);
  if (atomic_fetch_add(&holds, 1) == 0) {
    /* under mu: a worker checks `holds` under it before it waits */
    if (atomic_load(&sleeping) && tdsl_trace_enabled())
      atomic_store_explicit(&trace_times.woken, now_ns(), memory_order_relaxed);
    pthread_mutex_lock(&mu);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&mu);
  }
}

void tdsl_parallel_release(void) {
  /* the grace begins before the count drops, so that no worker parks in between */
  atomic_store(&hold_end, now_ns());
  atomic_fetch_sub(&holds, 1);
}

/* Writes the first `n` workers' thread ids to `out` (0 for one not yet started); returns
 * how many workers there are. */
int64_t tdsl_parallel_worker_ids(int64_t *out, int64_t n) {
  int workers = num_workers;
  for (int64_t i = 0; i < n && i < workers; i++) out[i] = atomic_load(&worker_tids[i + 1]);
  return workers;
}

void tdsl_parallel_stats(int64_t *out) {
  out[0] = atomic_load(&n_launches);
  out[1] = atomic_load(&n_worker_sleeps);
  out[2] = atomic_load(&n_caller_sleeps);
  out[3] = atomic_load(&sleeping);
  out[4] = num_workers;
  out[5] = atomic_load(&n_holds);
  out[6] = atomic_load(&holds);
  out[7] = atomic_load(&n_lost_sleeps);
  out[8] = atomic_load(&worker_tasks.n);
  out[9] = atomic_load(&n_wait_ns);
  out[10] = atomic_load(&n_tasks);
  out[11] = atomic_load(&n_taken);
  out[12] = atomic_load(&n_nudges);
}
