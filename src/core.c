/* core.c: luaopen_zkcoord_core: registration, constants, version, and pinning
 * the library in memory while libzookeeper's threads may run inside it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/random.h>
#endif

#include "convert.h"
#include "probe.h"
#include "process.h"
#include "session.h"
#include "sasl.h"
#include "tls.h"

/* CMake defines it from lua/zkcoord/version.lua, the only place it is set. */
#ifndef ZKCOORD_CORE_VERSION
#error "ZKCOORD_CORE_VERSION must be defined (CMakeLists.txt reads lua/zkcoord/version.lua)"
#endif

static int core_now(lua_State *L)
{
    lua_pushnumber(L, monotonic_now());
    return 1;
}

/* 0 = off, 1 error, 2 warn, 3 info, 4 debug. libzookeeper logs to stderr. */
static int core_set_log_level(lua_State *L)
{
    int level = (int)luaL_checkinteger(L, 1);
    luaL_argcheck(L, level >= 0 && level <= 4, 1, "log level must be 0..4");
    zoo_set_debug_level((ZooLogLevel)level);
    return 0;
}

/* splitmix64: spreads the fallback's inputs over all 64 bits. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Fills buf with n random bytes from the kernel (getrandom, else
 * /dev/urandom). Never fails: without either it mixes the clocks, the pid and
 * a counter, which still differ between processes and calls. */
static void random_bytes(unsigned char *buf, size_t n)
{
    static uint64_t counter;
    size_t got = 0;
    uint64_t x;
    struct timespec rt, mono;
#ifdef __linux__
    while (got < n) {
        ssize_t k = getrandom(buf + got, n - got, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        got += (size_t)k;
    }
#endif
    if (got < n) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            while (got < n) {
                ssize_t k = read(fd, buf + got, n - got);
                if (k < 0 && errno == EINTR)
                    continue;
                if (k <= 0)
                    break;
                got += (size_t)k;
            }
            close(fd);
        }
    }
    if (got == n)
        return;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    x = mix64((uint64_t)rt.tv_sec * 1000000000ULL + (uint64_t)rt.tv_nsec);
    x = mix64(x ^ ((uint64_t)getpid() << 32) ^ (uint64_t)mono.tv_nsec);
    for (; got < n; got++) {
        x = mix64(x ^ ++counter);
        buf[got] = (unsigned char)x;
    }
}

/* core.uuid()'s random bytes, fetched from the kernel UUID_BATCH UUIDs at a
 * time: one system call per UUID_BATCH UUIDs. One pool per thread: a Lua
 * state runs on one thread at a time and a C function never yields, so no
 * lock. A forked child must not hand out bytes its parent has also handed
 * out: the child's pthread_atfork handler moves fork_generation on, and a
 * pool filled in another generation is refilled before use. */
#define UUID_BATCH 32
static unsigned fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static __thread struct {
    unsigned char bytes[UUID_BATCH * 16];
    size_t used;             /* bytes handed out; all of them when never filled */
    unsigned generation;
} uuid_pool = { {0}, UUID_BATCH * 16, 0 };

static void after_fork_in_child(void)
{
    fork_generation++;
}

static void register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* 16 bytes no other call in this or another process was given. */
static const unsigned char *uuid_bytes(void)
{
    if (uuid_pool.used >= sizeof(uuid_pool.bytes) || uuid_pool.generation != fork_generation) {
        random_bytes(uuid_pool.bytes, sizeof(uuid_pool.bytes));
        uuid_pool.used = 0;
        uuid_pool.generation = fork_generation;
    }
    uuid_pool.used += 16;
    return uuid_pool.bytes + uuid_pool.used - 16;
}

/* core.uuid(): a random version-4 UUID, 36 characters, lowercase. */
static int core_uuid(lua_State *L)
{
    unsigned char b[16];
    char s[36];
    memcpy(b, uuid_bytes(), sizeof(b));
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    convert_hex(s, b, 4);
    s[8] = '-';
    convert_hex(s + 9, b + 4, 2);
    s[13] = '-';
    convert_hex(s + 14, b + 6, 2);
    s[18] = '-';
    convert_hex(s + 19, b + 8, 2);
    s[23] = '-';
    convert_hex(s + 24, b + 10, 6);
    lua_pushlstring(L, s, sizeof(s));
    return 1;
}

