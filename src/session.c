/* session.c: one ZooKeeper session (a zhandle_t of libzookeeper_mt) and the
 * async operations issued on it.
 *
 * Every operation returns a request id at once; its reply arrives later as a
 * record on the client's queue. A watch set by a request reports under the
 * same id. Nothing here waits on the network except close(), which is
 * zookeeper_close's documented cost (up to ~3 s to send the close request,
 * then it joins the client threads).
 *
 * Invariants: `zh` is touched only on the Lua thread that opened it, and only
 * by the process that opened it (a fork-copied handle has no threads and
 * crashes zookeeper_close). The session context given to libzookeeper lives
 * until zookeeper_close has returned, so callbacks never see it freed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert.h"
#include "heartbeat.h"
#include "sasl.h"
#include "session.h"

typedef struct session_ctx {
    zkq *q;
    double serial;
    heartbeat hb;        /* when the server last answered (heartbeat.c) */
    inflight fl;         /* requests handed to libzookeeper, not yet answered */
#ifdef HAVE_CYRUS_SASL_H
    zk_sasl *sasl;       /* zookeeper_init_sasl's parameters: live as long as the handle */
#endif
} session_ctx;

typedef struct session {
    zhandle_t *zh;
    session_ctx *ctx;
    pid_t pid;
    unsigned fork_gen;   /* fork_generation when opened */
} session;

/* Bumped in every child after fork (pthread_atfork): comparing it costs no
 * syscall, unlike getpid() on every request. */
static volatile unsigned fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    fork_generation++;
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

#define SESSION_MT "zkcoord.session"

/* ---- ZooKeeper-thread callbacks ------------------------------------------- */

/* ZK THREAD: session events of the handle; pushes a record, nothing else. */
static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    session_ctx *sc = ctx;
    record *r;
    (void)zh;
    (void)path;
    if (type != ZOO_SESSION_EVENT)
        return;
    if (state == ZOO_CONNECTED_STATE)
        heartbeat_connected(&sc->hb);
    else
        heartbeat_disconnected(&sc->hb);
    r = record_new(sc->q, REC_SESSION);
    if (!r)
        return;
    r->id = sc->serial;
    r->type = type;
    r->state = state;
    queue_push(sc->q, r);
}

/* ZK THREAD: a watch set by request `ctx` (its id) fired. Session events are
 * also copied to every per-request watcher; the handle's watcher reports
 * those once, so they are dropped here. */
static void watch_fired(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    session_ctx *sc = (session_ctx *)zoo_get_context(zh);
    record *r;
    if (type == ZOO_SESSION_EVENT || !sc)
        return;
    r = record_new(sc->q, REC_WATCH);
    if (!r)
        return;
    r->id = (double)(intptr_t)ctx;
    r->type = type;
    r->state = state;
    if (path) {
        r->value = strdup(path);
        r->value_len = r->value ? (int)strlen(path) : -1;
    }
    queue_push(sc->q, r);
}

/* ZK THREAD (all completions below): copy what libzookeeper lends us into
 * the record it carries, then push it (reply_push: the answer also moves
 * the session's clock). */
static void reply_push(record *r)
{
    inflight_remove(r);
    if (r->hb)
        heartbeat_heard(r->hb, r->sent, r->rc);
    queue_push(r->queue, r);
}

static void set_stat(record *r, const struct Stat *st)
{
    if (st) {
        r->stat = *st;
        r->has_stat = 1;
    }
}

static void set_string(record *r, const char *s, int len)
{
    if (!s || len < 0)
        return;
    r->value = malloc((size_t)len + 1);
    if (!r->value)
        return;
    memcpy(r->value, s, (size_t)len);
    r->value[len] = '\0';
    r->value_len = len;
}

static void done_void(int rc, const void *data)
{
    record *r = (record *)data;
    r->rc = rc;
    reply_push(r);
}

static void done_stat(int rc, const struct Stat *st, const void *data)
{
    record *r = (record *)data;
    r->rc = rc;
    set_stat(r, st);
    reply_push(r);
}

static void done_data(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    record *r = (record *)data;
    r->rc = rc;
    if (rc == ZOK)
        set_string(r, value ? value : "", value ? len : 0);
    set_stat(r, st);
    reply_push(r);
}

static void done_string(int rc, const char *value, const void *data)
{
    record *r = (record *)data;
    r->rc = rc;
    if (value)
        set_string(r, value, (int)strlen(value));
    reply_push(r);
}

