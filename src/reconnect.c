/* reconnect.c: drop the connection libzookeeper has (or is making) and let
 * it connect again in the same session, its watches kept.
 *
 * Why: ZooKeeper 3.8.0's standalone server accepts connections while it
 * loads its data and leaves them open and unanswered (ZOOKEEPER-5051,
 * docs/RELIABILITY.md); libzookeeper then waits 2/3 of the session timeout
 * for the handshake before it tries again, and a short outage costs the
 * whole session. libzookeeper 3.8 has no call that drops a connection, but
 * zoo_set_servers does when the server it talks to is not in the new list
 * (update_addrs closes the socket). So: a list without it, then the real
 * list again. The handle, its session id, pending requests and watch
 * registrations stay; the reconnect re-sends the watches as after any
 * connection loss. An async request then wakes the IO thread, which may
 * sleep in poll() on the closed socket until its handshake deadline.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "reconnect.h"

/* A list without the server we talk to. libzookeeper 3.8.0 finds its
 * server in a list by address alone, port aside (measured: "127.0.0.1:1"
 * keeps a connection to 127.0.0.1:2181), so it must be another address:
 * a loopback one, where nothing listens on port 1. It is only connected to
 * if the IO thread runs between our two calls (refused at once, and the
 * second call moves it on anyway). */
static const char *nowhere(zhandle_t *zh)
{
    const char *cur = zoo_get_current_server(zh);
    return cur && strncmp(cur, "127.0.0.2:", 10) == 0 ? "127.0.0.3:1" : "127.0.0.2:1";
}

static void woken(int rc, const struct Stat *st, const void *data)
{
    (void)rc;
    (void)st;
    (void)data;
}

/* The real list again, chroot cut off. */
int reconnect_restore(zhandle_t *zh, const char *hosts)
{
    char *list, *slash;
    int rc;
    list = strdup(hosts);
    if (!list)
        return ZSYSTEMERROR;
    slash = strchr(list, '/');      /* the chroot is the handle's already */
    if (slash)
        *slash = '\0';
    rc = zoo_set_servers(zh, list);
    free(list);
    return rc;
}

int reconnect_now(zhandle_t *zh, const char *hosts)
{
    int rc;
    if (!zh || !hosts)
        return ZBADARGUMENTS;
    /* The real list must resolve now (a name server down in the outage):
     * unchanged, this call changes nothing. */
    if ((rc = reconnect_restore(zh, hosts)) != ZOK)
        return rc;
    if ((rc = zoo_set_servers(zh, nowhere(zh))) != ZOK)
        return rc;
    if ((rc = reconnect_restore(zh, hosts)) != ZOK)
        return ZRECONNECT_RESTORE;
    /* Queued until connected, sent after the handshake: its reply only
     * wakes us (heartbeat_heard counts every answer elsewhere). */
    return zoo_aexists(zh, "/", 0, woken, NULL);
}
