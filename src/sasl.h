#ifndef ZKCOORD_SASL_H
#define ZKCOORD_SASL_H

#include "compat.h"

#ifdef HAVE_CYRUS_SASL_H
#include <zookeeper/zookeeper.h>

/* One session's SASL parameters with the callbacks that answer Cyrus SASL;
 * they must live as long as the handle (zookeeper_init_sasl keeps the
 * callbacks by reference). */
typedef struct zk_sasl zk_sasl;

/* The table at idx ({ mechanism, service, host|nil, username|nil,
 * password|nil }, checked by Lua) as parameters: raises on a bad field,
 * returns NULL after pushing nil, why, detail when Cyrus SASL cannot
 * start. */
zk_sasl *sasl_new(lua_State *L, int idx);
zoo_sasl_params_t *sasl_params(zk_sasl *z);
void sasl_free(zk_sasl *z);

/* core.sasl_mechanisms() -> "DIGEST-MD5 GSSAPI ..." (the client plugins
 * installed), or nil, why. */
int sasl_mechanisms(lua_State *L);
#endif

#endif
