/* tls.c: core.tls_check, a TLS handshake of our own with the files that
 * zookeeper_init_ssl takes, set up as libzookeeper 3.8 sets them up
 * (init_ssl_for_socket): the CA file and the system's CAs verify the
 * server, the client certificate chain and its PEM key, the key's password.
 * libzookeeper says nothing of a file that does not load or a handshake
 * that fails: it tries again until the connect timeout. Connect checks the
 * files with this before a session, and asks a server with it why a
 * session does not connect. Only in a core built with ZKCOORD_TLS. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include "tls.h"

#ifdef HAVE_OPENSSL_H
#include <openssl/err.h>
#include <openssl/ssl.h>

/* OpenSSL's reason for the last failure, "what: reason". */
static void push_ssl_error(lua_State *L, const char *what)
{
    char buf[256];
    unsigned long e = ERR_peek_last_error();
    if (e) {
        ERR_error_string_n(e, buf, sizeof(buf));
        lua_pushfstring(L, "%s: %s", what, buf);
    } else {
        lua_pushstring(L, what);
    }
    ERR_clear_error();
}

/* A file that cannot be read: OpenSSL would only say "system lib". */
static int unreadable(lua_State *L, const char *what, const char *path)
{
    if (access(path, R_OK) == 0)
        return 0;
    lua_pushfstring(L, "cannot read the %s %s: %s", what, path, strerror(errno));
    return 1;
}

/* `system_cas`: also the system's CAs, as libzookeeper does; a check of
 * the files alone skips them (parsing the system's bundle is most of its
 * cost: 17 ms of 17.5 here). */
static SSL_CTX *load_ctx(lua_State *L, const char *ca, const char *cert,
                         const char *key, const char *passwd, int system_cas)
{
    SSL_CTX *ctx;
    const char *what = "cannot make a TLS context";
    if (unreadable(L, "CA file (ca)", ca) || unreadable(L, "client certificate (certfile)", cert)
            || unreadable(L, "client key (keyfile)", key))
        return NULL;
    ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        goto fail;
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    what = "cannot load the CA file";
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
        goto fail;
    what = "cannot load the system's CAs";
    if (system_cas && SSL_CTX_set_default_verify_paths(ctx) != 1)
        goto fail;
    what = "cannot load the client certificate (certfile)";
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        goto fail;
    SSL_CTX_set_default_passwd_cb_userdata(ctx, (void *)passwd);
    what = "cannot load the client key (keyfile; keyfile_password if it is encrypted)";
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        goto fail;
    what = "the client key does not match the client certificate";
    if (SSL_CTX_check_private_key(ctx) != 1)
        goto fail;
    SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
    return ctx;
fail:
    push_ssl_error(L, what);
    if (ctx)
        SSL_CTX_free(ctx);
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits for fd until the deadline: 1 ready, 0 not (time is up). */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        struct pollfd p = { fd, events, 0 };
        double left = deadline - now_s();
        int rc;
        if (left <= 0)
            return 0;
        rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc > 0)
            return 1;
        if (rc == 0)
            return 0;
        if (errno != EINTR)
            return 1;       /* the next SSL call reports it */
    }
}

static int tcp_connect(const char *host, const char *port, double deadline)
{
    struct addrinfo hints, *res, *ai;
    int fd = -1;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return -1;
    for (ai = res; ai; ai = ai->ai_next) {
        int e = 0;
        socklen_t len = sizeof(e);
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline)
                && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) == 0 && e == 0)
            break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

/* One SSL call made until it is done, fails or the deadline passes:
 * rc > 0 done, 0 time is up, < 0 failed (OpenSSL's error queue says why,
 * or the peer closed: *closed). */
static int ssl_step(SSL *ssl, int fd, double deadline, int (*op)(SSL *, void *, int),
                    void *buf, int n, int *closed)
{
    for (;;) {
        int rc = op(ssl, buf, n);
        int e;
        if (rc > 0)
            return rc;
        e = SSL_get_error(ssl, rc);
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
            *closed = 1;
            return -1;
        }
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            return -1;
        if (!wait_fd(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline))
            return 0;
    }
}

static int op_connect(SSL *ssl, void *buf, int n) { (void)buf; (void)n; return SSL_connect(ssl); }
static int op_write(SSL *ssl, void *buf, int n) { return SSL_write(ssl, buf, n); }
static int op_read(SSL *ssl, void *buf, int n) { return SSL_read(ssl, buf, n); }

