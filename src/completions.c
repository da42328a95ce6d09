/* completions.c: the completion queue and its three bells (any thread).
 *
 * Producers (ZooKeeper's IO and completion threads, and zookeeper_close on the
 * Lua thread) append records under the mutex. When the queue goes from empty
 * to non-empty they ring every bell once: the condition variable (blocking
 * waits), the eventfd (external event loops) and one byte to the connected
 * unix-socket peer (the nginx pump). The consumer swaps the whole list out
 * under the mutex and pops from its private copy without locking.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#endif

#include "completions.h"

double monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

record *record_new(zkq *q, int kind)
{
    record *r = calloc(1, sizeof(*r));
    if (r) {
        r->queue = q;
        r->kind = kind;
        r->value_len = -1;
    }
    return r;
}

int record_alloc_multi(record *r, int nops, int path_len)
{
    size_t n = (size_t)nops;
    r->nops = nops;
    r->path_len = path_len;
    r->slots = calloc(1, n * (sizeof(zoo_op_result_t) + sizeof(struct Stat) + sizeof(int))
                             + n * (size_t)path_len);
    return r->slots != NULL;
}

zoo_op_result_t *record_multi_results(record *r)
{
    return (zoo_op_result_t *)r->slots;
}

struct Stat *record_multi_stats(record *r)
{
    return (struct Stat *)(record_multi_results(r) + r->nops);
}

int *record_multi_types(record *r)
{
    return (int *)(record_multi_stats(r) + r->nops);
}

char *record_multi_path(record *r, int i)
{
    return (char *)(record_multi_types(r) + r->nops) + (size_t)i * (size_t)r->path_len;
}

void record_free(record *r)
{
    int i;
    if (!r)
        return;
    free(r->value);
    for (i = 0; i < r->strings.count; i++)
        free(r->strings.data[i]);
    free(r->strings.data);
    for (i = 0; i < r->acl.count; i++) {
        free(r->acl.data[i].id.scheme);
        free(r->acl.data[i].id.id);
    }
    free(r->acl.data);
    free(r->slots);
    free(r);
}

void inflight_init(inflight *f)
{
    pthread_mutex_init(&f->mu, NULL);
    f->head = f->tail = NULL;
}

void inflight_add(inflight *f, record *r)
{
    pthread_mutex_lock(&f->mu);
    r->fl = f;
    r->fl_prev = NULL;
    r->fl_next = f->head;
    if (f->head)
        f->head->fl_prev = r;
    else
        f->tail = r;
    f->head = r;
    pthread_mutex_unlock(&f->mu);
}

/* ZK THREAD (a completion) or the Lua thread when a submit failed: exactly
 * one of them owns r, so reading r->fl unlocked is safe. */
void inflight_remove(record *r)
{
    inflight *f = r->fl;
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    if (r->fl_prev)
        r->fl_prev->fl_next = r->fl_next;
    else
        f->head = r->fl_next;
    if (r->fl_next)
        r->fl_next->fl_prev = r->fl_prev;
    else
        f->tail = r->fl_prev;
    r->fl = NULL;
    r->fl_prev = r->fl_next = NULL;
    pthread_mutex_unlock(&f->mu);
}

/* Only once no libzookeeper thread is left (zookeeper_close returned):
 * nothing else can complete these records any more. A multi's per-op
 * results were never filled: each op reports rc too. */
void inflight_fail_all(inflight *f, int rc)
{
    record *r, *next;
    int i;
    pthread_mutex_lock(&f->mu);
    r = f->head;
    f->head = f->tail = NULL;
    pthread_mutex_unlock(&f->mu);
    for (; r; r = next) {
        next = r->fl_next;
        r->fl = NULL;
        r->fl_prev = r->fl_next = NULL;
        r->rc = rc;
        r->hb = NULL;   /* the server heard nothing */
        for (i = 0; r->slots && i < r->nops; i++)
            record_multi_results(r)[i].err = rc;
        queue_push(r->queue, r);
    }
}

double inflight_oldest(inflight *f)
{
    double t;
    pthread_mutex_lock(&f->mu);
    t = f->tail ? f->tail->sent : 0;
    pthread_mutex_unlock(&f->mu);
    return t;
}

void inflight_destroy(inflight *f)
{
    pthread_mutex_destroy(&f->mu);
}

zkq *queue_new(void)
{
    pthread_condattr_t ca;
    zkq *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->listen_fd = q->peer_fd = -1;
    q->refs = 1;
    q->next_id = 1;
#ifdef __linux__
    q->efd = q->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->efd < 0) {
        free(q);
        return NULL;
    }
#else
    {
        int p[2];
        if (pipe(p) != 0) {
            free(q);
            return NULL;
        }
        fcntl(p[0], F_SETFL, O_NONBLOCK);
        fcntl(p[1], F_SETFL, O_NONBLOCK);
        q->efd = p[0];
        q->wfd = p[1];
    }
#endif
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    return q;
}

void queue_ref(zkq *q)
{
    pthread_mutex_lock(&q->mu);
    q->refs++;
    pthread_mutex_unlock(&q->mu);
}

void queue_close_doorbell(zkq *q)
{
    int lfd, pfd;
    pthread_mutex_lock(&q->mu);
    lfd = q->listen_fd;
    pfd = q->peer_fd;
    q->listen_fd = q->peer_fd = -1;
    pthread_mutex_unlock(&q->mu);
    if (lfd >= 0)
        close(lfd);
    if (pfd >= 0)
        close(pfd);
    if (q->sock_path) {
        unlink(q->sock_path);
        free(q->sock_path);
        q->sock_path = NULL;
    }
}