static void done_string_stat(int rc, const char *value, const struct Stat *st, const void *data)
{
    record *r = (record *)data;
    r->rc = rc;
    if (value)
        set_string(r, value, (int)strlen(value));
    set_stat(r, st);
    reply_push(r);
}

static void done_strings_stat(int rc, const struct String_vector *sv, const struct Stat *st,
                              const void *data)
{
    record *r = (record *)data;
    int i;
    r->rc = rc;
    if (rc == ZOK && sv && sv->count > 0) {
        r->strings.data = calloc((size_t)sv->count, sizeof(char *));
        if (r->strings.data) {
            for (i = 0; i < sv->count; i++) {
                r->strings.data[i] = strdup(sv->data[i]);
                if (!r->strings.data[i])
                    break;
            }
            r->strings.count = i;
        }
    }
    set_stat(r, st);
    reply_push(r);
}

static void done_acl(int rc, struct ACL_vector *acl, struct Stat *st, const void *data)
{
    record *r = (record *)data;
    int i;
    r->rc = rc;
    if (rc == ZOK && acl && acl->count > 0) {
        r->acl.data = calloc((size_t)acl->count, sizeof(struct ACL));
        if (r->acl.data) {
            for (i = 0; i < acl->count; i++) {
                r->acl.data[i].perms = acl->data[i].perms;
                r->acl.data[i].id.scheme = strdup(acl->data[i].id.scheme);
                r->acl.data[i].id.id = strdup(acl->data[i].id.id);
            }
            r->acl.count = acl->count;
        }
    }
    set_stat(r, st);
    reply_push(r);
}

/* ---- Lua side --------------------------------------------------------------- */

static session *check_session(lua_State *L)
{
    session *s = luaL_checkudata(L, 1, SESSION_MT);
    if (s->zh && s->fork_gen != fork_generation)
        luaL_error(L, "zkcoord: this session was opened by process %d and cannot be used "
                      "by process %d after fork(); open sessions after fork "
                      "(init_worker_by_lua, never init_by_lua)", (int)s->pid, (int)getpid());
    return s;
}

/* Returns the open session at index 1, or pushes nil, ZCLOSING and returns NULL. */
static session *open_session(lua_State *L)
{
    session *s = check_session(L);
    if (!s->zh) {
        lua_pushnil(L);
        lua_pushinteger(L, ZCLOSING);
        return NULL;
    }
    return s;
}

static const char *opt_data(lua_State *L, int idx, int *len)
{
    size_t n;
    const char *p;
    if (lua_isnoneornil(L, idx)) {
        *len = -1;
        return NULL;
    }
    p = luaL_checklstring(L, idx, &n);
    luaL_argcheck(L, n <= INT_MAX, idx, "data too large");
    *len = (int)n;
    return p;
}

/* ZooKeeper's versions are int32 and modes a few constants: a plain cast
 * would wrap 2^32 to version 0. Range first: casting NaN or a huge double
 * to int is undefined. */
static int valid_version(lua_Number v)
{
    return v >= -1 && v <= INT32_MAX && v == (lua_Number)(int)v;
}

static int valid_mode(lua_Number m)
{
    return m == ZOO_PERSISTENT || m == ZOO_EPHEMERAL || m == ZOO_PERSISTENT_SEQUENTIAL
        || m == ZOO_EPHEMERAL_SEQUENTIAL || m == ZOO_CONTAINER
        || m == ZOO_PERSISTENT_WITH_TTL || m == ZOO_PERSISTENT_SEQUENTIAL_WITH_TTL;
}

#define VERSION_RANGE "version must be an integer from -1 to 2147483647"
#define MODE_KNOWN "mode must be one of the create modes (core.c)"

static int opt_version(lua_State *L, int idx)
{
    lua_Number v;
    if (lua_isnoneornil(L, idx))
        return -1;
    v = luaL_checknumber(L, idx);
    luaL_argcheck(L, valid_version(v), idx, VERSION_RANGE);
    return (int)v;
}

static record *new_request(lua_State *L, session *s, int op)
{
    record *r = record_new(s->ctx->q, REC_REPLY);
    if (!r)
        luaL_error(L, "out of memory");
    r->op = op;
    r->id = s->ctx->q->next_id++;
    r->hb = &s->ctx->hb;
    r->sent = monotonic_now();
    /* Linked before libzookeeper may complete it (session_destroy). */
    inflight_add(&s->ctx->fl, r);
    return r;
}

