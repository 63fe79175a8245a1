/* A fixed-size thread pool for data-parallel kernels.
 *
 * ls_pool_run(pool, fn, arg) calls fn(arg, ith, nth) once for every ith in [0, nth) and
 * returns when all have finished; the calling thread runs ith = 0. Kernels split OUTPUT
 * columns, heads or rows by ith, never a reduction dimension, so results do not depend on
 * nth (docs/speculative.md section 2). Workers spin briefly between jobs (a decode step runs
 * hundreds of small jobs) and then sleep. */
#ifndef LS_CORE_THREADS_H
#define LS_CORE_THREADS_H

typedef struct ls_pool ls_pool;
typedef void (*ls_pool_fn)(void *arg, int ith, int nth);

ls_pool *ls_pool_create(int n_threads); /* n_threads >= 1; NULL on failure */
void ls_pool_free(ls_pool *pool);
int ls_pool_size(const ls_pool *pool);
void ls_pool_run(ls_pool *pool, ls_pool_fn fn, void *arg);

/* The [begin, end) share of n items for thread ith of nth (contiguous, balanced). */
static inline void ls_split(long n, int ith, int nth, long *begin, long *end) {
    long per = n / nth, rem = n % nth;
    *begin = ith * per + (ith < rem ? ith : rem);
    *end = *begin + per + (ith < rem ? 1 : 0);
}

int ls_cpu_count(void);

#endif
