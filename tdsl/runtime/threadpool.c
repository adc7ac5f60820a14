/* A persistent worker pool for parallel loops of generated code.
 *
 * tdsl_parallel_launch(fn, tasks, n, size) runs fn(tasks + i*size) for i in [0, n): the
 * caller runs task 0 (and helps with the rest); workers, created once, claim the others.
 * Creating threads per launch costs ~50 us; waking parked workers costs a few, and a
 * worker that was busy moments ago is still spinning and starts at once.
 *
 * One launch at a time: a launch that finds the pool busy (another Python thread, or a
 * parallel loop inside a parallel task) runs its tasks on the calling thread.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

typedef void *(*task_fn)(void *);

#define MAX_WORKERS 255
#define SPIN_NS 50000 /* how long an idle worker spins before it parks */

static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;

static int num_workers;
static atomic_long generation;   /* bumped once per launch, to wake workers */
static task_fn job_fn;
static char *job_tasks;
static int64_t job_size;
/* The claim word: (number of tasks << 32) | next index. A launch writes the job's fields,
 * then publishes a new claim word; a task is claimed by a compare-and-swap that proves the
 * word still belongs to that job, and the job cannot end (so its fields cannot change)
 * before every claimed task has finished. */
static atomic_ullong claim;
static atomic_long pending;      /* claimed or unclaimed tasks not finished yet */
static int parked_caller;

/* What tdsl_parallel_stats reports (tdsl.runtime.threadpool.stats): launches handed to
 * the workers, times a worker went to sleep (no launch within its spin), times a
 * launching thread did (its workers had not finished within its spin), and the workers
 * asleep now. A worker that sleeps between most of a network's loops did not run during
 * its spins: another process had its core. */
static atomic_long n_launches, n_worker_sleeps, n_caller_sleeps;
static atomic_int sleeping;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void run_tasks(void) {
  for (;;) {
    unsigned long long c = atomic_load(&claim);
    unsigned long long n = c >> 32, i = c & 0xffffffffull;
    if (i >= n) return;
    if (!atomic_compare_exchange_weak(&claim, &c, c + 1)) continue;
    job_fn(job_tasks + (int64_t)i * job_size);
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
 * core, sched_yield returns at once. */
#define YIELD_NS 2000
static void spin_step(int64_t *next_yield) {
  pause_cpu();
  int64_t t = now_ns();
  if (t >= *next_yield) {
    sched_yield();
    *next_yield = t + YIELD_NS;
  }
}

static void *worker_main(void *arg) {
  (void)arg;
  long seen = atomic_load(&generation);
  for (;;) {
    run_tasks();
    int64_t t0 = now_ns(), until = t0 + SPIN_NS, next_yield = t0 + YIELD_NS;
    while (atomic_load(&generation) == seen && now_ns() < until) spin_step(&next_yield);
    if (atomic_load(&generation) == seen) {
      pthread_mutex_lock(&mu);
      if (atomic_load(&generation) == seen) {
        atomic_fetch_add_explicit(&n_worker_sleeps, 1, memory_order_relaxed);
        atomic_fetch_add(&sleeping, 1);
        while (atomic_load(&generation) == seen) pthread_cond_wait(&wake, &mu);
        atomic_fetch_sub(&sleeping, 1);
      }
      pthread_mutex_unlock(&mu);
    }
    seen = atomic_load(&generation);
  }
  return 0;
}

static void ensure_workers(int want) {
  if (want > MAX_WORKERS) want = MAX_WORKERS;
  while (num_workers < want) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, worker_main, 0);
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    num_workers++;
  }
}

void tdsl_parallel_launch(task_fn fn, void *tasks, int64_t n, int64_t size) {
  if (n <= 1 || n > 0xffffffffll || pthread_mutex_trylock(&launch_mu) != 0) {
    for (int64_t i = 0; i < n; i++) fn((char *)tasks + i * size);
    return;
  }
  ensure_workers((int)(n - 1));
  if (num_workers == 0) {
    for (int64_t i = 0; i < n; i++) fn((char *)tasks + i * size);
    pthread_mutex_unlock(&launch_mu);
    return;
  }
  atomic_fetch_add_explicit(&n_launches, 1, memory_order_relaxed);
  job_fn = fn;
  job_tasks = (char *)tasks;
  job_size = size;
  atomic_store(&pending, n);
  atomic_store(&claim, (unsigned long long)n << 32);
  pthread_mutex_lock(&mu);
  atomic_fetch_add(&generation, 1);
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&mu);

  run_tasks();

  int64_t t0 = now_ns(), until = t0 + SPIN_NS, next_yield = t0 + YIELD_NS;
  while (atomic_load(&pending) > 0 && now_ns() < until) spin_step(&next_yield);
  if (atomic_load(&pending) > 0) {
    atomic_fetch_add_explicit(&n_caller_sleeps, 1, memory_order_relaxed);
    pthread_mutex_lock(&mu);
    parked_caller = 1;
    while (atomic_load(&pending) > 0) pthread_cond_wait(&done, &mu);
    parked_caller = 0;
    pthread_mutex_unlock(&mu);
  }
  pthread_mutex_unlock(&launch_mu);
}

void tdsl_parallel_stats(int64_t *out) {
  out[0] = atomic_load(&n_launches);
  out[1] = atomic_load(&n_worker_sleeps);
  out[2] = atomic_load(&n_caller_sleeps);
  out[3] = atomic_load(&sleeping);
  out[4] = num_workers;
}