/* Pushes the request id, or frees the record and pushes nil, rc. A handle
 * whose session ended refuses every request with ZINVALIDSTATE, before the
 * session event reaches Lua: name the reason instead. */
static int submitted(lua_State *L, session *s, record *r, int rc)
{
    if (rc == ZINVALIDSTATE) {
        int st = zoo_state(s->zh);
        if (st == ZOO_EXPIRED_SESSION_STATE)
            rc = ZSESSIONEXPIRED;
        else if (st == ZOO_AUTH_FAILED_STATE)
            rc = ZAUTHFAILED;
    }
    if (rc != ZOK) {
        inflight_remove(r);
        record_free(r);
        lua_pushnil(L);
        lua_pushinteger(L, rc);
        return 2;
    }
    zk_pushid(L, r->id);
    return 1;
}

static int is_ttl_mode(int mode)
{
    return mode == ZOO_PERSISTENT_WITH_TTL || mode == ZOO_PERSISTENT_SEQUENTIAL_WITH_TTL;
}

/* s:create(path, data|nil, acl|nil, mode, ttl_ms|nil) */
static int session_create(lua_State *L)
{
    session *s = open_session(L);
    const char *path = luaL_checkstring(L, 2);
    int len, rc, mode;
    const char *data = opt_data(L, 3, &len);
    struct ACL_vector acl;
    record *r;
    int64_t ttl;
    lua_Number ttl_ms, mode_n;
    if (!s)
        return 2;
    mode_n = luaL_optnumber(L, 5, 0);
    luaL_argcheck(L, valid_mode(mode_n), 5, MODE_KNOWN);
    mode = (int)mode_n;
    ttl_ms = luaL_optnumber(L, 6, -1);
    /* Range first: casting NaN or a huge double to int64_t is undefined. */
    luaL_argcheck(L, ttl_ms >= -1 && ttl_ms <= 1099511627775.0, 6, "ttl out of range");
    ttl = (int64_t)ttl_ms;
    convert_check_acl(L, 4, &acl);
    r = new_request(L, s, OP_CREATE);
    if (is_ttl_mode(mode))
        rc = zoo_acreate2_ttl(s->zh, path, data, len, acl.data ? &acl : &ZOO_OPEN_ACL_UNSAFE,
                              mode, ttl, done_string_stat, r);
    else
        rc = zoo_acreate2(s->zh, path, data, len, acl.data ? &acl : &ZOO_OPEN_ACL_UNSAFE,
                          mode, done_string_stat, r);
    convert_free_acl(&acl);
    return submitted(L, s, r, rc);
}

/* s:delete(path, version) */
static int session_delete(lua_State *L)
{
    session *s = open_session(L);
    const char *path = luaL_checkstring(L, 2);
    int version = opt_version(L, 3);
    record *r;
    if (!s)
        return 2;
    r = new_request(L, s, OP_DELETE);
    return submitted(L, s, r, zoo_adelete(s->zh, path, version, done_void, r));
}

#define WATCH_CTX(r) ((void *)(intptr_t)(r)->id)

/* s:exists(path, watch), s:get(path, watch), s:children(path, watch): the
 * three reads that may leave a watch share everything but the call. */
static int watched_read(lua_State *L, int op)
{
    session *s = open_session(L);
    const char *path = luaL_checkstring(L, 2);
    watcher_fn w = lua_toboolean(L, 3) ? watch_fired : NULL;
    record *r;
    int rc;
    if (!s)
        return 2;
    r = new_request(L, s, op);
    if (op == OP_EXISTS)
        rc = zoo_awexists(s->zh, path, w, WATCH_CTX(r), done_stat, r);
    else if (op == OP_GET)
        rc = zoo_awget(s->zh, path, w, WATCH_CTX(r), done_data, r);
    else
        rc = zoo_awget_children2(s->zh, path, w, WATCH_CTX(r), done_strings_stat, r);
    return submitted(L, s, r, rc);
}

static int session_exists(lua_State *L)
{
    return watched_read(L, OP_EXISTS);
}

static int session_get(lua_State *L)
{
    return watched_read(L, OP_GET);
}

