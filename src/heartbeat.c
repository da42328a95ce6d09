/* heartbeat.c: when the server last heard from a session, on a monotonic
 * clock, and a heartbeat that keeps knowing it while the session is idle.
 *
 * The server expires a session `timeout` after it last heard from the
 * client. libzookeeper's own pings produce no callback, so we cannot see
 * them: instead every request is stamped when sent, and a reply that came
 * from the server (not a local failure) records its send time as
 * `last_heard`: the server heard from us then or later. When no reply came
 * for `interval` seconds (Lua sets it, from the negotiated timeout), a
 * thread of our own sends a cheap request (exists "/", any answer counts,
 * nonode under a chroot too) whose reply only moves the clock: it never
 * reaches the Lua queue. Lua decides from `last_heard` whether the session
 * can still be alive (client/session.lua); this file only measures.
 *
 * The same thread is the handshake watchdog: while the handle waits for a
 * server's handshake reply longer than Lua allows (handshake_timeout, 0.5 s
 * by default, doubling), it drops that attempt (reconnect.c). libzookeeper
 * alone would wait 2/3 of the session timeout, which a server that never
 * answers (ZOOKEEPER-5051) turns into a lost session after a short outage.
 *
 * Threads: the heartbeat thread calls only zoo_state, zoo_aexists and
 * zoo_set_servers on the handle (all safe from any thread in
 * libzookeeper_mt) and is joined before zookeeper_close. heartbeat_heard,
 * heartbeat_connected and heartbeat_disconnected run on libzookeeper's
 * threads (or on the Lua thread inside zookeeper_close).
 * A stopped process stops this thread too: that is why Lua checks the
 * clock itself when it resumes, rather than trusting the thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "completions.h"
#include "heartbeat.h"
#include "reconnect.h"

/* How often the watchdog looks at the handle's state while not connected. */
#define WATCH_EVERY 0.1
#define FOREVER 1e9

/* Server answers: the request reached the server and was judged there. Local
 * failures (connection loss, timeout, closing, expired) prove nothing. */
static int from_server(int rc)
{
    switch (rc) {
    case ZOK: case ZNONODE: case ZNOAUTH: case ZBADVERSION:
    case ZNOCHILDRENFOREPHEMERALS: case ZNODEEXISTS: case ZNOTEMPTY:
    case ZINVALIDACL: case ZNOTREADONLY:
        return 1;
    default:
        return 0;
    }
}

void heartbeat_init(heartbeat *hb)
{
    pthread_condattr_t ca;
    pthread_mutex_init(&hb->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hb->cv, &ca);
    pthread_condattr_destroy(&ca);
    hb->last_heard = monotonic_now();
    hb->interval = 0;
    hb->inflight = hb->kick = hb->stop = hb->running = 0;
    hb->zh = NULL;
    hb->hosts = NULL;
    hb->first = hb->max = hb->allow = hb->assoc_since = 0;
    hb->connected = hb->restore = 0;
    hb->reconnects = 0;
    hb->connected_at = hb->srtt = hb->rttvar = 0;
}

/* Mutex held: one round trip of a request sent at `sent`, answered now,
 * from the handshake on (a request queued while disconnected waited for
 * the connection, not for the server). The first sets both, as in TCP. */
static void rtt_sample(heartbeat *hb, double sent, double now)
{
    double r = now - (sent > hb->connected_at ? sent : hb->connected_at), d;
    if (r < 0)
        return;
    if (hb->srtt == 0) {
        hb->srtt = r;
        hb->rttvar = r / 2;
        return;
    }
    d = r > hb->srtt ? r - hb->srtt : hb->srtt - r;
    hb->rttvar += (d - hb->rttvar) / 4;
    hb->srtt += (r - hb->srtt) / 8;
}

/* ZK THREAD (or the Lua thread inside zookeeper_close): moves the clock
 * under the heartbeat's mutex, nothing else. */
