/* raw_bench.c: the baseline peer for bench/run.lua: libzookeeper_mt used
 * directly from C, the way a careful C programmer would write the standard
 * recipes (ZooKeeper's "Recipes and Solutions" page):
 *
 *   lock:    create <path>/lock-<seq> (ephemeral, sequential) and
 *            get_children(<path>) sent back to back, then wait for both:
 *            one round trip, since a session runs its requests in order
 *            and the children list already holds our node. Lowest node
 *            holds the lock; otherwise get()-watch the next lower node,
 *            wait for its event and list again. Release: delete our node
 *            and wait for the reply (2 round trips per uncontended cycle).
 *   rwlock:  the shared-lock recipe: read-<seq> is through when no lower
 *            write- node exists and watches the highest lower write- node;
 *            write-<seq> is through when lowest and watches its predecessor.
 *   counter: get (value, version), then set(value + 1, version); on
 *            ZBADVERSION count a failed compare-and-set and start over
 *            (2 round trips per uncontended increment, no backoff).
 *   client:  zoo_set_servers_resolution_delay(-1): no host re-resolution
 *            on every poll of the I/O thread (see main).
 *
 *   raw_bench SCENARIO HOSTS PATH DURATION_S [EXTRA]
 * prints one line of key=value pairs.
 *   raw_bench lock_cpu HOSTS PATH CYCLES
 * (bench/cpu.lua) runs CYCLES uncontended lock cycles after CYCLES/10 of
 * warm-up and prints the CPU they took on the calling thread
 * (CLOCK_THREAD_CPUTIME_ID) and in the whole process. Scenarios and the BENCH_SYNC /
 * BENCH_ID / BENCH_WARMUP environment contract: see bench/run.lua. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int connected;
static zhandle_t *zh;

/* ------------------------------------------------------------------ */
/* time */

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts;
    if (s <= 0)
        return;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ------------------------------------------------------------------ */
/* completions: every request gets a struct op; callbacks fill it in */

struct op {
    int done, rc;
    struct Stat stat;
    char value[256];
    int value_len;
    struct String_vector children;
};

static void finish(struct op *o, int rc)
{
    o->rc = rc;
    o->done = 1;
    pthread_cond_broadcast(&cv);
}

static void string_cb(int rc, const char *value, const void *data)
{
    struct op *o = (struct op *)data;
    pthread_mutex_lock(&mu);
    if (rc == ZOK && value)
        snprintf(o->value, sizeof o->value, "%s", value);
    finish(o, rc);
    pthread_mutex_unlock(&mu);
}

static void children_cb(int rc, const struct String_vector *sv, const void *data)
{
    struct op *o = (struct op *)data;
    int i;
    pthread_mutex_lock(&mu);
    o->children.count = 0;
    o->children.data = NULL;
    if (rc == ZOK && sv && sv->count > 0) {
        o->children.count = sv->count;
        o->children.data = calloc((size_t)sv->count, sizeof(char *));
        for (i = 0; i < sv->count; i++)
            o->children.data[i] = strdup(sv->data[i]);
    }
    finish(o, rc);
    pthread_mutex_unlock(&mu);
}

static void stat_cb(int rc, const struct Stat *st, const void *data)
{
    struct op *o = (struct op *)data;
    pthread_mutex_lock(&mu);
    if (rc == ZOK && st)
        o->stat = *st;
    finish(o, rc);
    pthread_mutex_unlock(&mu);
}

static void data_cb(int rc, const char *value, int len, const struct Stat *st,
                    const void *data)
{
    struct op *o = (struct op *)data;
    pthread_mutex_lock(&mu);
    o->value_len = 0;
    if (rc == ZOK) {
        if (value && len > 0) {
            if (len > (int)sizeof o->value - 1)
                len = (int)sizeof o->value - 1;
            memcpy(o->value, value, (size_t)len);
            o->value_len = len;
        }
        if (st)
            o->stat = *st;
    }
    o->value[o->value_len] = 0;
    finish(o, rc);
    pthread_mutex_unlock(&mu);
}

static void void_cb(int rc, const void *data)
{
    struct op *o = (struct op *)data;
    pthread_mutex_lock(&mu);
    finish(o, rc);
    pthread_mutex_unlock(&mu);
}

static int wait_op(struct op *o)
{
    pthread_mutex_lock(&mu);
    while (!o->done)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return o->rc;
}

static void free_children(struct op *o)
{
    int i;
    for (i = 0; i < o->children.count; i++)
        free(o->children.data[i]);
    free(o->children.data);
    o->children.data = NULL;
    o->children.count = 0;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "raw_bench: %s: %s\n", what, zerror(rc));
    printf("error=%s\n", zerror(rc));
    fflush(stdout);
    exit(1);
}