void queue_unref(zkq *q)
{
    record *r, *next;
    int last;
    pthread_mutex_lock(&q->mu);
    last = --q->refs == 0;
    pthread_mutex_unlock(&q->mu);
    if (!last)
        return;
    /* No session and no Lua object refer to it: no producer is left. */
    for (r = q->head; r; r = next) {
        next = r->next;
        record_free(r);
    }
    for (r = q->local; r; r = next) {
        next = r->next;
        record_free(r);
    }
    queue_close_doorbell(q);
    close(q->efd);
    if (q->wfd != q->efd)
        close(q->wfd);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* ZK THREAD: may run on any thread; touches only the queue under its mutex
 * and the wake fds (non-blocking writes; EAGAIN means a wake-up is pending). */
static void ring(zkq *q, int peer)
{
    uint64_t one = 1;
    char byte = 1;
    ssize_t n;
    if (q->want_fd) {   /* a syscall per wake-up only once someone watches the fd */
        n = write(q->wfd, &one, q->wfd == q->efd ? sizeof(one) : 1);
        (void)n;
    }
    if (peer >= 0) {
        n = send(peer, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)n;
    }
}

/* ZK THREAD: see ring(). */
void queue_push(zkq *q, record *r)
{
    int bell = 0, peer;
    r->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    if (!q->notified) {
        q->notified = 1;
        bell = 1;
    }
    peer = q->peer_fd;
    if (bell)
        ring(q, peer);  /* under the mutex so the peer fd cannot be closed meanwhile */
    pthread_mutex_unlock(&q->mu);
    /* After the unlock: a waiter woken under our mutex would only block on
     * it again (two more futex calls and a context switch per wake-up). It
     * reads head under the mutex, so it cannot miss this record. The
     * session's reference keeps q alive until its threads are joined. */
    if (bell)
        pthread_cond_broadcast(&q->cv);
}

/* ZK THREAD: see ring(). */
void queue_kick(zkq *q)
{
    pthread_mutex_lock(&q->mu);
    q->kicked = 1;
    ring(q, q->peer_fd);
    pthread_mutex_unlock(&q->mu);
    pthread_cond_broadcast(&q->cv);   /* after the unlock: see queue_push */
}

/* From now on wake-ups also write the eventfd. Records already waiting rang
 * no fd: make it readable for them now. */
void queue_want_fd(zkq *q)
{
    uint64_t one = 1;
    ssize_t n;
    int pending;
    pthread_mutex_lock(&q->mu);
    q->want_fd = 1;
    pending = q->head != NULL || q->local != NULL;
    pthread_mutex_unlock(&q->mu);
    if (pending) {
        n = write(q->wfd, &one, q->wfd == q->efd ? sizeof(one) : 1);
        (void)n;
    }
}


record *queue_pop(zkq *q)
{
    record *r = q->local;
    if (!r) {
        pthread_mutex_lock(&q->mu);
        r = q->head;
        q->head = q->tail = NULL;
        q->notified = 0;
        pthread_mutex_unlock(&q->mu);
        if (!r)
            return NULL;
    }
    q->local = r->next;
    r->next = NULL;
    return r;
}

int queue_wait(zkq *q, double timeout)
{
    int ready;
    struct timespec ts;
    if (q->local)
        return 1;
    pthread_mutex_lock(&q->mu);
    if (!isfinite(timeout) || timeout > 1e8) {
        /* No deadline: a timespec cannot hold it (converting inf to time_t
         * is undefined and made timedwait fail at once: a spin). */
        while (!q->head && !q->kicked)
            pthread_cond_wait(&q->cv, &q->mu);
    } else if (timeout > 0 && !q->head && !q->kicked) {
        double deadline;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        deadline = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + timeout;
        ts.tv_sec = (time_t)deadline;
        ts.tv_nsec = (long)((deadline - (double)ts.tv_sec) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!q->head && !q->kicked) {
            if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT)
                break;
        }
    }
    ready = q->head != NULL;
    q->kicked = 0;
    pthread_mutex_unlock(&q->mu);
    return ready;
}

void queue_clear_fd(zkq *q)
{
    char buf[64];
    while (read(q->efd, buf, sizeof(buf)) > 0)
        ;
}

int queue_listen_unix(zkq *q, const char *path)
{
    struct sockaddr_un sa;
    int fd;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    queue_close_doorbell(q);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    unlink(path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    q->sock_path = strdup(path);
    pthread_mutex_lock(&q->mu);
    q->listen_fd = fd;
    pthread_mutex_unlock(&q->mu);
    return 0;
}

/* A unix connect() completes against the backlog, so the peer has already
 * connected when Lua calls this: no accept thread is needed. The path is
 * unlinked at once, so a killed worker leaves no socket file behind. */
int queue_accept_unix(zkq *q)
{
    int fd, ready;
    if (q->listen_fd < 0) {
        errno = EBADF;
        return -1;
    }
    fd = accept4(q->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return -1;
    close(q->listen_fd);
    unlink(q->sock_path);
    free(q->sock_path);
    q->sock_path = NULL;
    pthread_mutex_lock(&q->mu);
    q->listen_fd = -1;
    q->peer_fd = fd;
    /* Records queued before the peer existed rang no byte: ring now. */
    ready = q->head != NULL || q->local != NULL;
    if (ready)
        ring(q, fd);
    pthread_mutex_unlock(&q->mu);
    return 0;
}
