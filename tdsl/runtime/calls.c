/* One native call for a host run's whole kernel sequence (tdsl.runtime.callseq).
 *
 * tdsl_run_calls(table, at) calls the kernels of `table` in order, from entry at[0] (at
 * word at[1]), with the worker pool held for the walk (tdsl_parallel_hold), until one
 * cannot be run from here or fails. The table is table[0] entries, each
 *     [function address, argument count n, record address, n argument words]
 * of a generated entry point `int32_t f(...)` whose every parameter is a pointer or an
 * int64_t: on x86-64 SysV and AArch64 both pass as one integer word, so a kernel is called
 * through a function type of n int64_t parameters. A record address (0: none) is the
 * bounds-checked build's record, whose first word the kernel sets on a failed check.
 *
 * A Python call in a ctypes loop costs ~130 ns plus ~38 ns per argument, and a small
 * transformer's run calls 70 kernels of 4-8 arguments: a fifth of a batch-1 call was
 * dispatch. Here a call costs what an indirect call costs.
 *
 * Returns CALLS_DONE (every entry ran; at is reset to the start for the next run), or
 * stops at entry at[0] (word at[1]) with
 *   CALLS_PYTHON   an entry the caller runs itself: address 0 (a kernel with staging
 *                  copies or a float parameter), or more than CALLS_MAX_ARGS arguments;
 *   CALLS_FAILED   the kernel returned at[2] != 0;
 *   CALLS_RECORDED the kernel's bounds record is set (the caller reads and clears it).
 * Nothing after a stop has run; the caller resumes at the next entry or gives up.
 */
#include <stdint.h>

void tdsl_parallel_hold(void);
void tdsl_parallel_release(void);
/* the trace ring (trace.c): a walk's start and each kernel's end */
int tdsl_trace_enabled(void);
void tdsl_trace_record(int64_t t, int64_t kind, int64_t a, int64_t b, int64_t c, int64_t d,
                       int64_t e, int64_t f);
enum { TRACE_RUN = 1, TRACE_KERNEL = 2 };

enum { CALLS_DONE = 0, CALLS_PYTHON = 1, CALLS_FAILED = 2, CALLS_RECORDED = 3 };
#define CALLS_MAX_ARGS 32

typedef int64_t I;

#define T1 I
#define T2 T1, I
#define T3 T2, I
#define T4 T3, I
#define T5 T4, I
#define T6 T5, I
#define T7 T6, I
#define T8 T7, I
#define T9 T8, I
#define T10 T9, I
#define T11 T10, I
#define T12 T11, I
#define T13 T12, I
#define T14 T13, I
#define T15 T14, I
#define T16 T15, I
#define T17 T16, I
#define T18 T17, I
#define T19 T18, I
#define T20 T19, I
#define T21 T20, I
#define T22 T21, I
#define T23 T22, I
#define T24 T23, I
#define T25 T24, I
#define T26 T25, I
#define T27 T26, I
#define T28 T27, I
#define T29 T28, I
#define T30 T29, I
#define T31 T30, I
#define T32 T31, I

#define A1 a[0]
#define A2 A1, a[1]
#define A3 A2, a[2]
#define A4 A3, a[3]
#define A5 A4, a[4]
#define A6 A5, a[5]
#define A7 A6, a[6]
#define A8 A7, a[7]
#define A9 A8, a[8]
#define A10 A9, a[9]
#define A11 A10, a[10]
#define A12 A11, a[11]
#define A13 A12, a[12]
#define A14 A13, a[13]
#define A15 A14, a[14]
#define A16 A15, a[15]
#define A17 A16, a[16]
#define A18 A17, a[17]
#define A19 A18, a[18]
#define A20 A19, a[19]
#define A21 A20, a[20]
#define A22 A21, a[21]
#define A23 A22, a[22]
#define A24 A23, a[23]
#define A25 A24, a[24]
#define A26 A25, a[25]
#define A27 A26, a[26]
#define A28 A27, a[27]
#define A29 A28, a[28]
#define A30 A29, a[29]
#define A31 A30, a[30]
#define A32 A31, a[31]

#define CALLS_CASE(n) \
  case n: \
    return ((int32_t(*)(T##n))fn)(A##n);

/* Calls fn with the n words of a; *ok = 0 where n is past CALLS_MAX_ARGS. */
static int32_t calls_call(int64_t fn, int64_t n, const int64_t *a, int *ok) {
  (void)a;
  switch (n) {
    case 0:
      return ((int32_t(*)(void))fn)();
    CALLS_CASE(1)
    CALLS_CASE(2)
    CALLS_CASE(3)
    CALLS_CASE(4)
    CALLS_CASE(5)
    CALLS_CASE(6)
    CALLS_CASE(7)
    CALLS_CASE(8)
    CALLS_CASE(9)
    CALLS_CASE(10)
    CALLS_CASE(11)
    CALLS_CASE(12)
    CALLS_CASE(13)
    CALLS_CASE(14)
    CALLS_CASE(15)
    CALLS_CASE(16)
    CALLS_CASE(17)
    CALLS_CASE(18)
    CALLS_CASE(19)
    CALLS_CASE(20)
    CALLS_CASE(21)
    CALLS_CASE(22)
    CALLS_CASE(23)
    CALLS_CASE(24)
    CALLS_CASE(25)
    CALLS_CASE(26)
    CALLS_CASE(27)
    CALLS_CASE(28)
    CALLS_CASE(29)
    CALLS_CASE(30)
    CALLS_CASE(31)
    CALLS_CASE(32)
    default:
      *ok = 0;
      return 0;
  }
}

int64_t tdsl_run_calls(const int64_t *table, int64_t *at) {
  int64_t n = table[0], i = at[0], w = at[1];
  int64_t status = CALLS_DONE;
  int trace = tdsl_trace_enabled();
  tdsl_parallel_hold();
  if (trace) tdsl_trace_record(0, TRACE_RUN, i, (int64_t)table, 0, 0, 0, 0);
  for (; i < n; i++) {
    const int64_t *e = table + 1 + w;
    int ok = e[0] != 0;
    int32_t rc = ok ? calls_call(e[0], e[1], e + 3, &ok) : 0;
    if (!ok) {
      status = CALLS_PYTHON;
      break;
    }
    if (trace) tdsl_trace_record(0, TRACE_KERNEL, i, (int64_t)table, 0, 0, 0, 0);
    if (rc) {
      at[2] = rc;
      status = CALLS_FAILED;
      break;
    }
    if (e[2] && *(const int64_t *)e[2]) {
      status = CALLS_RECORDED;
      break;
    }
    w += 3 + e[1];
  }
  tdsl_parallel_release();
  if (status == CALLS_DONE) i = w = 0;
  at[0] = i;
  at[1] = w;
  return status;
}
