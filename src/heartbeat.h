/* heartbeat.h: when a session last heard from its server (see heartbeat.c). */
#ifndef ZKCOORD_HEARTBEAT_H
#define ZKCOORD_HEARTBEAT_H

#include <pthread.h>
#include <zookeeper/zookeeper.h>

/* One per session, inside the session's context: it lives until
 * zookeeper_close has returned, so completions never see it freed.
 * Fields below `mu` are guarded by it. */
typedef struct heartbeat {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double last_heard;   /* monotonic send time of the latest request the server answered */
    double interval;     /* seconds without an answer before a heartbeat; 0: none */
    double sent;         /* send time of the heartbeat in flight */
    int inflight;        /* a heartbeat awaits its reply */
    double connected_at; /* monotonic: the latest handshake answered (0: none yet) */
    double srtt, rttvar; /* round trips of server answers, smoothed as TCP's (RFC 6298) */
    int kick;            /* send one now (connected again) */
    int stop;
    int running;         /* the thread exists (Lua thread only) */
    /* The handshake watchdog (reconnect.c): an attempt whose handshake
     * stays unanswered for `allow` seconds is dropped and made again. */
    char *hosts;         /* the handle's servers; NULL: watchdog off */
    double first, max;   /* the first allowance, and the most it doubles to */
    double allow;        /* the allowance now (back to `first` once connected) */
    double assoc_since;  /* monotonic: awaiting a handshake since (0: not) */
    int connected;       /* the handle's last session event said connected */
    int restore;         /* reconnect_restore still due */
    unsigned reconnects; /* attempts dropped so far */
    zhandle_t *zh;
    pthread_t thread;
} heartbeat;

void heartbeat_init(heartbeat *hb);
int heartbeat_start(heartbeat *hb, zhandle_t *zh);     /* 0 or an errno */
void heartbeat_stop(heartbeat *hb);                    /* joins; before zookeeper_close */
void heartbeat_destroy(heartbeat *hb);                 /* after zookeeper_close */
void heartbeat_heard(heartbeat *hb, double sent, int rc);   /* any thread */
void heartbeat_connected(heartbeat *hb);               /* any thread */
double heartbeat_last(heartbeat *hb);
void heartbeat_set_interval(heartbeat *hb, double seconds);
void heartbeat_disconnected(heartbeat *hb);            /* any thread */
/* hosts NULL or first <= 0: off. Returns 0 or ENOMEM. */
int heartbeat_set_watchdog(heartbeat *hb, const char *hosts, double first, double max);
unsigned heartbeat_reconnects(heartbeat *hb);
/* The link as the heartbeat sees it: the send time of its request awaiting
 * a reply (0: none), the latest handshake's answer, the round trips. */
void heartbeat_link(heartbeat *hb, double *waiting, double *connected_at, double *srtt,
                    double *rttvar);

#endif