void heartbeat_heard(heartbeat *hb, double sent, int rc)
{
    double now;
    if (!from_server(rc))
        return;
    now = monotonic_now();
    pthread_mutex_lock(&hb->mu);
    if (sent > hb->last_heard)
        hb->last_heard = sent;
    rtt_sample(hb, sent, now);
    pthread_mutex_unlock(&hb->mu);
}

/* ZK THREAD: the handshake was just answered. We do not know when it was
 * sent, so the answer's arrival stands in (late by one network delay) and
 * a heartbeat goes now, whose send time replaces it within a round trip. */
void heartbeat_connected(heartbeat *hb)
{
    double now = monotonic_now();
    pthread_mutex_lock(&hb->mu);
    if (now > hb->last_heard)
        hb->last_heard = now;
    hb->connected_at = now;
    hb->kick = 1;
    hb->connected = 1;
    hb->allow = hb->first;
    hb->assoc_since = 0;
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
}

/* ZK THREAD: any other session state: the watchdog looks again. */
void heartbeat_disconnected(heartbeat *hb)
{
    pthread_mutex_lock(&hb->mu);
    hb->connected = 0;
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
}

int heartbeat_set_watchdog(heartbeat *hb, const char *hosts, double first, double max)
{
    char *copy = NULL;
    if (hosts && first > 0) {
        copy = strdup(hosts);
        if (!copy)
            return ENOMEM;
    }
    pthread_mutex_lock(&hb->mu);
    free(hb->hosts);
    hb->hosts = copy;
    hb->first = first;
    hb->max = max > first ? max : first;
    hb->allow = hb->first;
    hb->assoc_since = 0;
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
    return 0;
}

unsigned heartbeat_reconnects(heartbeat *hb)
{
    unsigned n;
    pthread_mutex_lock(&hb->mu);
    n = hb->reconnects;
    pthread_mutex_unlock(&hb->mu);
    return n;
}

double heartbeat_last(heartbeat *hb)
{
    double t;
    pthread_mutex_lock(&hb->mu);
    t = hb->last_heard;
    pthread_mutex_unlock(&hb->mu);
    return t;
}

void heartbeat_link(heartbeat *hb, double *waiting, double *connected_at, double *srtt,
                    double *rttvar)
{
    pthread_mutex_lock(&hb->mu);
    *waiting = hb->inflight ? hb->sent : 0;
    *connected_at = hb->connected_at;
    *srtt = hb->srtt;
    *rttvar = hb->rttvar;
    pthread_mutex_unlock(&hb->mu);
}

void heartbeat_set_interval(heartbeat *hb, double seconds)
{
    pthread_mutex_lock(&hb->mu);
    hb->interval = seconds > 0 ? seconds : 0;
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
}

/* ZK THREAD: the heartbeat's reply (or ZCLOSING inside zookeeper_close). */
static void heartbeat_done(int rc, const struct Stat *st, const void *data)
{
    heartbeat *hb = (heartbeat *)data;
    double now = monotonic_now();
    (void)st;
    pthread_mutex_lock(&hb->mu);
    hb->inflight = 0;
    if (from_server(rc)) {
        if (hb->sent > hb->last_heard)
            hb->last_heard = hb->sent;
        rtt_sample(hb, hb->sent, now);
    }
    pthread_cond_signal(&hb->cv);   /* a kick may wait for this one */
    pthread_mutex_unlock(&hb->mu);
}

static void deadline_in(struct timespec *ts, double seconds)
{
    double t = monotonic_now() + seconds;
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* HEARTBEAT THREAD, mutex held: one look of the watchdog while not
 * connected; returns how long to sleep. ASSOCIATING is libzookeeper's
 * state from the handshake's send to its reply (a refused connect never
 * gets there: libzookeeper retries those itself at once). */
