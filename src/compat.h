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

#endif
