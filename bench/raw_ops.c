/* raw_ops.c: the baseline for bench/ops.lua: libzookeeper_mt used directly
 * from C. Prints the round trip of one exists() and the throughput of
 * exists() with `window` requests in flight.
 *   raw_ops HOSTS PATH SEQUENTIAL_N PIPELINED_N WINDOW */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <zookeeper/zookeeper.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int connected, in_flight, errors;
static long done;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh; (void)path; (void)ctx;
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) {
        pthread_mutex_lock(&mu);
        connected = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

static void on_stat(int rc, const struct Stat *st, const void *data)
{
    (void)st; (void)data;
    pthread_mutex_lock(&mu);
    if (rc != ZOK && rc != ZNONODE)
        errors++;
    in_flight--;
    done++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

int main(int argc, char **argv)
{
    zhandle_t *zh;
    long seq_n, pipe_n, window, sent;
    double t0, rtt, tput;
    if (argc != 6) {
        fprintf(stderr, "usage: raw_ops HOSTS PATH SEQUENTIAL_N PIPELINED_N WINDOW\n");
        return 2;
    }
    seq_n = atol(argv[3]);
    pipe_n = atol(argv[4]);
    window = atol(argv[5]);
    zoo_set_debug_level((ZooLogLevel)0);
    zh = zookeeper_init(argv[1], watcher, 10000, NULL, NULL, 0);
    /* the same host re-resolution window zkcoord uses (60 s) */
    zoo_set_servers_resolution_delay(zh, 60000);
    pthread_mutex_lock(&mu);
    while (!connected)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);

    /* one request at a time */
    t0 = now();
    for (sent = 0; sent < seq_n; sent++) {
        pthread_mutex_lock(&mu);
        in_flight++;
        pthread_mutex_unlock(&mu);
        zoo_aexists(zh, argv[2], 0, on_stat, NULL);
        pthread_mutex_lock(&mu);
        while (in_flight > 0)
            pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
    }
    rtt = (now() - t0) / seq_n;

    /* `window` in flight */
    done = 0;
    t0 = now();
    for (sent = 0; sent < pipe_n; sent++) {
        pthread_mutex_lock(&mu);
        while (in_flight >= window)
            pthread_cond_wait(&cv, &mu);
        in_flight++;
        pthread_mutex_unlock(&mu);
        zoo_aexists(zh, argv[2], 0, on_stat, NULL);
    }
    pthread_mutex_lock(&mu);
    while (in_flight > 0)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    tput = pipe_n / (now() - t0);
    printf("rtt_us=%.1f pipelined_ops_s=%.0f errors=%d\n", rtt * 1e6, tput, errors);
    zookeeper_close(zh);
    return errors ? 1 : 0;
}
