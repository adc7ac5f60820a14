"""GPU kernels emulated on the CPU in plain C (target "c" on a schedule that binds
threads); `tdsl.runtime.emu` launches them.
"""
from __future__ import annotations

from ... import arith
from ...ir import stmt as S
from ...passes.gpu import shared_align
from .c import CPrinter

_EMU_RUNTIME = r"""
/* GPU emulation: the blocks of a grid run one after another; the threads of a block are
   fibers (ucontext) switched at every barrier, so __syncthreads() semantics hold and
   shared memory is a static array of the kernel function. */
#include <ucontext.h>
#define TDSL_EMU_STACK (64 * 1024)
static int tdsl_emu_idx[6];
static ucontext_t tdsl_emu_main;
static ucontext_t *tdsl_emu_ctx;
static int tdsl_emu_cur;
static unsigned char *tdsl_emu_done;
static void (*tdsl_emu_fn)(void);

/* Asynchronous copies (cp.async): each thread's are queued and done at the latest moment
   the hardware may complete them, so a tile read before the barrier that should publish
   it reads stale data here too: at a plain barrier all of them; at a pipeline's barrier
   (tdsl_emu_barrier_wait(n)) all but those of the n groups committed last. */
#define TDSL_EMU_ASYNC 128
#define TDSL_EMU_GROUPS 16
typedef struct { void *dst; const void *src; } tdsl_emu_copy;
typedef struct {
  tdsl_emu_copy q[TDSL_EMU_ASYNC];
  int n;                          /* copies queued */
  int end[TDSL_EMU_GROUPS];       /* each committed group's end in q, oldest first */
  int ng;
} tdsl_emu_async;
static tdsl_emu_async *tdsl_emu_queues;

/* completes the queue's first `upto` copies */
static void tdsl_emu_async_done(tdsl_emu_async *a, int upto) {
  for (int i = 0; i < upto; ++i) memcpy(a->q[i].dst, a->q[i].src, 16);
  memmove(a->q, a->q + upto, sizeof(tdsl_emu_copy) * (size_t)(a->n - upto));
  a->n -= upto;
  int k = 0;
  for (int g = 0; g < a->ng; ++g)
    if (a->end[g] > upto) a->end[k++] = a->end[g] - upto;
  a->ng = k;
}

static void tdsl_emu_async_wait(void) {
  tdsl_emu_async *a = &tdsl_emu_queues[tdsl_emu_cur];
  tdsl_emu_async_done(a, a->n);
}

static void tdsl_emu_async16(void *dst, const void *src) {
  tdsl_emu_async *a = &tdsl_emu_queues[tdsl_emu_cur];
  if (a->n == TDSL_EMU_ASYNC) tdsl_emu_async_done(a, a->n);   /* early: allowed */
  a->q[a->n].dst = dst; a->q[a->n].src = src; ++a->n;
}

static void tdsl_emu_async_commit(void) {
  tdsl_emu_async *a = &tdsl_emu_queues[tdsl_emu_cur];
  if (a->ng == TDSL_EMU_GROUPS) tdsl_emu_async_done(a, a->end[0]);
  a->end[a->ng++] = a->n;
}

static void tdsl_emu_barrier(void) {
  tdsl_emu_async_wait();
  swapcontext(&tdsl_emu_ctx[tdsl_emu_cur], &tdsl_emu_main);
}

static void tdsl_emu_barrier_wait(int pending) {
  tdsl_emu_async *a = &tdsl_emu_queues[tdsl_emu_cur];
  if (a->ng > pending) tdsl_emu_async_done(a, a->end[a->ng - pending - 1]);
  swapcontext(&tdsl_emu_ctx[tdsl_emu_cur], &tdsl_emu_main);
}

static void tdsl_emu_tramp(void) {
  tdsl_emu_fn();
  tdsl_emu_async_wait();
  tdsl_emu_done[tdsl_emu_cur] = 1;
}

static int tdsl_emu_run(void (*fn)(void), const int64_t *grid, const int64_t *block) {
  int64_t nt = block[0] * block[1] * block[2];
  ucontext_t *ctx = (ucontext_t *)malloc(sizeof(ucontext_t) * nt);
  char *stacks = (char *)malloc((size_t)TDSL_EMU_STACK * nt);
  unsigned char *done = (unsigned char *)malloc(nt);
  tdsl_emu_async *queues = (tdsl_emu_async *)calloc(nt, sizeof(tdsl_emu_async));
  if (!ctx || !stacks || !done || !queues) {
    free(ctx); free(stacks); free(done); free(queues); return 1;
  }
  tdsl_emu_ctx = ctx; tdsl_emu_done = done; tdsl_emu_fn = fn;
  tdsl_emu_queues = queues;
  for (int64_t bz = 0; bz < grid[2]; ++bz)
  for (int64_t by = 0; by < grid[1]; ++by)
  for (int64_t bx = 0; bx < grid[0]; ++bx) {
    for (int64_t t = 0; t < nt; ++t) {
      getcontext(&ctx[t]);
      ctx[t].uc_stack.ss_sp = stacks + (size_t)TDSL_EMU_STACK * t;
      ctx[t].uc_stack.ss_size = TDSL_EMU_STACK;
      ctx[t].uc_link = &tdsl_emu_main;
      makecontext(&ctx[t], tdsl_emu_tramp, 0);
      done[t] = 0;
    }
    int64_t left = nt;
    while (left > 0) {
      for (int64_t t = 0; t < nt; ++t) {
        if (done[t]) continue;
        tdsl_emu_cur = (int)t;
        tdsl_emu_idx[0] = (int)bx; tdsl_emu_idx[1] = (int)by; tdsl_emu_idx[2] = (int)bz;
        tdsl_emu_idx[3] = (int)(t % block[0]);
        tdsl_emu_idx[4] = (int)((t / block[0]) % block[1]);
        tdsl_emu_idx[5] = (int)(t / (block[0] * block[1]));
        swapcontext(&tdsl_emu_main, &ctx[t]);
        if (done[t]) --left;
      }
    }
  }
  free(ctx); free(stacks); free(done); free(queues);
  return 0;
}
"""


