/* probe.c: core.probe, a plain TCP connect to a server, for connect's
 * messages (libzookeeper says nothing of a name that does not resolve or a
 * server that refuses: it retries until the connect timeout). */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include "probe.h"

/* core.probe(host, port, timeout_s) -> true | nil, why, detail
 * A plain TCP connect to each address of host:port, closed at once: how
 * connect tells a name that does not resolve ("unresolved") or a server
 * that refuses on every address ("refused") from one that is only slow
 * ("timeout", or "error" with errno's text). libzookeeper reports neither:
 * it retries every server until the connect timeout. Blocks at most
 * timeout_s per address (0: only what the kernel answers at once, as it
 * does for a loopback address). */
int probe_tcp(lua_State *L)
{
    const char *host = luaL_checkstring(L, 1);
    const char *port = luaL_checkstring(L, 2);
    double t = luaL_optnumber(L, 3, 0);
    struct addrinfo hints, *res, *ai;
    int rc, refused = 0, pending = 0, last = 0;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "unresolved");
        lua_pushstring(L, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return 3;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        int e = 0, fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                               ai->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            e = errno;
            if (e == EINPROGRESS) {
                struct pollfd p = { fd, POLLOUT, 0 };
                socklen_t len = sizeof(e);
                if (poll(&p, 1, t > 0 ? (int)(t * 1000) : 0) == 1)
                    (void)getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
                else
                    e = EINPROGRESS;
            }
        }
        close(fd);
        if (e == 0) {
            freeaddrinfo(res);
            lua_pushboolean(L, 1);
            return 1;
        }
        if (e == ECONNREFUSED)
            refused++;
        else if (e == EINPROGRESS)
            pending++;
        else
            last = e;
    }
    freeaddrinfo(res);
    lua_pushnil(L);
    if (refused && !pending && !last) {
        lua_pushliteral(L, "refused");
        lua_pushstring(L, strerror(ECONNREFUSED));
    } else if (pending) {
        lua_pushliteral(L, "timeout");
        lua_pushliteral(L, "no answer yet");
    } else {
        lua_pushliteral(L, "error");
        lua_pushstring(L, strerror(last));
    }
    return 3;
}