/* core.random(): a number in [0, 1) from the kernel, for jitter. Leaves the
 * application's math.random sequence alone. */
static int core_random(lua_State *L)
{
    uint64_t x;
    random_bytes((unsigned char *)&x, sizeof(x));
    lua_pushnumber(L, (double)(x >> 11) * (1.0 / 9007199254740992.0));
    return 1;
}

static void set_int(lua_State *L, const char *k, int v)
{
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static void push_constants(lua_State *L)
{
    lua_newtable(L);
    /* create modes */
    set_int(L, "PERSISTENT", ZOO_PERSISTENT);
    set_int(L, "EPHEMERAL", ZOO_EPHEMERAL);
    set_int(L, "PERSISTENT_SEQUENTIAL", ZOO_PERSISTENT_SEQUENTIAL);
    set_int(L, "EPHEMERAL_SEQUENTIAL", ZOO_EPHEMERAL_SEQUENTIAL);
    set_int(L, "CONTAINER", ZOO_CONTAINER);
    set_int(L, "PERSISTENT_WITH_TTL", ZOO_PERSISTENT_WITH_TTL);
    set_int(L, "PERSISTENT_SEQUENTIAL_WITH_TTL", ZOO_PERSISTENT_SEQUENTIAL_WITH_TTL);
    /* permissions */
    set_int(L, "PERM_READ", ZOO_PERM_READ);
    set_int(L, "PERM_WRITE", ZOO_PERM_WRITE);
    set_int(L, "PERM_CREATE", ZOO_PERM_CREATE);
    set_int(L, "PERM_DELETE", ZOO_PERM_DELETE);
    set_int(L, "PERM_ADMIN", ZOO_PERM_ADMIN);
    set_int(L, "PERM_ALL", ZOO_PERM_ALL);
    /* states */
    set_int(L, "EXPIRED_SESSION_STATE", ZOO_EXPIRED_SESSION_STATE);
    set_int(L, "AUTH_FAILED_STATE", ZOO_AUTH_FAILED_STATE);
    set_int(L, "CONNECTING_STATE", ZOO_CONNECTING_STATE);
    set_int(L, "ASSOCIATING_STATE", ZOO_ASSOCIATING_STATE);
    set_int(L, "CONNECTED_STATE", ZOO_CONNECTED_STATE);
    set_int(L, "READONLY_STATE", ZOO_READONLY_STATE);
    /* events */
    set_int(L, "CREATED_EVENT", ZOO_CREATED_EVENT);
    set_int(L, "DELETED_EVENT", ZOO_DELETED_EVENT);
    set_int(L, "CHANGED_EVENT", ZOO_CHANGED_EVENT);
    set_int(L, "CHILD_EVENT", ZOO_CHILD_EVENT);
    set_int(L, "NOTWATCHING_EVENT", ZOO_NOTWATCHING_EVENT);
    /* watch kinds for remove_watch */
    set_int(L, "WATCH_CHILDREN", ZWATCHTYPE_CHILD);
    set_int(L, "WATCH_DATA", ZWATCHTYPE_DATA);
    /* multi op kinds */
    set_int(L, "OP_CREATE", OPT_CREATE);
    set_int(L, "OP_DELETE", OPT_DELETE);
    set_int(L, "OP_SET", OPT_SET);
    set_int(L, "OP_CHECK", OPT_CHECK);
    /* record kinds: rec.kind after q:next(rec) */
    set_int(L, "REPLY", REC_REPLY);
    set_int(L, "WATCH", REC_WATCH);
    set_int(L, "SESSION", REC_SESSION);
}

/* Return codes by number, named as the client's error strings (errors.lua). */
static void push_codes(lua_State *L)
{
    static const struct { int rc; const char *name; } codes[] = {
        {ZOK, "ok"},
        {ZSYSTEMERROR, "systemerror"},
        {ZRUNTIMEINCONSISTENCY, "runtimeinconsistency"},
        {ZDATAINCONSISTENCY, "datainconsistency"},
        {ZCONNECTIONLOSS, "connectionloss"},
        {ZMARSHALLINGERROR, "marshallingerror"},
        {ZUNIMPLEMENTED, "unimplemented"},
        {ZOPERATIONTIMEOUT, "operationtimeout"},
        {ZBADARGUMENTS, "badarguments"},
        {ZINVALIDSTATE, "invalidstate"},
        {ZNEWCONFIGNOQUORUM, "newconfignoquorum"},
        {ZRECONFIGINPROGRESS, "reconfiginprogress"},
        {ZSSLCONNECTIONERROR, "sslconnectionerror"},
        {ZAPIERROR, "apierror"},
        {ZNONODE, "nonode"},
        {ZNOAUTH, "noauth"},
        {ZBADVERSION, "badversion"},
        {ZNOCHILDRENFOREPHEMERALS, "nochildrenforephemerals"},
        {ZNODEEXISTS, "nodeexists"},
        {ZNOTEMPTY, "notempty"},
        {ZSESSIONEXPIRED, "sessionexpired"},
        {ZINVALIDCALLBACK, "invalidcallback"},
        {ZINVALIDACL, "invalidacl"},
        {ZAUTHFAILED, "authfailed"},
        {ZCLOSING, "closed"},      /* our own close() failed the request */
        {ZNOTHING, "nothing"},
        {ZSESSIONMOVED, "sessionmoved"},
        {ZNOTREADONLY, "notreadonly"},
        {ZEPHEMERALONLOCALSESSION, "ephemeralonlocalsession"},
        {ZNOWATCHER, "nowatcher"},
        {ZRECONFIGDISABLED, "reconfigdisabled"},
        {ZSESSIONCLOSEDREQUIRESASLAUTH, "sessionclosedrequiresaslauth"},
        {ZTHROTTLEDOP, "throttledop"},
    };
    size_t i;
    lua_newtable(L);
    for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        lua_pushstring(L, codes[i].name);
        lua_rawseti(L, -2, codes[i].rc);
    }
}

