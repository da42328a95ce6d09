/* compat.h: the few Lua 5.1/LuaJIT vs 5.2+ differences the core touches. */
#ifndef ZKCOORD_COMPAT_H
#define ZKCOORD_COMPAT_H

#include <lua.h>
#include <lauxlib.h>

#if LUA_VERSION_NUM >= 502
#define zk_setfuncs(L, l) luaL_setfuncs((L), (l), 0)
#define zk_rawlen(L, i) lua_rawlen((L), (i))
#else
#define zk_setfuncs(L, l) luaL_register((L), NULL, (l))
#define zk_rawlen(L, i) lua_objlen((L), (i))
#endif

/* Request ids, watch ids and serials count up from 1 in a double: pushed as
 * integers so 5.3+ sees 3, not 3.0. */
#define zk_pushid(L, v) lua_pushinteger((L), (lua_Integer)(v))

#endif
