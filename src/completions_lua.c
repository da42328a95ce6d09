/* completions_lua.c: the Lua face of the completion queue (Lua thread only):
 * hand out records, wait for them, and expose the wake-ups an event loop can
 * watch (eventfd, unix-socket doorbell). One queue serves a client across all
 * its sessions. */
#include <errno.h>
#include <string.h>

#include "convert.h"
#include "session.h"

#define QUEUE_MT "zkcoord.completions"

typedef struct queue_box {
    zkq *q;
} queue_box;

zkq *completions_check(lua_State *L, int idx)
{
    queue_box *b = luaL_checkudata(L, idx, QUEUE_MT);
    if (!b->q)
        luaL_error(L, "zkcoord: queue is closed");
    return b->q;
}

static int push_errno(lua_State *L)
{
    int e = errno;
    lua_pushnil(L);
    lua_pushstring(L, "systemerror");
    lua_pushstring(L, strerror(e));
    return 3;
}

/* q:next(rec) -> true after filling table rec with the oldest record's
 * fields (convert_fill_record), false when the queue is empty. The caller
 * passes the same table each time: no allocation per record. The field
 * names (a record's and a stat's) are this closure's upvalues, interned once. */
static int queue_next(lua_State *L)
{
    zkq *q = completions_check(L, 1);
    record *r;
    luaL_checktype(L, 2, LUA_TTABLE);
    r = queue_pop(q);
    if (!r) {
        lua_pushboolean(L, 0);
        return 1;
    }
    convert_fill_record(L, 2, 1, r);
    record_free(r);
    lua_pushboolean(L, 1);
    return 1;
}

/* q:wait(timeout_s) -> true when records are ready. Blocks this thread. */
static int queue_wait_l(lua_State *L)
{
    zkq *q = completions_check(L, 1);
    double t = luaL_optnumber(L, 2, 0);
    /* NaN would pass queue_wait's "no deadline" test: wait forever. */
    luaL_argcheck(L, t == t, 2, "timeout must be a number, not NaN");
    lua_pushboolean(L, queue_wait(q, t));
    return 1;
}

static int queue_fd(lua_State *L)
{
    zkq *q = completions_check(L, 1);
    queue_want_fd(q);
    lua_pushinteger(L, q->efd);
    return 1;
}

static int queue_clear_fd_l(lua_State *L)
{
    queue_clear_fd(completions_check(L, 1));
    return 0;
}

static int queue_kick_l(lua_State *L)
{
    queue_kick(completions_check(L, 1));
    return 0;
}

static int queue_listen_unix_l(lua_State *L)
{
    zkq *q = completions_check(L, 1);
    if (queue_listen_unix(q, luaL_checkstring(L, 2)) != 0)
        return push_errno(L);
    lua_pushboolean(L, 1);
    return 1;
}

static int queue_accept_unix_l(lua_State *L)
{
    zkq *q = completions_check(L, 1);
    if (queue_accept_unix(q) != 0)
        return push_errno(L);
    lua_pushboolean(L, 1);
    return 1;
}

static int queue_close_doorbell_l(lua_State *L)
{
    queue_close_doorbell(completions_check(L, 1));
    return 0;
}

static int queue_gc(lua_State *L)
{
    queue_box *b = luaL_checkudata(L, 1, QUEUE_MT);
    if (b->q) {
        queue_unref(b->q);
        b->q = NULL;
    }
    return 0;
}

/* core.completions() */
int completions_new_l(lua_State *L)
{
    queue_box *b = lua_newuserdata(L, sizeof(*b));
    b->q = NULL;
    luaL_getmetatable(L, QUEUE_MT);
    lua_setmetatable(L, -2);
    b->q = queue_new();
    if (!b->q)
        return push_errno(L);
    return 1;
}

void completions_register(lua_State *L)
{
    static const luaL_Reg methods[] = {
        {"wait", queue_wait_l},
        {"fd", queue_fd},
        {"clear_fd", queue_clear_fd_l},
        {"kick", queue_kick_l},
        {"listen_unix", queue_listen_unix_l},
        {"accept_unix", queue_accept_unix_l},
        {"close_doorbell", queue_close_doorbell_l},
        {NULL, NULL}
    };
    int i;
    luaL_newmetatable(L, QUEUE_MT);
    lua_newtable(L);
    zk_setfuncs(L, methods);
    for (i = 0; i < CONVERT_KEY_COUNT; i++)
        lua_pushstring(L, convert_keys[i]);
    lua_pushcclosure(L, queue_next, CONVERT_KEY_COUNT);
    lua_setfield(L, -2, "next");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, queue_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}