/* s:set(path, data, version) */
static int session_set(lua_State *L)
{
    session *s = open_session(L);
    const char *path = luaL_checkstring(L, 2);
    int len;
    const char *data = opt_data(L, 3, &len);
    int version = opt_version(L, 4);
    record *r;
    if (!s)
        return 2;
    r = new_request(L, s, OP_SET);
    return submitted(L, s, r, zoo_aset(s->zh, path, data, len, version, done_stat, r));
}

static int session_children(lua_State *L)
{
    return watched_read(L, OP_CHILDREN);
}

/* s:sync(path), s:get_acl(path): the two requests that take only a path. */
static int path_request(lua_State *L, int op)
{
    session *s = open_session(L);
    const char *path = luaL_checkstring(L, 2);
    record *r;
    if (!s)
        return 2;
    r = new_request(L, s, op);
    if (op == OP_SYNC)
        return submitted(L, s, r, zoo_async(s->zh, path, done_string, r));
    return submitted(L, s, r, zoo_aget_acl(s->zh, path, done_acl, r));
}

static int session_sync(lua_State *L)
{
    return path_request(L, OP_SYNC);
}

static int session_get_acl(lua_State *L)
{
    return path_request(L, OP_GET_ACL);
}

/* s:set_acl(path, acl, version) */
static int session_set_acl(lua_State *L)
{
    session *s = open_session(L);
    const char *path = luaL_checkstring(L, 2);
    struct ACL_vector acl;
    int version, rc;
    record *r;
    if (!s)
        return 2;
    luaL_checktype(L, 3, LUA_TTABLE);
    version = opt_version(L, 4);
    convert_check_acl(L, 3, &acl);
    r = new_request(L, s, OP_SET_ACL);
    rc = zoo_aset_acl(s->zh, path, version, &acl, done_void, r);
    convert_free_acl(&acl);
    return submitted(L, s, r, rc);
}

/* s:add_auth(scheme, credentials) */
static int session_add_auth(lua_State *L)
{
    session *s = open_session(L);
    const char *scheme = luaL_checkstring(L, 2);
    size_t len;
    const char *cert = luaL_checklstring(L, 3, &len);
    record *r;
    if (!s)
        return 2;
    r = new_request(L, s, OP_AUTH);
    return submitted(L, s, r, zoo_add_auth(s->zh, scheme, cert, (int)len, done_void, r));
}

/* s:remove_watch(path, kind, id, local): removes the watch request `id` set.
 * kind: 1 children, 2 data (exists/get). */
static int session_remove_watch(lua_State *L)
{
    session *s = open_session(L);
    const char *path = luaL_checkstring(L, 2);
    int kind = (int)luaL_checkinteger(L, 3);
    double id = luaL_checknumber(L, 4);
    int local = lua_toboolean(L, 5);
    record *r;
    if (!s)
        return 2;
    luaL_argcheck(L, kind == ZWATCHTYPE_CHILD || kind == ZWATCHTYPE_DATA, 3, "bad watch kind");
    r = new_request(L, s, OP_REMOVE_WATCH);
    if (local) {
        /* libzookeeper 3.8's async local removal hands our `data` to
         * notify_sync_completion() as if it were a sync completion (memory
         * corruption, and the completion never runs). The sync call is
         * local too (no network, no wait): complete the record ourselves. */
        r->rc = zoo_remove_watches(s->zh, path, (ZooWatcherType)kind, watch_fired,
                                   (void *)(intptr_t)id, 1);
        r->hb = NULL;   /* answered locally: the server heard nothing */
        inflight_remove(r);
        queue_push(r->queue, r);
        zk_pushid(L, r->id);
        return 1;
    }
    return submitted(L, s, r, zoo_aremove_watches(s->zh, path, (ZooWatcherType)kind, watch_fired,
                                               (void *)(intptr_t)id, 0,
                                               (void_completion_t *)done_void, r));
}

/* Field k of op table t (raw: the check and the build below see the same
 * values), pushed. */
static void op_field(lua_State *L, int t, const char *k)
{
    lua_pushstring(L, k);
    lua_rawget(L, t < 0 ? t - 1 : t);
}

/* Number field k of op table t, dflt when nil; sets *bad when neither. */
static lua_Number op_number(lua_State *L, int t, const char *k, lua_Number dflt, int *bad)
{
    lua_Number v = dflt;
    op_field(L, t, k);
    if (lua_isnumber(L, -1))
        v = lua_tonumber(L, -1);
    else if (!lua_isnil(L, -1))
        *bad = 1;
    lua_pop(L, 1);
    return v;
}

