/* lockstep serve: the total deadline for receiving each request (see http_watch.h). */
#include "http_watch.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "server.h"

struct srv_watch {
    struct srv_watch *prev, *next;
    int fd;
    bool armed;   /* a request is being received: deadline_ms applies */
    bool expired; /* the deadline passed and the socket was shut down */
    double deadline_ms;
};

/* A socket handed to libmicrohttpd whose connection has not started yet. */
typedef struct handoff {
    struct handoff *next;
    int fd;
    double deadline_ms;
} handoff;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool running, stop;
    double timeout_ms;
    double wake_at; /* when the thread wakes next on its own */
    srv_watch *head;
    handoff *handoffs;
} g_w = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Under g_w.mu: wake the thread if `deadline_ms` is before its next wake-up. */
static void wake_for(double deadline_ms) {
    if (deadline_ms < g_w.wake_at) pthread_cond_signal(&g_w.cv);
}

static void *watch_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_w.mu);
    while (!g_w.stop) {
        double now = srv_now_ms(), next = now + 1000;
        for (srv_watch *w = g_w.head; w; w = w->next) {
            if (!w->armed) continue;
            if (w->deadline_ms <= now) {
                /* libmicrohttpd's thread reads end of file and closes the connection */
                w->armed = false;
                w->expired = true;
                shutdown(w->fd, SHUT_RDWR);
            } else if (w->deadline_ms < next) {
                next = w->deadline_ms;
            }
        }
        g_w.wake_at = next;
        long long ns = (long long)(next * 1e6); /* srv_now_ms is CLOCK_MONOTONIC in ms */
        struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
        pthread_cond_timedwait(&g_w.cv, &g_w.mu, &ts);
    }
    pthread_mutex_unlock(&g_w.mu);
    return NULL;
}

int srv_watch_start(int timeout_s) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the clock of srv_now_ms */
    pthread_cond_init(&g_w.cv, &ca);
    pthread_condattr_destroy(&ca);
    g_w.timeout_ms = 1e3 * (timeout_s > 0 ? timeout_s : 10);
    g_w.stop = false;
    g_w.wake_at = 0;
    if (pthread_create(&g_w.thread, NULL, watch_main, NULL) != 0) {
        pthread_cond_destroy(&g_w.cv);
        return -1;
    }
    g_w.running = true;
    return 0;
}

void srv_watch_stop(void) {
    if (!g_w.running) return;
    pthread_mutex_lock(&g_w.mu);
    g_w.stop = true;
    pthread_cond_signal(&g_w.cv);
    pthread_mutex_unlock(&g_w.mu);
    pthread_join(g_w.thread, NULL);
    g_w.running = false;
    pthread_cond_destroy(&g_w.cv);
    while (g_w.handoffs) {
        handoff *h = g_w.handoffs;
        g_w.handoffs = h->next;
        free(h);
    }
}

/* Under g_w.mu: takes the hand-over entry of `fd` out of the list (NULL if none). */
static handoff *take_handoff(int fd) {
    for (handoff **pp = &g_w.handoffs; *pp; pp = &(*pp)->next) {
        if ((*pp)->fd == fd) {
            handoff *h = *pp;
            *pp = h->next;
            return h;
        }
    }
    return NULL;
}

void srv_watch_handoff(int fd, double deadline_ms, bool cancel) {
    pthread_mutex_lock(&g_w.mu);
    handoff *h = take_handoff(fd); /* a stale one (its hand-over failed unseen) or ours */
    if (!cancel && (h || (h = malloc(sizeof *h)))) {
        h->fd = fd;
        h->deadline_ms = deadline_ms;
        h->next = g_w.handoffs;
        g_w.handoffs = h;
    } else {
        free(h);
    }
    pthread_mutex_unlock(&g_w.mu);
}

srv_watch *srv_watch_open(int fd) {
    srv_watch *w = calloc(1, sizeof *w);
    pthread_mutex_lock(&g_w.mu);
    handoff *h = take_handoff(fd);
    if (w) {
        w->fd = fd;
        w->armed = true;
        w->deadline_ms = h ? h->deadline_ms : srv_now_ms() + g_w.timeout_ms;
        w->next = g_w.head;
        if (g_w.head) g_w.head->prev = w;
        g_w.head = w;
        wake_for(w->deadline_ms);
    }
    pthread_mutex_unlock(&g_w.mu);
    free(h);
    return w;
}

void srv_watch_close(srv_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&g_w.mu);
    if (w->prev)
        w->prev->next = w->next;
    else
        g_w.head = w->next;
    if (w->next) w->next->prev = w->prev;
    pthread_mutex_unlock(&g_w.mu);
    free(w);
}

void srv_watch_rearm(srv_watch *w) {
    if (!w) return;
    pthread_mutex_lock(&g_w.mu);
    if (!w->expired) {
        w->armed = true;
        w->deadline_ms = srv_now_ms() + g_w.timeout_ms;
        wake_for(w->deadline_ms);
    }
    pthread_mutex_unlock(&g_w.mu);
}

bool srv_watch_disarm(srv_watch *w) {
    if (!w) return true;
    pthread_mutex_lock(&g_w.mu);
    w->armed = false;
    bool ok = !w->expired;
    pthread_mutex_unlock(&g_w.mu);
    return ok;
}
