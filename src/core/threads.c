/* Thread pool: workers wait on a generation counter. A job bumps the generation;
 * each worker runs its share and bumps `done`. Workers spin for a short while (decode
 * runs many sub-millisecond jobs back to back) and then block on a condition variable,
 * so an idle server costs no CPU. */
#include "core/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LS_CPU_RELAX() _mm_pause()
#else
#define LS_CPU_RELAX() ((void)0)
#endif

/* Pause-spins before a worker sleeps (~1 ms), and before a waiting thread starts yielding
 * its core (a machine running more threads than cores must not starve the thread we wait on). */
enum { SPIN_ROUNDS = 1 << 14, YIELD_AFTER = 1 << 10 };

struct ls_pool {
    int n;
    pthread_t *threads;
    atomic_uint generation; /* bumped once per job */
    atomic_int done;        /* workers finished with the current job */
    atomic_int stop;
    ls_pool_fn fn;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int sleepers;
};

typedef struct {
    ls_pool *pool;
    int ith;
} worker_arg;

static void *worker_main(void *p) {
    worker_arg *wa = p;
    ls_pool *pool = wa->pool;
    int ith = wa->ith;
    free(wa);
    /* Generation 0 is the state at creation: a job posted before this thread got
     * scheduled must still be seen as new. */
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load(&pool->stop)) {
            if (++spins < SPIN_ROUNDS) {
                if (spins > YIELD_AFTER)
                    sched_yield();
                else
                    LS_CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = g;
        pool->fn(pool->arg, ith, pool->n);
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
    }
}

ls_pool *ls_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    ls_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pool->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!pool->threads) {
        free(pool);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) goto fail;
        wa->pool = pool;
        wa->ith = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            goto fail;
        }
        continue;
    fail:
        pool->n = i; /* only join what started */
        ls_pool_free(pool);
        return NULL;
    }
    return pool;
}

void ls_pool_free(ls_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool->threads);
    free(pool);
}

int ls_pool_size(const ls_pool *pool) {
    return pool ? pool->n : 1;
}

void ls_pool_run(ls_pool *pool, ls_pool_fn fn, void *arg) {
    if (!pool || pool->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store(&pool->done, 0);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(arg, 0, pool->n);
    for (int spins = 0; atomic_load_explicit(&pool->done, memory_order_acquire) < pool->n - 1; spins++) {
        if (spins > YIELD_AFTER)
            sched_yield();
        else
            LS_CPU_RELAX();
    }
}

int ls_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