static int op_error(lua_State *L, int i, const char *why)
{
    return luaL_argerror(L, 2, lua_pushfstring(L, "op %d: %s", i, why));
}

/* Raises on anything wrong in op i (table at the top), holding nothing.
 * Returns the room a create's path needs (a sequence suffix included). */
static int check_op(lua_State *L, int i)
{
    size_t plen;
    int bad = 0;
    lua_Number type, n;
    const char *why;
    if (!lua_istable(L, -1))
        return luaL_argerror(L, 2, "ops must be tables");
    op_field(L, -1, "path");
    if (lua_type(L, -1) != LUA_TSTRING)
        return luaL_argerror(L, 2, "op without a string path");
    lua_tolstring(L, -1, &plen);
    lua_pop(L, 1);
    luaL_argcheck(L, plen < INT_MAX - 32, 2, "path too long");
    type = op_number(L, -1, "type", 0, &bad);
    if (bad || (type != OPT_CREATE && type != OPT_DELETE && type != OPT_SET && type != OPT_CHECK))
        return luaL_argerror(L, 2, "unknown op type");
    n = op_number(L, -1, "version", -1, &bad);
    if (bad || !valid_version(n))
        return op_error(L, i, VERSION_RANGE);
    if (type == OPT_CREATE) {
        n = op_number(L, -1, "mode", 0, &bad);
        if (bad || !valid_mode(n))
            return op_error(L, i, MODE_KNOWN);
        op_field(L, -1, "acl");
        why = convert_acl_error(L, -1);
        lua_pop(L, 1);
        if (why)
            return op_error(L, i, why);
    }
    return (int)plen + 32;
}

static void free_multi(zoo_op_t *ops, struct ACL_vector *acls, int n, record *r)
{
    int i;
    for (i = 0; acls && i < n; i++)
        convert_free_acl(&acls[i]);
    free(acls);
    free(ops);
    record_free(r);
}

/* s:multi(ops): ops is an array of {type=OPT_*, path=, data=, version=, mode=, acl=}.
 * Everything that can raise is checked before anything is allocated. All
 * strings stay on the Lua stack (inside ops) while zoo_amulti serializes. */
static int session_multi(lua_State *L)
{
    session *s = open_session(L);
    int n, i, rc, path_len = 0, room, bad = 0;
    zoo_op_t *ops;
    struct ACL_vector *acls;
    record *r;
    if (!s)
        return 2;
    luaL_checktype(L, 2, LUA_TTABLE);
    n = (int)zk_rawlen(L, 2);
    if (n <= 0)     /* a return the compiler sees: n sizes the callocs below */
        return luaL_argerror(L, 2, "multi needs at least one op");
    for (i = 1; i <= n; i++) {
        lua_rawgeti(L, 2, i);
        room = check_op(L, i);
        if (room > path_len)
            path_len = room;
        lua_pop(L, 1);
    }
    ops = calloc((size_t)n, sizeof(*ops));
    acls = calloc((size_t)n, sizeof(*acls));
    r = record_new(s->ctx->q, REC_REPLY);
    if (!ops || !acls || !r || !record_alloc_multi(r, n, path_len)) {
        free_multi(ops, acls, n, r);
        return luaL_error(L, "out of memory");
    }
    r->op = OP_MULTI;
    for (i = 0; i < n; i++) {
        const char *path, *data = NULL;
        size_t dlen = 0;
        int type, version;
        lua_rawgeti(L, 2, i + 1);
        op_field(L, -1, "path");
        path = lua_tostring(L, -1);
        lua_pop(L, 1);
        op_field(L, -1, "data");
        if (lua_type(L, -1) == LUA_TSTRING)
            data = lua_tolstring(L, -1, &dlen);
        lua_pop(L, 1);  /* the string stays reachable through ops[i] */
        type = (int)op_number(L, -1, "type", 0, &bad);
        version = (int)op_number(L, -1, "version", -1, &bad);
        record_multi_types(r)[i] = type;
        switch (type) {
        case OPT_CREATE:
            op_field(L, -1, "acl");
            rc = convert_acl(L, lua_gettop(L), &acls[i]);
            lua_pop(L, 1);
            if (rc != 0) {
                free_multi(ops, acls, n, r);
                return luaL_error(L, "out of memory");
            }
            zoo_create_op_init(&ops[i], path, data, data ? (int)dlen : -1,
                               acls[i].data ? &acls[i] : &ZOO_OPEN_ACL_UNSAFE,
                               (int)op_number(L, -1, "mode", 0, &bad),
                               record_multi_path(r, i), path_len);
            break;
        case OPT_DELETE:
            zoo_delete_op_init(&ops[i], path, version);
            break;
        case OPT_SET:
            zoo_set_op_init(&ops[i], path, data, data ? (int)dlen : -1, version,
                            &record_multi_stats(r)[i]);
            break;
        default:    /* OPT_CHECK: check_op allowed no other */
            zoo_check_op_init(&ops[i], path, version);
            break;
        }
        lua_pop(L, 1);
    }
    r->id = s->ctx->q->next_id++;
    r->hb = &s->ctx->hb;
    r->sent = monotonic_now();
    inflight_add(&s->ctx->fl, r);
    rc = zoo_amulti(s->zh, n, ops, record_multi_results(r), done_void, r);
    free_multi(ops, acls, n, NULL);
    return submitted(L, s, r, rc);
}

