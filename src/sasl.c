/* sasl.c: connect's `sasl` option for zookeeper_init_sasl: the parameters
 * (service, host, mechanism) and callbacks that answer Cyrus SASL with the
 * user name and password given, from memory (libzookeeper's own
 * zoo_sasl_make_basic_callbacks reads the password from a file). Cyrus
 * SASL is started once per process. Only in a core built with a
 * libzookeeper that has SASL (scripts/build-zkclient-tls.sh). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sasl.h"

#ifdef HAVE_CYRUS_SASL_H
#include <sasl/sasl.h>

struct zk_sasl {
    zoo_sasl_params_t params;
    sasl_callback_t callbacks[5];
    char *mechanism, *service, *host, *username;
    sasl_secret_t *secret;       /* the password, as SASL_CB_PASS returns it */
};

/* Cyrus SASL's callback slot is int (*)(void); the types vary by id. */
typedef int (*sasl_proc)(void);
#define CB(f) ((sasl_proc)(void (*)(void))(f))

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_rc;

static void init_sasl(void)
{
    init_rc = sasl_client_init(NULL);
}

/* SASL_CB_USER and SASL_CB_AUTHNAME: the user name. */
static int cb_user(void *context, int id, const char **result, unsigned *len)
{
    zk_sasl *z = context;
    if (!result || (id != SASL_CB_USER && id != SASL_CB_AUTHNAME))
        return SASL_BADPARAM;
    *result = z->username;
    if (len)
        *len = z->username ? (unsigned)strlen(z->username) : 0;
    return SASL_OK;
}

/* SASL_CB_PASS: the password. */
static int cb_pass(sasl_conn_t *conn, void *context, int id, sasl_secret_t **psecret)
{
    zk_sasl *z = context;
    (void)conn;
    if (!psecret || id != SASL_CB_PASS || !z->secret)
        return SASL_FAIL;
    *psecret = z->secret;
    return SASL_OK;
}

/* SASL_CB_GETREALM: the server's first realm (DIGEST-MD5's), as kazoo. */
static int cb_realm(void *context, int id, const char **avail, const char **result)
{
    (void)context;
    if (!result || id != SASL_CB_GETREALM)
        return SASL_BADPARAM;
    *result = avail && avail[0] ? avail[0] : "";
    return SASL_OK;
}

/* A copy of the string field k of the table at idx, or NULL if absent. */
static char *field(lua_State *L, int idx, const char *k, size_t *len, int *oom)
{
    const char *v;
    char *copy;
    size_t n;
    lua_getfield(L, idx, k);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return NULL;
    }
    if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "sasl.%s must be a string", k);
    v = lua_tolstring(L, -1, &n);
    copy = malloc(n + 1);
    if (copy) {
        memcpy(copy, v, n);
        copy[n] = '\0';
    } else {
        *oom = 1;
    }
    if (len)
        *len = n;
    lua_pop(L, 1);
    return copy;
}

void sasl_free(zk_sasl *z)
{
    if (!z)
        return;
    free(z->mechanism);
    free(z->service);
    free(z->host);
    free(z->username);
    if (z->secret) {
        /* the password does not outlive the session in our memory */
        memset(z->secret->data, 0, z->secret->len);
        free(z->secret);
    }
    free(z);
}

zk_sasl *sasl_new(lua_State *L, int idx)
{
    zk_sasl *z;
    char *password;
    size_t plen = 0;
    int oom = 0;
    luaL_checktype(L, idx, LUA_TTABLE);
    pthread_once(&init_once, init_sasl);
    if (init_rc != SASL_OK) {
        lua_pushnil(L);
        lua_pushliteral(L, "sasl");
        lua_pushfstring(L, "cannot start Cyrus SASL: %s", sasl_errstring(init_rc, NULL, NULL));
        return NULL;
    }
    z = calloc(1, sizeof(*z));
    if (!z) {
        luaL_error(L, "out of memory");
        return NULL;
    }
    z->mechanism = field(L, idx, "mechanism", NULL, &oom);
    z->service = field(L, idx, "service", NULL, &oom);
    z->host = field(L, idx, "host", NULL, &oom);
    z->username = field(L, idx, "username", NULL, &oom);
    password = field(L, idx, "password", &plen, &oom);
    if (password) {
        z->secret = malloc(sizeof(sasl_secret_t) + plen);
        if (z->secret) {
            z->secret->len = plen;
            memcpy(z->secret->data, password, plen + 1);
        } else {
            oom = 1;
        }
        memset(password, 0, plen);
        free(password);
    }
    if (oom || !z->mechanism || !z->service) {
        sasl_free(z);
        luaL_error(L, oom ? "out of memory" : "sasl.mechanism and sasl.service are required");
        return NULL;
    }
    z->callbacks[0] = (sasl_callback_t){ SASL_CB_GETREALM, CB(cb_realm), z };
    z->callbacks[1] = (sasl_callback_t){ SASL_CB_USER, CB(cb_user), z };
    z->callbacks[2] = (sasl_callback_t){ SASL_CB_AUTHNAME, CB(cb_user), z };
    z->callbacks[3] = (sasl_callback_t){ SASL_CB_PASS, CB(cb_pass), z };
    z->callbacks[4] = (sasl_callback_t){ SASL_CB_LIST_END, NULL, NULL };
    z->params.service = z->service;
    z->params.host = z->host;        /* NULL: the server's host name (GSSAPI) */
    z->params.mechlist = z->mechanism;
    z->params.callbacks = z->callbacks;
    return z;
}

zoo_sasl_params_t *sasl_params(zk_sasl *z)
{
    return &z->params;
}

int sasl_mechanisms(lua_State *L)
{
    const char **m;
    luaL_Buffer b;
    pthread_once(&init_once, init_sasl);
    if (init_rc != SASL_OK) {
        lua_pushnil(L);
        lua_pushfstring(L, "cannot start Cyrus SASL: %s", sasl_errstring(init_rc, NULL, NULL));
        return 2;
    }
    luaL_buffinit(L, &b);
    for (m = sasl_global_listmech(); m && *m; m++) {
        if (m != sasl_global_listmech())
            luaL_addchar(&b, ' ');
        luaL_addstring(&b, *m);
    }
    luaL_pushresult(&b);
    return 1;
}

#endif
