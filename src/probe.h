#ifndef ZKCOORD_PROBE_H
#define ZKCOORD_PROBE_H

#include "compat.h"

/* core.probe(host, port, timeout_s) -> true | nil, why, detail */
int probe_tcp(lua_State *L);

#endif