class CGPUEmuPrinter(CPrinter):
    """Kernels of a GPU schedule as C for the host CPU (target "c" on a schedule that binds
    threads): every kernel `K` gets `int32_t K_launch(void **argv, const int64_t *grid,
    const int64_t *block)`, where argv[i] points to a buffer or to a scalar of the
    parameter's type."""

    has_threads = True
    _IDX = {"blockIdx.x": 0, "blockIdx.y": 1, "blockIdx.z": 2, "threadIdx.x": 3,
            "threadIdx.y": 4, "threadIdx.z": 5}

    def thread_index(self, tag):
        return f"tdsl_emu_idx[{self._IDX[tag]}]"

    def barrier(self):
        return "tdsl_emu_barrier();"

    def s_Barrier(self, s):
        self.emit(self.barrier() if s.async_wait is None else
                  f"tdsl_emu_barrier_wait({s.async_wait});")

    def async_commit(self):
        return "tdsl_emu_async_commit();"

    def vector_copy(self, dst, src):
        return f"memcpy({dst}, {src}, 16)"

    def async_copy(self, dst, src):
        return f"tdsl_emu_async16({dst}, {src})"

    def shared_decl(self, t, name, size, align=16):
        return f"static {t} {name}[{max(size, 1)}] __attribute__((aligned({align})));"

    def preamble(self):
        return ("// generated by tdsl (target c, GPU kernels emulated)\n#define _GNU_SOURCE\n"
                "#include <stdint.h>\n#include <stdbool.h>\n#include <stdlib.h>\n#include <string.h>\n"
                "#include <math.h>\n" + _EMU_RUNTIME)

    def print_kernel(self, kernel, written) -> str:
        self.begin()
        for p in kernel.params:
            self.names(p, p.name)
        argv = f"{kernel.name}_argv"
        for k, p in enumerate(kernel.params):
            if isinstance(p, S.Buffer):
                t = self.mem_type(p.dtype)
                self.emit(f"{t}* {self.restrict()} {self.names(p, p.name)} = ({t}*){argv}[{k}];")
            else:
                t = self.type_name(p.dtype)
                self.emit(f"const {t} {self.names(p, p.name)} = *(const {t}*){argv}[{k}];")
        for b in kernel.shared:
            size = arith.simplify(b.shape[0])
            self.emit(self.shared_decl(self.mem_type(b.dtype), self.bufname(b), size.value,
                                       shared_align(b)))
        self.stmt(kernel.body)
        body = "\n".join(self.lines)
        return (f"static void **{argv};\n"
                f"static void {kernel.name}_thread(void) {{\n{body}\n}}\n"
                f"int32_t {kernel.name}_launch(void **argv, const int64_t *grid, "
                f"const int64_t *block) {{\n  {argv} = argv;\n"
                f"  return tdsl_emu_run({kernel.name}_thread, grid, block);\n}}\n")