/* The handshake with host:port, then "ruok": with TLS 1.3 the server
 * judges our certificate after our side of the handshake is done, and
 * its alert comes with the first read. Pushes true, or nil, why, detail. */
static int handshake(lua_State *L, SSL_CTX *ctx, const char *host, const char *port,
                     double timeout)
{
    double deadline = now_s() + timeout;
    char buf[64];
    int closed = 0, rc, fd = tcp_connect(host, port, deadline);
    SSL *ssl;
    if (fd < 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "unreachable");
        lua_pushfstring(L, "no TCP connection to %s:%s", host, port);
        return 3;
    }
    ssl = SSL_new(ctx);
    if (!ssl) {
        close(fd);
        lua_pushnil(L);
        lua_pushliteral(L, "files");
        push_ssl_error(L, "cannot make a TLS connection");
        return 3;
    }
    SSL_set_fd(ssl, fd);
    rc = ssl_step(ssl, fd, deadline, op_connect, NULL, 0, &closed);
    if (rc > 0)
        rc = ssl_step(ssl, fd, deadline, op_write, "ruok", 4, &closed);
    if (rc > 0)
        rc = ssl_step(ssl, fd, deadline, op_read, buf, sizeof(buf), &closed);
    if (rc > 0 || (closed && SSL_is_init_finished(ssl))) {
        /* an answer, or a close after a finished handshake: TLS is fine */
        lua_pushboolean(L, 1);
        rc = 1;
    } else if (rc == 0) {
        lua_pushnil(L);
        lua_pushliteral(L, "unreachable");
        lua_pushfstring(L, "no TLS answer from %s:%s within %f s", host, port, timeout);
        rc = 3;
    } else {
        char what[300];
        long v = SSL_get_verify_result(ssl);
        lua_pushnil(L);
        lua_pushliteral(L, "handshake");
        if (v != X509_V_OK) {
            lua_pushfstring(L, "%s:%s: server certificate not trusted: %s", host, port,
                            X509_verify_cert_error_string(v));
        } else if (closed) {
            lua_pushfstring(L, "%s:%s closed the connection during the TLS handshake "
                            "(not a TLS port?)", host, port);
        } else {
            snprintf(what, sizeof(what), "%s:%s: TLS handshake failed", host, port);
            push_ssl_error(L, what);
        }
        rc = 3;
    }
    SSL_free(ssl);
    close(fd);
    ERR_clear_error();
    return rc;
}

/* handshake() with SIGPIPE blocked in this thread: OpenSSL writes with
 * write(), and a server that refused us may have closed by the time
 * "ruok" goes out. A SIGPIPE that this raised is taken off the thread. */
static int handshake_nosigpipe(lua_State *L, SSL_CTX *ctx, const char *host,
                               const char *port, double timeout)
{
    sigset_t pipe_set, old, pending;
    int n, was_pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    was_pending = sigismember(&pending, SIGPIPE);
    n = handshake(L, ctx, host, port, timeout);
    sigpending(&pending);
    if (!was_pending && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = { 0, 0 };
        (void)sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return n;
}

/* core.tls_check(ca, cert, key, passwd|nil [, host, port, timeout_s])
 *   -> true | nil, why, detail
 * why: "files" (a file does not load; detail names it and OpenSSL's reason),
 * "handshake" (the server or we refused the other: detail says why),
 * "unreachable" (no TCP connection or no answer in time: no verdict). */
int tls_check(lua_State *L)
{
    const char *ca = luaL_checkstring(L, 1);
    const char *cert = luaL_checkstring(L, 2);
    const char *key = luaL_checkstring(L, 3);
    const char *passwd = luaL_optstring(L, 4, NULL);
    const char *host = luaL_optstring(L, 5, NULL);
    const char *port = luaL_optstring(L, 6, "2181");
    double timeout = luaL_optnumber(L, 7, 1);
    SSL_CTX *ctx;
    int n;
    ERR_clear_error();
    ctx = load_ctx(L, ca, cert, key, passwd, host != NULL);
    if (!ctx) {
        lua_pushnil(L);
        lua_insert(L, -2);
        lua_pushliteral(L, "files");
        lua_insert(L, -2);
        return 3;
    }
    if (!host) {
        SSL_CTX_free(ctx);
        lua_pushboolean(L, 1);
        return 1;
    }
    n = handshake_nosigpipe(L, ctx, host, port, timeout);
    SSL_CTX_free(ctx);
    return n;
}

#endif