/* s:client_id() -> hex id, password (16 bytes) */
static int session_client_id(lua_State *L)
{
    session *s = open_session(L);
    const clientid_t *cid;
    if (!s)
        return 2;
    cid = zoo_client_id(s->zh);
    convert_push_hex64(L, cid->client_id);
    lua_pushlstring(L, cid->passwd, sizeof(cid->passwd));
    return 2;
}

/* Negotiated session timeout in seconds (0 before the first connect). */
static int session_timeout(lua_State *L)
{
    session *s = check_session(L);
    lua_pushnumber(L, s->zh ? zoo_recv_timeout(s->zh) / 1000.0 : 0);
    return 1;
}

/* s:server() -> "host:port" libzookeeper connects or is connected to ("" when
 * it has none), and whether it is still connected there: a server that
 * closed the connection may already have been replaced by the next one.
 * Connect names a server that did not answer as ZooKeeper. */
static int session_server(lua_State *L)
{
    session *s = check_session(L);
    const char *cur = s->zh ? zoo_get_current_server(s->zh) : NULL;
    int st = s->zh ? zoo_state(s->zh) : 0;     /* read after the server */
    lua_pushstring(L, cur ? cur : "");
    lua_pushboolean(L, st == ZOO_CONNECTED_STATE || st == ZOO_READONLY_STATE);
    return 2;
}

/* s:last_heard() -> monotonic seconds (core.now's clock): the send time of
 * the latest request the server answered, or of the latest handshake. */
static int session_last_heard(lua_State *L)
{
    session *s = check_session(L);
    lua_pushnumber(L, s->ctx ? heartbeat_last(&s->ctx->hb) : 0);
    return 1;
}

/* s:link() -> since, srtt, rttvar: since when (monotonic) the oldest
 * request still unanswered, the heartbeat's included, has waited for its
 * reply (from its send, or from the handshake if it was sent before:
 * nil when none waits), and the round trips of the server's answers
 * (smoothed mean and deviation, seconds; 0 before the first). Lua judges
 * from them whether the link went silent (client/session.lua). */
static int session_link(lua_State *L)
{
    session *s = check_session(L);
    double oldest, beat, connected_at = 0, srtt = 0, rttvar = 0;
    if (!s->ctx) {
        lua_pushnil(L);
        lua_pushnumber(L, 0);
        lua_pushnumber(L, 0);
        return 3;
    }
    oldest = inflight_oldest(&s->ctx->fl);
    heartbeat_link(&s->ctx->hb, &beat, &connected_at, &srtt, &rttvar);
    if (beat > 0 && (oldest == 0 || beat < oldest))
        oldest = beat;
    if (oldest == 0)
        lua_pushnil(L);
    else
        lua_pushnumber(L, oldest > connected_at ? oldest : connected_at);
    lua_pushnumber(L, srtt);
    lua_pushnumber(L, rttvar);
    return 3;
}

/* s:heartbeat(seconds): send a heartbeat when no answer came for that
 * long (0: never). Lua picks it from the negotiated timeout. */
static int session_heartbeat(lua_State *L)
{
    session *s = check_session(L);
    double interval = luaL_checknumber(L, 2);
    luaL_argcheck(L, interval >= 0 && interval < 1e9, 2, "interval out of range");
    if (s->ctx)
        heartbeat_set_interval(&s->ctx->hb, interval);
    return 0;
}

