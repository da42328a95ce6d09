/* completions.h: the completion queue shared by ZooKeeper threads and the Lua thread.
 *
 * A record is allocated on the Lua thread when a request is submitted, handed
 * to libzookeeper_mt as the completion's `data`, filled and pushed by a
 * ZooKeeper thread, and freed by the Lua thread after conversion. Watch and
 * session records are allocated by the ZooKeeper thread that sees the event.
 * Whoever holds a record last frees it: nobody else touches it meanwhile.
 */
#ifndef ZKCOORD_COMPLETIONS_H
#define ZKCOORD_COMPLETIONS_H

#include <pthread.h>
#include <stdint.h>
#include <zookeeper/zookeeper.h>

enum { REC_REPLY = 1, REC_WATCH = 2, REC_SESSION = 3 };

enum {
    OP_CREATE = 1, OP_DELETE, OP_EXISTS, OP_GET, OP_SET, OP_CHILDREN,
    OP_MULTI, OP_SYNC, OP_GET_ACL, OP_SET_ACL, OP_AUTH, OP_REMOVE_WATCH
};

/* Operation kinds inside a multi, as Lua passes them. */
enum { OPT_CREATE = 1, OPT_DELETE = 2, OPT_SET = 3, OPT_CHECK = 4 };

struct zkq;
struct heartbeat;

struct inflight;

typedef struct record {
    struct record *next;
    struct inflight *fl;     /* replies: the list holding it until its reply is pushed */
    struct record *fl_prev, *fl_next;
    struct zkq *queue;       /* where the completion pushes it */
    struct heartbeat *hb;    /* replies: the session's clock, read only by the completion */
    double sent;             /* replies: monotonic time the request was submitted */
    double id;               /* request id, watch id or session serial */
    int kind;                /* REC_* */
    int op;                  /* OP_* for replies */
    int rc;                  /* ZooKeeper return code (replies) */
    int type, state;         /* watch and session events */
    char *value;             /* data, created/synced path, event path */
    int value_len;           /* -1 when ZooKeeper gave no data */
    int has_stat;
    struct Stat stat;
    struct String_vector strings;  /* children (deep copy) */
    struct ACL_vector acl;         /* get_acl result (deep copy) */
    /* multi: one block holding, for nops ops, the results libzookeeper fills
     * at completion, the stats set ops write, the op types, and the path
     * buffers create ops write (path_len bytes each). */
    int nops;
    int path_len;
    char *slots;
} record;

typedef struct zkq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    record *head, *tail;     /* shared list, guarded by mu */
    record *local;           /* consumer-side list, Lua thread only */
    int notified;            /* bells rung since the consumer last emptied the list */
    int kicked;              /* a kick() not yet seen by wait() */
    int efd;                 /* eventfd (pipe read end elsewhere) */
    int wfd;                 /* write end: == efd for eventfd */
    int want_fd;             /* set once fd() was asked for: only then ring it */
    int listen_fd, peer_fd;  /* unix-socket doorbell (nginx pump) */
    char *sock_path;
    int refs;                /* Lua userdata + each open session; guarded by mu */
    double next_id;          /* Lua thread only */
} zkq;

/* The replies a session has handed to libzookeeper and not yet pushed.
 * libzookeeper 3.8's zookeeper_close can join its completion thread before
 * that thread ran the ZCLOSING replies it queued: whatever is still here
 * once zookeeper_close returned is answered by inflight_fail_all. */
typedef struct inflight {
    pthread_mutex_t mu;
    record *head;            /* the newest */
    record *tail;            /* the oldest: how long the link has left one unanswered */
} inflight;

void inflight_init(inflight *f);
void inflight_add(inflight *f, record *r);  /* Lua thread, before handing r over */
void inflight_remove(record *r);            /* any thread; no-op when not linked */
void inflight_fail_all(inflight *f, int rc); /* no libzookeeper thread left: push all */
double inflight_oldest(inflight *f);        /* the oldest one's send time; 0: none */
void inflight_destroy(inflight *f);

zkq *queue_new(void);
void queue_ref(zkq *q);
void queue_unref(zkq *q);
void queue_push(zkq *q, record *r);         /* any thread */
record *queue_pop(zkq *q);                  /* Lua thread */
int queue_wait(zkq *q, double timeout);     /* Lua thread; 1 if records are ready */
void queue_kick(zkq *q);                    /* any thread */
void queue_clear_fd(zkq *q);
void queue_want_fd(zkq *q);
int queue_listen_unix(zkq *q, const char *path);
int queue_accept_unix(zkq *q);
void queue_close_doorbell(zkq *q);

record *record_new(zkq *q, int kind);
int record_alloc_multi(record *r, int nops, int path_len);
zoo_op_result_t *record_multi_results(record *r);
struct Stat *record_multi_stats(record *r);
int *record_multi_types(record *r);
char *record_multi_path(record *r, int i);
void record_free(record *r);
double monotonic_now(void);

#endif
