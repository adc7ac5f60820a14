/* A ring of timestamped events of host runs, to take a slow call apart after the fact.
 *
 * A tail call is rare (1 in 100) and cannot be reproduced on demand, so what a call did
 * has to be recorded while it runs, always: a kernel's end (calls.c), a parallel loop's
 * launch with when the first worker claimed a task of it, when the caller's own tasks ran
 * out and when the loop was done (threadpool.c), a worker parking and waking. Each record
 * is one atomic increment, a clock read and a 64-byte store (~30 ns): a few microseconds
 * per call of a network of a hundred kernels. tdsl.runtime.runtrace reads the ring.
 *
 * The ring keeps the last TRACE_SIZE records; a reader that falls further behind loses
 * the oldest (it learns how many from the counter). Several threads write (the callers of
 * concurrent runs, the workers' park and wake), each record into its own slot.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define TRACE_SIZE 16384 /* records, a power of two: 1 MiB */
#define TRACE_WORDS 8

typedef struct {
  _Alignas(64) int64_t w[TRACE_WORDS];
} trace_rec;

static trace_rec trace_ring[TRACE_SIZE];
static atomic_llong trace_count;
static atomic_int trace_on = 1;

int64_t tdsl_trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int tdsl_trace_enabled(void) {
  return atomic_load_explicit(&trace_on, memory_order_relaxed);
}

/* Records (t, kind, a..f) where tracing is on; t = 0 takes the time now. */
void tdsl_trace_record(int64_t t, int64_t kind, int64_t a, int64_t b, int64_t c, int64_t d,
                       int64_t e, int64_t f) {
  if (!atomic_load_explicit(&trace_on, memory_order_relaxed)) return;
  if (!t) t = tdsl_trace_now();
  long long i = atomic_fetch_add_explicit(&trace_count, 1, memory_order_relaxed);
  int64_t *w = trace_ring[i & (TRACE_SIZE - 1)].w;
  w[0] = t;
  w[1] = kind;
  w[2] = a;
  w[3] = b;
  w[4] = c;
  w[5] = d;
  w[6] = e;
  w[7] = f;
}

int64_t tdsl_trace_count(void) {
  return atomic_load(&trace_count);
}

void tdsl_trace_set(int64_t on) {
  atomic_store(&trace_on, on != 0);
}

/* Copies the records numbered [since, count) still in the ring, at most `max`, the
 * newest kept, into out (TRACE_WORDS words each); returns count. A record being written
 * meanwhile may be torn: read between runs. */
int64_t tdsl_trace_read(int64_t *out, int64_t since, int64_t max, int64_t *first) {
  int64_t count = atomic_load(&trace_count);
  int64_t lo = since;
  if (lo < count - TRACE_SIZE) lo = count - TRACE_SIZE;
  if (lo < count - max) lo = count - max;
  if (lo < 0) lo = 0;
  *first = lo;
  for (int64_t i = lo; i < count; i++)
    for (int k = 0; k < TRACE_WORDS; k++)
      out[(i - lo) * TRACE_WORDS + k] = trace_ring[i & (TRACE_SIZE - 1)].w[k];
  return count;
}