/* a watch event flag, set by the watcher thread */
struct flag {
    int set;
};

static void flag_watcher(zhandle_t *z, int type, int state, const char *path, void *ctx)
{
    (void)z; (void)type; (void)state; (void)path;
    pthread_mutex_lock(&mu);
    ((struct flag *)ctx)->set = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void session_watcher(zhandle_t *z, int type, int state, const char *path, void *ctx)
{
    (void)z; (void)path; (void)ctx;
    if (type == ZOO_SESSION_EVENT) {
        pthread_mutex_lock(&mu);
        connected = state == ZOO_CONNECTED_STATE ? 1 : (state == ZOO_EXPIRED_SESSION_STATE ? -1 : 0);
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

/* create a persistent node if missing */
static void ensure(const char *path, const char *data)
{
    struct op o = {0};
    int rc = zoo_acreate(zh, path, data, data ? (int)strlen(data) : -1,
                         &ZOO_OPEN_ACL_UNSAFE, 0, string_cb, &o);
    if (rc != ZOK)
        die("create", rc);
    rc = wait_op(&o);
    if (rc != ZOK && rc != ZNODEEXISTS)
        die("create", rc);
}

/* ------------------------------------------------------------------ */
/* lock and rwlock */

static long seq_of(const char *name)
{
    size_t n = strlen(name);
    return n >= 10 ? atol(name + n - 10) : -1;
}

static int is_write(const char *name)
{
    return strncmp(name, "write-", 6) == 0;
}

/* Acquires: prefix is "lock-", "read-" or "write-". Writes our node's full
 * path into `node`. Readers wait only for writers. */
static void acquire(const char *parent, const char *prefix, char *node, size_t node_len)
{
    char create_path[512];
    struct op c = {0}, ch = {0};
    const char *name;
    long mine;
    int rc, reader = strcmp(prefix, "read-") == 0;

    snprintf(create_path, sizeof create_path, "%s/%s", parent, prefix);
    /* pipelined: both requests are on the wire before we wait for either */
    rc = zoo_acreate(zh, create_path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                     ZOO_EPHEMERAL | ZOO_SEQUENCE, string_cb, &c);
    if (rc != ZOK)
        die("acreate", rc);
    rc = zoo_aget_children(zh, parent, 0, children_cb, &ch);
    if (rc != ZOK)
        die("aget_children", rc);
    if ((rc = wait_op(&c)) != ZOK)
        die("create lock node", rc);
    if ((rc = wait_op(&ch)) != ZOK)
        die("get_children", rc);
    snprintf(node, node_len, "%s", c.value);
    name = strrchr(node, '/') + 1;
    mine = seq_of(name);

    for (;;) {
        const char *pred = NULL;
        long pred_seq = -1;
        int i;
        char pred_path[512];
        struct flag fl = {0};
        struct op e = {0};

        for (i = 0; i < ch.children.count; i++) {
            const char *n = ch.children.data[i];
            long s = seq_of(n);
            if (s >= mine)
                continue;
            if (reader && !is_write(n))
                continue;
            if (s > pred_seq) {
                pred_seq = s;
                pred = n;
            }
        }
        if (!pred) {
            free_children(&ch);
            return;
        }
        snprintf(pred_path, sizeof pred_path, "%s/%s", parent, pred);
        free_children(&ch);
        /* get() with a watch, as Curator does: on a node that is already
         * gone it leaves no watch behind (exists() would leave one). */
        rc = zoo_awget(zh, pred_path, flag_watcher, &fl, data_cb, &e);
        if (rc != ZOK)
            die("awget", rc);
        rc = wait_op(&e);
        if (rc == ZOK) {
            pthread_mutex_lock(&mu);
            while (!fl.set)
                pthread_cond_wait(&cv, &mu);
            pthread_mutex_unlock(&mu);
        } else if (rc != ZNONODE) {
            die("get", rc);
        }
        memset(&ch, 0, sizeof ch);
        rc = zoo_aget_children(zh, parent, 0, children_cb, &ch);
        if (rc != ZOK)
            die("aget_children", rc);
        if ((rc = wait_op(&ch)) != ZOK)
            die("get_children", rc);
    }
}

static void release(const char *node)
{
    struct op d = {0};
    int rc = zoo_adelete(zh, node, -1, void_cb, &d);
    if (rc != ZOK)
        die("adelete", rc);
    if ((rc = wait_op(&d)) != ZOK)
        die("delete", rc);
}

/* ------------------------------------------------------------------ */
/* counter: get + versioned set */

static long failed_cas;

static void increment(const char *path)
{
    for (;;) {
        struct op g = {0}, s = {0};
        char buf[32];
        long v;
        int rc = zoo_aget(zh, path, 0, data_cb, &g);
        if (rc != ZOK)
            die("aget", rc);
        if ((rc = wait_op(&g)) != ZOK)
            die("get", rc);
        v = atol(g.value);
        snprintf(buf, sizeof buf, "%ld", v + 1);
        rc = zoo_aset(zh, path, buf, (int)strlen(buf), g.stat.version, stat_cb, &s);
        if (rc != ZOK)
            die("aset", rc);
        rc = wait_op(&s);
        if (rc == ZOK)
            return;
        if (rc != ZBADVERSION)
            die("set", rc);
        failed_cas++;
    }
}

/* ------------------------------------------------------------------ */
/* measurement */

static double *lat;
static long nlat, caplat;

static void record(double secs)
{
    if (nlat == caplat) {
        caplat = caplat ? caplat * 2 : 65536;
        lat = realloc(lat, (size_t)caplat * sizeof *lat);
        if (!lat) {
            perror("realloc");
            exit(1);
        }
    }
    lat[nlat++] = secs;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double p)
{
    long i;
    if (nlat == 0)
        return 0;
    i = (long)(p * (double)(nlat - 1) + 0.5);
    return lat[i] * 1000.0;
}

static void rss(long *rss_kb, long *hwm_kb)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    *rss_kb = *hwm_kb = 0;
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0)
            *rss_kb = atol(line + 6);
        else if (strncmp(line, "VmHWM:", 6) == 0)
            *hwm_kb = atol(line + 6);
    }
    fclose(f);
}