/* libzookeeper's threads run code from this object. If LuaJIT dlclose()d it
 * (a request VM closing under lua_code_cache off), they would jump into
 * unmapped memory: keep it loaded for the life of the process. */
static void pin_library(void)
{
    Dl_info info;
    if (dladdr((void *)pin_library, &info) && info.dli_fname)
        (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE);
}

__attribute__((visibility("default"))) int luaopen_zkcoord_core(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        {"completions", completions_new_l},
        {"open", session_open},
        {"probe", probe_tcp},
        {"now", core_now},
        {"set_log_level", core_set_log_level},
        {"uuid", core_uuid},
        {"random", core_random},
        {NULL, NULL}
    };
    pin_library();
    (void)pthread_once(&atfork_once, register_atfork);
    zoo_set_debug_level((ZooLogLevel)0);
    completions_register(L);
    session_register(L);
    lua_newtable(L);
    zk_setfuncs(L, funcs);
    push_constants(L);
    lua_setfield(L, -2, "c");
    push_codes(L);
    lua_setfield(L, -2, "codes");
    process_push(L); lua_setfield(L, -2, "process");   /* the command's process calls */
    lua_pushliteral(L, ZKCOORD_CORE_VERSION);
    lua_setfield(L, -2, "_VERSION");
    lua_pushstring(L, ZOO_VERSION);
    lua_setfield(L, -2, "zookeeper_version");
#ifdef HAVE_OPENSSL_H
    /* linked with a libzookeeper built with OpenSSL (ZKCOORD_TLS) */
    lua_pushcfunction(L, tls_check);
    lua_setfield(L, -2, "tls_check");
#endif
#ifdef HAVE_CYRUS_SASL_H
    /* linked with a libzookeeper built with Cyrus SASL */
    lua_pushcfunction(L, sasl_mechanisms);
    lua_setfield(L, -2, "sasl_mechanisms");
#endif
    return 1;
}
