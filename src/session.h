/* session.h: the zhandle userdata (see session.c). */
#ifndef ZKCOORD_SESSION_H
#define ZKCOORD_SESSION_H

#include "compat.h"
#include "completions.h"

zkq *completions_check(lua_State *L, int idx);   /* completions_lua.c */
int completions_new_l(lua_State *L);              /* completions_lua.c */
void completions_register(lua_State *L);          /* completions_lua.c */
int session_open(lua_State *L);
void session_register(lua_State *L);

#endif
