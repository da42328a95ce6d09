#ifndef ZKCOORD_TLS_H
#define ZKCOORD_TLS_H

#include "compat.h"

#ifdef HAVE_OPENSSL_H
/* core.tls_check(ca, cert, key, passwd|nil [, host, port, timeout_s])
 *   -> true | nil, why, detail */
int tls_check(lua_State *L);
#endif

#endif