static double watchdog_step(heartbeat *hb, double now)
{
    int rc;
    char *hosts;
    if (hb->restore) {
        /* a copy: Lua may replace hb->hosts while the mutex is released */
        if (!(hosts = strdup(hb->hosts)))
            return WATCH_EVERY;
        pthread_mutex_unlock(&hb->mu);
        rc = reconnect_restore(hb->zh, hosts);
        free(hosts);
        pthread_mutex_lock(&hb->mu);
        if (rc == ZOK)
            hb->restore = 0;
        return WATCH_EVERY;
    }
    if (zoo_state(hb->zh) != ZOO_ASSOCIATING_STATE) {
        hb->assoc_since = 0;
        return WATCH_EVERY;
    }
    if (hb->assoc_since == 0)
        hb->assoc_since = now;
    if (now - hb->assoc_since < hb->allow) {
        double left = hb->assoc_since + hb->allow - now;
        return left < WATCH_EVERY ? left : WATCH_EVERY;
    }
    if (!(hosts = strdup(hb->hosts)))
        return WATCH_EVERY;
    pthread_mutex_unlock(&hb->mu);
    rc = reconnect_now(hb->zh, hosts);
    free(hosts);
    pthread_mutex_lock(&hb->mu);
    if (rc == ZRECONNECT_RESTORE)
        hb->restore = 1;
    if (rc == ZOK || rc == ZRECONNECT_RESTORE)
        hb->reconnects++;
    hb->assoc_since = 0;
    hb->allow = hb->allow * 2 < hb->max ? hb->allow * 2 : hb->max;
    return WATCH_EVERY;
}

/* HEARTBEAT THREAD: sleeps until no reply came for `interval`, then sends
 * one request (never two in flight); while not connected, the watchdog.
 * Holds the mutex except while calling libzookeeper. */
static void *heartbeat_run(void *arg)
{
    heartbeat *hb = arg;
    struct timespec ts;
    pthread_mutex_lock(&hb->mu);
    while (!hb->stop) {
        double now = monotonic_now(), wait = FOREVER;
        if (hb->interval > 0) {
            wait = hb->interval;
            if (!hb->inflight && (hb->kick || now - hb->last_heard >= hb->interval)) {
                hb->kick = 0;
                if (zoo_state(hb->zh) == ZOO_CONNECTED_STATE) {
                    int rc;
                    hb->inflight = 1;
                    hb->sent = now;
                    pthread_mutex_unlock(&hb->mu);
                    rc = zoo_aexists(hb->zh, "/", 0, heartbeat_done, hb);
                    pthread_mutex_lock(&hb->mu);
                    if (rc != ZOK)
                        hb->inflight = 0;
                }
            } else if (!hb->inflight) {
                wait = hb->last_heard + hb->interval - now;
            }
        }
        if (hb->hosts && !hb->connected && !hb->stop) {
            double w = watchdog_step(hb, now);
            if (w < wait)
                wait = w;
        }
        if (hb->stop)
            break;
        if (wait >= FOREVER) {
            pthread_cond_wait(&hb->cv, &hb->mu);
        } else {
            deadline_in(&ts, wait);
            pthread_cond_timedwait(&hb->cv, &hb->mu, &ts);
        }
    }
    pthread_mutex_unlock(&hb->mu);
    return NULL;
}

int heartbeat_start(heartbeat *hb, zhandle_t *zh)
{
    pthread_attr_t attr;
    int rc;
    hb->zh = zh;
    pthread_attr_init(&attr);
    /* It only sleeps and calls zoo_aexists: a small stack (ASan needs more
     * than the minimum, hence not PTHREAD_STACK_MIN). */
    pthread_attr_setstacksize(&attr, 256 * 1024);
    rc = pthread_create(&hb->thread, &attr, heartbeat_run, hb);
    pthread_attr_destroy(&attr);
    hb->running = rc == 0;
    return rc;
}

void heartbeat_stop(heartbeat *hb)
{
    if (!hb->running)
        return;
    pthread_mutex_lock(&hb->mu);
    hb->stop = 1;
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
    pthread_join(hb->thread, NULL);
    hb->running = 0;
}

void heartbeat_destroy(heartbeat *hb)
{
    free(hb->hosts);
    hb->hosts = NULL;
    pthread_cond_destroy(&hb->cv);
    pthread_mutex_destroy(&hb->mu);
}
