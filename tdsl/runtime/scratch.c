/* Heap scratch of generated kernels: tdsl_scratch_alloc(align, n) / tdsl_scratch_free(p),
 * what the LLVM backend calls for a buffer too large for the stack (a padded copy of an
 * input, a packed panel of a GEMM) where this library is loaded.
 *
 * glibc serves a large request with a fresh mmap and unmaps it on free (past its mmap
 * threshold, which moves only up to 32 MiB), so a kernel that allocates a few MB of
 * scratch faulted every page of it in again on every call: a Whisper encoder's first
 * convolution took ~1500 minor faults per warm call at batch 2, and a call at a new
 * largest size paid them all at once. Here a freed block is kept (never handed back to
 * the system) and the next request takes the smallest kept block large enough, so after
 * one call at the largest sizes (Executor.reserve runs one) no later call up to them
 * maps or first-touches scratch. Kept blocks are bounded by the most scratch live at
 * once (one per thread per nested buffer), not by the number of calls.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#define SCRATCH_HEADER 64            /* the block's size, and the 64-byte alignment */
#define SCRATCH_MAX_KEPT 256
#define SCRATCH_HUGE (2u << 20)

typedef struct {
  char *base;
  size_t bytes;
} scratch_block;

static pthread_mutex_t scratch_mu = PTHREAD_MUTEX_INITIALIZER;
static scratch_block kept[SCRATCH_MAX_KEPT];
static int n_kept;
/* What tdsl_scratch_stats reports: blocks mapped, their bytes, requests served by a
 * kept block, blocks kept free now. */
static int64_t n_mapped, mapped_bytes, n_reused;

static size_t block_bytes(size_t need) {
  if (need >= SCRATCH_HUGE) return (need + SCRATCH_HUGE - 1) / SCRATCH_HUGE * SCRATCH_HUGE;
  size_t b = 64 << 10;
  while (b < need) b <<= 1;
  return b;
}

void *tdsl_scratch_alloc(int64_t align, int64_t nbytes) {
  if (align > SCRATCH_HEADER || nbytes < 0) return 0;
  size_t need = (size_t)nbytes + SCRATCH_HEADER;
  pthread_mutex_lock(&scratch_mu);
  int best = -1;
  for (int i = 0; i < n_kept; i++)
    if (kept[i].bytes >= need && (best < 0 || kept[i].bytes < kept[best].bytes)) best = i;
  if (best >= 0) {
    char *base = kept[best].base;
    kept[best] = kept[--n_kept];
    n_reused++;
    pthread_mutex_unlock(&scratch_mu);
    return base + SCRATCH_HEADER;
  }
  pthread_mutex_unlock(&scratch_mu);
  size_t bytes = block_bytes(need);
  char *base = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return 0;
#ifdef MADV_HUGEPAGE
  if (bytes >= SCRATCH_HUGE) madvise(base, bytes, MADV_HUGEPAGE);
#endif
  *(size_t *)base = bytes;
  pthread_mutex_lock(&scratch_mu);
  n_mapped++;
  mapped_bytes += (int64_t)bytes;
  pthread_mutex_unlock(&scratch_mu);
  return base + SCRATCH_HEADER;
}

void tdsl_scratch_free(void *p) {
  if (!p) return;
  char *base = (char *)p - SCRATCH_HEADER;
  size_t bytes = *(size_t *)base;
  pthread_mutex_lock(&scratch_mu);
  if (n_kept < SCRATCH_MAX_KEPT) {
    kept[n_kept].base = base;
    kept[n_kept].bytes = bytes;
    n_kept++;
    base = 0;
  } else {
    n_mapped--;
    mapped_bytes -= (int64_t)bytes;
  }
  pthread_mutex_unlock(&scratch_mu);
  if (base) munmap(base, bytes);
}

void tdsl_scratch_stats(int64_t *out) {
  pthread_mutex_lock(&scratch_mu);
  out[0] = n_mapped;
  out[1] = mapped_bytes;
  out[2] = n_reused;
  out[3] = n_kept;
  pthread_mutex_unlock(&scratch_mu);
}