/* s:watchdog(hosts, first, max): drop a connection attempt whose handshake
 * is unanswered for `first` seconds (doubling up to `max`) and connect
 * again, same session (heartbeat.c, reconnect.c). first 0: off. */
static int session_watchdog(lua_State *L)
{
    session *s = check_session(L);
    const char *hosts = luaL_checkstring(L, 2);
    double first = luaL_checknumber(L, 3);
    double max = luaL_checknumber(L, 4);
    luaL_argcheck(L, first >= 0 && first < 1e9, 3, "out of range");
    luaL_argcheck(L, max >= 0 && max < 1e9, 4, "out of range");
    if (s->ctx && heartbeat_set_watchdog(&s->ctx->hb, hosts, first, max) != 0)
        return luaL_error(L, "out of memory");
    return 0;
}

/* s:reconnects() -> how many connection attempts the watchdog dropped. */
static int session_reconnects(lua_State *L)
{
    session *s = check_session(L);
    lua_pushnumber(L, s->ctx ? heartbeat_reconnects(&s->ctx->hb) : 0);
    return 1;
}

static void session_destroy(session *s)
{
    if (!s->zh)
        return;
    if (s->fork_gen == fork_generation) {
        /* The heartbeat thread calls into the handle: join it first. */
        heartbeat_stop(&s->ctx->hb);
        /* Runs some outstanding completions with ZCLOSING on this thread:
         * they push to the queue, whose mutex we do not hold, and touch the
         * heartbeat, which lives until here. */
        zookeeper_close(s->zh);
        s->zh = NULL;
        /* libzookeeper 3.8 may join its completion thread before it ran the
         * ZCLOSING replies it queued (close_requested ends its loop): those
         * would never come. No thread of it is left now: answer them. */
        inflight_fail_all(&s->ctx->fl, ZCLOSING);
        inflight_destroy(&s->ctx->fl);
        heartbeat_destroy(&s->ctx->hb);
        queue_unref(s->ctx->q);
#ifdef HAVE_CYRUS_SASL_H
        sasl_free(s->ctx->sasl);
#endif
        free(s->ctx);
    } else {
        /* A fork-copied handle has no threads; closing it crashes. Leak it. */
        s->zh = NULL;
    }
    s->ctx = NULL;
}

static int session_close(lua_State *L)
{
    session *s = luaL_checkudata(L, 1, SESSION_MT);
    session_destroy(s);
    lua_pushboolean(L, 1);
    return 1;
}

static int session_gc(lua_State *L)
{
    session_destroy(luaL_checkudata(L, 1, SESSION_MT));
    return 0;
}

/* core.open(queue, hosts, timeout_s, serial, [session_id_hex, password],
 *           [resolve_interval_s: -1 never (but on connection loss), 0 every poll],
 *           [tls: "ca,cert,key[,passwd]", zookeeper_init_ssl's string; a core
 *            with core.tls_check only],
 *           [sasl: { mechanism, service, host, username, password }, for
 *            zookeeper_init_sasl; a core with core.sasl_mechanisms only]) */