/* The driver's start barrier: announce "ready", wait for the go file,
 * which holds the wall-clock start time. Returns the monotonic start. */
static double barrier(void)
{
    const char *dir = getenv("BENCH_SYNC"), *id = getenv("BENCH_ID");
    char p[512];
    FILE *f;
    double t = 0, deadline = mono() + 300;
    if (!dir || !*dir)
        return mono();
    snprintf(p, sizeof p, "%s/ready.%s", dir, id ? id : "0");
    f = fopen(p, "w");
    if (f)
        fclose(f);
    snprintf(p, sizeof p, "%s/go", dir);
    while (mono() < deadline) {
        f = fopen(p, "r");
        if (f) {
            int ok = fscanf(f, "%lf", &t) == 1;
            fclose(f);
            if (ok)
                break;
        }
        sleep_s(0.002);
    }
    sleep_s(t - wall());
    return mono();
}

enum scenario { LOCK_UNC, LOCK_CONT, RWLOCK, COUNTER, HOLD, LOCK_CPU };

static double cpu_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* lock_cpu: `cycles` acquire+release cycles, no timing inside the loop
 * (the same loop as bench/cpu.lua's zkcoord side). */
static void lock_cpu(const char *path, long cycles)
{
    char node[512];
    long i;
    double t0, c0, p0;
    ensure(path, NULL);
    for (i = 0; i < cycles / 10; i++) {
        acquire(path, "lock-", node, sizeof node);
        release(node);
    }
    t0 = mono();
    c0 = cpu_clock(CLOCK_THREAD_CPUTIME_ID);
    p0 = cpu_clock(CLOCK_PROCESS_CPUTIME_ID);
    for (i = 0; i < cycles; i++) {
        acquire(path, "lock-", node, sizeof node);
        release(node);
    }
    printf("cycles=%ld secs=%.6f thread_cpu_s=%.6f process_cpu_s=%.6f\n", cycles, mono() - t0,
           cpu_clock(CLOCK_THREAD_CPUTIME_ID) - c0, cpu_clock(CLOCK_PROCESS_CPUTIME_ID) - p0);
    fflush(stdout);
}

/* one loop of the scenario on `path` until `end` (monotonic); returns ops */
static long run(enum scenario sc, const char *path, double end, int read_pct,
                unsigned *rng, long *reads, long *writes, int measure)
{
    char node[512];
    long ops = 0;
    volatile long critical = 0;
    while (mono() < end) {
        double t0 = mono();
        if (sc == COUNTER) {
            increment(path);
        } else {
            const char *prefix = "lock-";
            int is_read = 0;
            if (sc == RWLOCK) {
                is_read = (int)(rand_r(rng) % 100) < read_pct;
                prefix = is_read ? "read-" : "write-";
            }
            acquire(path, prefix, node, sizeof node);
            critical++;   /* the tiny critical section */
            release(node);
            if (is_read)
                (*reads)++;
            else if (sc == RWLOCK)
                (*writes)++;
        }
        if (mono() <= end) {
            ops++;
            if (measure)
                record(mono() - t0);
        }
    }
    return ops;
}

int main(int argc, char **argv)
{
    enum scenario sc;
    const char *scen, *hosts, *path, *w;
    double duration, warmup, t0, t1;
    long ops, reads = 0, writes = 0, rss_kb, hwm_kb;
    int read_pct = 90;
    unsigned rng = (unsigned)getpid() * 2654435761u;
    char warm_path[512];

    if (argc < 5) {
        fprintf(stderr, "usage: raw_bench SCENARIO HOSTS PATH DURATION_S [EXTRA]\n");
        return 2;
    }
    scen = argv[1];
    hosts = argv[2];
    path = argv[3];
    duration = atof(argv[4]);
    if (!strcmp(scen, "lock_uncontended"))
        sc = LOCK_UNC;
    else if (!strcmp(scen, "lock_contended"))
        sc = LOCK_CONT;
    else if (!strcmp(scen, "rwlock"))
        sc = RWLOCK;
    else if (!strcmp(scen, "counter"))
        sc = COUNTER;
    else if (!strcmp(scen, "hold"))
        sc = HOLD;
    else if (!strcmp(scen, "lock_cpu"))
        sc = LOCK_CPU;
    else {
        printf("error=unsupported_scenario\n");
        return 3;
    }
    if (sc == RWLOCK && argc > 5)
        read_pct = atoi(argv[5]);
    w = getenv("BENCH_WARMUP");
    warmup = w ? atof(w) : 0.5;

    zoo_set_debug_level((ZooLogLevel)0);
    zh = zookeeper_init(hosts, session_watcher, 10000, NULL, NULL, 0);
    if (!zh) {
        printf("error=init\n");
        return 1;
    }
    /* By default libzookeeper re-resolves the host list every time its I/O
     * thread polls (getaddrinfo: a netlink socket, /dev/urandom, ... some
     * ten system calls per wakeup). A careful C program turns that off
     * (-1: resolve again only after a connection loss); worth 20-40% here.
     * BENCH_RAW_RESOLVE_DELAY_MS=0 restores the library's default. */
    w = getenv("BENCH_RAW_RESOLVE_DELAY_MS");
    zoo_set_servers_resolution_delay(zh, w && *w ? atoi(w) : -1);
    pthread_mutex_lock(&mu);
    {
        double deadline = mono() + 30;
        while (connected != 1 && mono() < deadline) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&cv, &mu, &ts);
        }
    }
    pthread_mutex_unlock(&mu);
    if (connected != 1) {
        printf("error=connect\n");
        return 1;
    }

    if (sc == LOCK_CPU) {
        lock_cpu(path, atol(argv[4]));
        zookeeper_close(zh);
        return 0;
    }

    if (sc == HOLD) {
        char node[512];
        ensure(path, NULL);
        acquire(path, "lock-", node, sizeof node);
        sleep_s(0.5);
        rss(&rss_kb, &hwm_kb);
        printf("rss_kb=%ld hwm_kb=%ld\n", rss_kb, hwm_kb);
        fflush(stdout);
        zookeeper_close(zh);
        return 0;
    }

    ensure(path, sc == COUNTER ? "0" : NULL);
    if (warmup > 0) {
        /* the same work on a private path: warms caches, not the contention */
        snprintf(warm_path, sizeof warm_path, "%s-warm-%s", path,
                 getenv("BENCH_ID") ? getenv("BENCH_ID") : "0");
        ensure(warm_path, sc == COUNTER ? "0" : NULL);
        run(sc == LOCK_CONT ? LOCK_UNC : sc, warm_path, mono() + warmup, read_pct, &rng,
            &reads, &writes, 0);
        reads = writes = 0;
        failed_cas = 0;
    }
    t0 = barrier();
    ops = run(sc, path, t0 + duration, read_pct, &rng, &reads, &writes, 1);
    t1 = mono();
    if (t1 > t0 + duration)
        t1 = t0 + duration;
    qsort(lat, (size_t)nlat, sizeof *lat, cmp_double);
    rss(&rss_kb, &hwm_kb);
    printf("ops=%ld secs=%.3f rate=%.1f p50_ms=%.3f p99_ms=%.3f", ops, t1 - t0,
           ops / (t1 - t0), pct(0.50), pct(0.99));
    if (sc == COUNTER)
        printf(" failed_cas=%ld", failed_cas);
    if (sc == RWLOCK)
        printf(" reads=%ld writes=%ld", reads, writes);
    printf(" rss_kb=%ld hwm_kb=%ld\n", rss_kb, hwm_kb);
    fflush(stdout);
    zookeeper_close(zh);
    return 0;
}
