/* lockstep serve: a total deadline for receiving each request (docs/server_http.md).
 *
 * libmicrohttpd's connection timeout is an inactivity timeout: a client that sends a byte of its
 * header lines or body every few seconds keeps the connection. This watch gives every request
 * an absolute deadline for being received whole (request line, header lines and body): counted
 * from the connection's acceptance for its first request (the accept loop hands its deadline
 * over), from the end of the previous response for a later one on a kept-alive connection. When
 * it passes, the watch thread shuts the socket down in both directions: libmicrohttpd's thread
 * then reads end of file and closes the connection, without an answer (as for the accept loop's
 * own deadline). The watch is disarmed once a request's body is in (generation has --timeout).
 *
 * Each connection's watch lives in libmicrohttpd's socket context (MHD_OPTION_NOTIFY_CONNECTION:
 * opened when the connection starts, closed before its socket is), so the thread never touches
 * a descriptor that was closed and reused. */
#ifndef LS_SERVER_HTTP_WATCH_H
#define LS_SERVER_HTTP_WATCH_H

#include <stdbool.h>

typedef struct srv_watch srv_watch;

/* Starts the watch thread; `timeout_s` is --header-timeout. Returns 0 or -1. */
int srv_watch_start(int timeout_s);
/* Stops it (after libmicrohttpd stopped: no watch is open any more). */
void srv_watch_stop(void);

/* The accept loop hands socket `fd` to libmicrohttpd; its first request must be in by
 * `deadline_ms` (srv_now_ms clock). `cancel`: the hand-over failed (libmicrohttpd closed it). */
void srv_watch_handoff(int fd, double deadline_ms, bool cancel);

/* A connection started (its socket `fd`): armed with the hand-over deadline (or now plus the
 * timeout). NULL when out of memory (then the connection is not watched). */
srv_watch *srv_watch_open(int fd);
/* The connection is closing (its socket is still open): forget and free it. NULL is ignored. */
void srv_watch_close(srv_watch *w);

/* A response was sent and the connection stays open: the next request must be in within the
 * timeout from now. */
void srv_watch_rearm(srv_watch *w);
/* The request is in (body read): no deadline until the next one. Returns false when the
 * deadline had already passed (the socket is shut down: do not serve the request). */
bool srv_watch_disarm(srv_watch *w);

#endif