int session_open(lua_State *L)
{
    zkq *q = completions_check(L, 1);
    const char *hosts = luaL_checkstring(L, 2);
    double timeout = luaL_checknumber(L, 3);
    double serial = luaL_checknumber(L, 4);
    const char *hex = luaL_optstring(L, 5, NULL);
    size_t plen = 0;
    const char *passwd = luaL_optlstring(L, 6, NULL, &plen);
    double resolve = luaL_optnumber(L, 7, 60);
    const char *tls = luaL_optstring(L, 8, NULL);
    int with_sasl = !lua_isnoneornil(L, 9);
#ifdef HAVE_CYRUS_SASL_H
    zk_sasl *sasl = NULL;
#endif
    clientid_t cid, *cidp = NULL;
    session *s;
    session_ctx *ctx;
    int rc;
    luaL_argcheck(L, timeout > 0, 3, "session timeout must be positive");
#ifndef HAVE_OPENSSL_H
    luaL_argcheck(L, tls == NULL, 8, "this core has no TLS (build it: scripts/build.sh --tls)");
#endif
#ifndef HAVE_CYRUS_SASL_H
    luaL_argcheck(L, !with_sasl, 9, "this core has no SASL (build it: scripts/build.sh --secure)");
#endif
    /* libzookeeper 3.8 has no init with both (zookeeper_init_internal takes one) */
    luaL_argcheck(L, !(tls && with_sasl), 9, "libzookeeper 3.8 cannot do TLS and SASL together");
    if (hex) {
        luaL_argcheck(L, convert_parse_hex64(hex, &cid.client_id), 5, "bad session id");
        luaL_argcheck(L, passwd && plen == sizeof(cid.passwd), 6, "password must be 16 bytes");
        memcpy(cid.passwd, passwd, sizeof(cid.passwd));
        cidp = &cid;
    }
#ifdef HAVE_CYRUS_SASL_H
    if (with_sasl && !(sasl = sasl_new(L, 9)))
        return 3;       /* nil, why, detail */
#endif
    s = lua_newuserdata(L, sizeof(*s));
    memset(s, 0, sizeof(*s));
    luaL_getmetatable(L, SESSION_MT);
    lua_setmetatable(L, -2);
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
#ifdef HAVE_CYRUS_SASL_H
        sasl_free(sasl);
#endif
        return luaL_error(L, "out of memory");
    }
#ifdef HAVE_CYRUS_SASL_H
    ctx->sasl = sasl;
#endif
    ctx->q = q;
    ctx->serial = serial;
    queue_ref(q);
    heartbeat_init(&ctx->hb);
    inflight_init(&ctx->fl);
    s->ctx = ctx;
    pthread_once(&atfork_once, register_atfork);
    s->pid = getpid();
    s->fork_gen = fork_generation;
    errno = 0;
#ifdef HAVE_OPENSSL_H
    if (tls)
        s->zh = zookeeper_init_ssl(hosts, tls, session_watcher, (int)(timeout * 1000), cidp, ctx, 0);
    else
#endif
#ifdef HAVE_CYRUS_SASL_H
    if (ctx->sasl)
        s->zh = zookeeper_init_sasl(hosts, session_watcher, (int)(timeout * 1000), cidp, ctx, 0,
                                    NULL, sasl_params(ctx->sasl));
    else
#endif
    s->zh = zookeeper_init2(hosts, session_watcher, (int)(timeout * 1000), cidp, ctx, 0, NULL);
    if (!s->zh) {
        int e = errno;
        inflight_destroy(&ctx->fl);
        heartbeat_destroy(&ctx->hb);
        queue_unref(q);
#ifdef HAVE_CYRUS_SASL_H
        sasl_free(ctx->sasl);
#endif
        free(ctx);
        s->ctx = NULL;
        lua_pushnil(L);
        lua_pushstring(L, e == EINVAL ? "invalid" : "systemerror");
        lua_pushstring(L, e ? strerror(e) : "zookeeper_init failed");
        return 3;
    }
    if ((rc = heartbeat_start(&ctx->hb, s->zh)) != 0) {
        session_destroy(s);
        lua_pushnil(L);
        lua_pushstring(L, "systemerror");
        lua_pushfstring(L, "cannot start the heartbeat thread: %s", strerror(rc));
        return 3;
    }
    /* libzookeeper re-resolves the host list every time it polls its socket
     * by default: a getaddrinfo per request (a fifth of our CPU per lock
     * cycle, measured). Re-resolve at most every `resolve` seconds. */
    zoo_set_servers_resolution_delay(s->zh, resolve < 0 ? -1 : (int)(resolve * 1000));
    return 1;
}

void session_register(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"create", session_create},
        {"delete", session_delete},
        {"exists", session_exists},
        {"get", session_get},
        {"set", session_set},
        {"children", session_children},
        {"sync", session_sync},
        {"get_acl", session_get_acl},
        {"set_acl", session_set_acl},
        {"add_auth", session_add_auth},
        {"remove_watch", session_remove_watch},
        {"multi", session_multi},
        {"client_id", session_client_id},
        {"timeout", session_timeout},
        {"server", session_server},
        {"last_heard", session_last_heard},
        {"heartbeat", session_heartbeat},
        {"link", session_link},
        {"watchdog", session_watchdog},
        {"reconnects", session_reconnects},
        {"close", session_close},
        {NULL, NULL}
    };
    luaL_newmetatable(L, SESSION_MT);
    lua_newtable(L);
    zk_setfuncs(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, session_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}
