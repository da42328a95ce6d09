/* session.h: the zhandle userdata (see session.c). */
#ifndef ZKCOORD_SESSION_H
#define ZKCOORD_SESSION_H

#include "compat.h"
#include "queue.h"

zkq *queue_check(lua_State *L, int idx);   /* poll.c */
int queue_new_l(lua_State *L);              /* poll.c */
void queue_register(lua_State *L);          /* poll.c */
int session_open(lua_State *L);
void session_register(lua_State *L);

#endif
