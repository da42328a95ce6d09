/* process.h: core.process (process.c), the command's process calls. */
#ifndef ZKCOORD_PROCESS_H
#define ZKCOORD_PROCESS_H

#include <lua.h>

/* Pushes the core.process table. */
void process_push(lua_State *L);

#endif
