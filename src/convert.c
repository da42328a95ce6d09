/* convert.c: turns records into Lua values, and Lua ACL tables into ACL_vector.
 * Lua thread only. 64-bit session ids are hex strings: server ids live in the
 * top byte, which a Lua number (double) cannot hold exactly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

const char *const convert_keys[CONVERT_KEY_COUNT] = {
    "kind", "id", "rc", "value", "stat", "extra", "type", "state", "path",
    "czxid", "mzxid", "pzxid", "ctime", "mtime", "version", "cversion",
    "aversion", "data_length", "num_children", "ephemeral_owner",
};

void convert_hex(char *out, const unsigned char *b, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 0x0f];
    }
}

void convert_push_hex64(lua_State *L, int64_t v)
{
    unsigned char b[8];
    char buf[16];
    uint64_t u = (uint64_t)v;
    int i;
    for (i = 7; i >= 0; i--, u >>= 8)
        b[i] = (unsigned char)u;
    convert_hex(buf, b, sizeof(b));
    lua_pushlstring(L, buf, sizeof(buf));
}

int convert_parse_hex64(const char *s, int64_t *out)
{
    uint64_t v = 0;
    int n = 0;
    for (; *s; s++, n++) {
        int d;
        if (*s >= '0' && *s <= '9') d = *s - '0';
        else if (*s >= 'a' && *s <= 'f') d = *s - 'a' + 10;
        else if (*s >= 'A' && *s <= 'F') d = *s - 'A' + 10;
        else return 0;
        if (n >= 16)
            return 0;
        v = (v << 4) | (uint64_t)d;
    }
    *out = (int64_t)v;
    return n > 0;
}

/* Integers stay integers on Lua 5.3+ (zxids fit: 64-bit lua_Integer). */
static void set_int(lua_State *L, const char *k, int64_t v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

/* Pushes the name of field `field` (an upvalue of the calling closure, see
 * convert_fill_record); the caller pushes its value and rawsets: no string
 * is hashed per record or per stat. */
#define KEY(field) lua_pushvalue(L, lua_upvalueindex(keys + (field)))
#define SET_INT(field, v) (KEY(field), lua_pushinteger(L, (lua_Integer)(v)), lua_rawset(L, -3))
#define SET_NUM(field, v) (KEY(field), lua_pushnumber(L, (v)), lua_rawset(L, -3))

/* A stat as a plain table, sized for its fields; ephemeral_owner only for an
 * ephemeral node. */
static void push_stat(lua_State *L, int keys, const struct Stat *st)
{
    lua_createtable(L, 0, st->ephemeralOwner != 0 ? 11 : 10);
    SET_INT(SF_CZXID, st->czxid);
    SET_INT(SF_MZXID, st->mzxid);
    SET_INT(SF_PZXID, st->pzxid);
    SET_NUM(SF_CTIME, (double)st->ctime / 1000.0);
    SET_NUM(SF_MTIME, (double)st->mtime / 1000.0);
    SET_INT(SF_VERSION, st->version);
    SET_INT(SF_CVERSION, st->cversion);
    SET_INT(SF_AVERSION, st->aversion);
    SET_INT(SF_DATA_LENGTH, st->dataLength);
    SET_INT(SF_NUM_CHILDREN, st->numChildren);
    if (st->ephemeralOwner != 0) {
        KEY(SF_EPHEMERAL_OWNER);
        convert_push_hex64(L, st->ephemeralOwner);
        lua_rawset(L, -3);
    }
}

static void push_value(lua_State *L, record *r)
{
    if (r->value && r->value_len >= 0)
        lua_pushlstring(L, r->value, (size_t)r->value_len);
    else
        lua_pushnil(L);
}

static void push_strings(lua_State *L, const struct String_vector *sv)
{
    int i;
    lua_createtable(L, sv->count, 0);
    for (i = 0; i < sv->count; i++) {
        lua_pushstring(L, sv->data[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

static void push_acl(lua_State *L, const struct ACL_vector *acl)
{
    int i;
    lua_createtable(L, acl->count, 0);
    for (i = 0; i < acl->count; i++) {
        lua_createtable(L, 0, 3);
        set_int(L, "perms", acl->data[i].perms);
        lua_pushstring(L, acl->data[i].id.scheme);
        lua_setfield(L, -2, "scheme");
        lua_pushstring(L, acl->data[i].id.id);
        lua_setfield(L, -2, "id");
        lua_rawseti(L, -2, i + 1);
    }
}

static void push_multi(lua_State *L, int keys, record *r)
{
    int i;
    zoo_op_result_t *res = record_multi_results(r);
    struct Stat *stats = record_multi_stats(r);
    int *types = record_multi_types(r);
    lua_createtable(L, r->nops, 0);
    for (i = 0; i < r->nops; i++) {
        lua_createtable(L, 0, 2);
        SET_INT(RF_RC, res[i].err);
        if (res[i].err == ZOK && types[i] == OPT_CREATE) {
            KEY(RF_PATH);
            lua_pushstring(L, record_multi_path(r, i));
            lua_rawset(L, -3);
        }
        if (res[i].err == ZOK && types[i] == OPT_SET) {
            KEY(RF_STAT);
            push_stat(L, keys, &stats[i]);
            lua_rawset(L, -3);
        }
        lua_rawseti(L, -2, i + 1);
    }
}

/* The fields q:next(rec) sets, by kind (rec.kind is REC_*):
 *   reply    id (request id), rc, value (data or path, or nil), stat (or nil),
 *            extra (children, ACL entries or multi results, or nil)
 *   watch    id (watch id), type, state, path
 *   session  id (the session's serial), state
 * Fields of another kind keep what an earlier record left: read only those
 * of rec.kind. The keys are the calling closure's upvalues from number
 * `keys` on, in convert_keys order: interned once, not per record. */

void convert_fill_record(lua_State *L, int t, int keys, record *r)
{
    KEY(RF_KIND);
    lua_pushinteger(L, r->kind);
    lua_rawset(L, t);
    KEY(RF_ID);
    zk_pushid(L, r->id);
    lua_rawset(L, t);
    switch (r->kind) {
    case REC_REPLY:
        KEY(RF_RC);
        lua_pushinteger(L, r->rc);
        lua_rawset(L, t);
        KEY(RF_VALUE);
        push_value(L, r);
        lua_rawset(L, t);
        KEY(RF_STAT);
        if (r->has_stat)
            push_stat(L, keys, &r->stat);
        else
            lua_pushnil(L);
        lua_rawset(L, t);
        KEY(RF_EXTRA);
        if (r->rc != ZOK && r->op != OP_MULTI)
            lua_pushnil(L);
        else if (r->op == OP_CHILDREN)
            push_strings(L, &r->strings);
        else if (r->op == OP_GET_ACL)
            push_acl(L, &r->acl);
        else if (r->op == OP_MULTI && r->slots)
            push_multi(L, keys, r);
        else
            lua_pushnil(L);
        lua_rawset(L, t);
        break;
    case REC_WATCH:
        KEY(RF_TYPE);
        lua_pushinteger(L, r->type);
        lua_rawset(L, t);
        KEY(RF_STATE);
        lua_pushinteger(L, r->state);
        lua_rawset(L, t);
        KEY(RF_PATH);
        push_value(L, r);
        lua_rawset(L, t);
        break;
    default:
        KEY(RF_STATE);
        lua_pushinteger(L, r->state);
        lua_rawset(L, t);
        break;
    }
}
#undef SET_NUM
#undef SET_INT
#undef KEY

void convert_free_acl(struct ACL_vector *acl)
{
    int i;
    if (!acl->data)
        return;
    for (i = 0; i < acl->count; i++) {
        free(acl->data[i].id.scheme);
        free(acl->data[i].id.id);
    }
    free(acl->data);
    acl->data = NULL;
    acl->count = 0;
}

/* Pushes field k of the table at idx without metamethods: the check and
 * the conversion then see the same values. */
static void raw_field(lua_State *L, int idx, const char *k)
{
    lua_pushstring(L, k);
    lua_rawget(L, idx < 0 ? idx - 1 : idx);
}

const char *convert_acl_error(lua_State *L, int idx)
{
    int i, n, ok;
    if (lua_isnoneornil(L, idx))
        return NULL;
    if (!lua_istable(L, idx))
        return "ACL must be a table";
    n = (int)zk_rawlen(L, idx);
    if (n <= 0)
        return "ACL must not be empty";
    for (i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        if (!lua_istable(L, -1)) {
            lua_pop(L, 1);
            return "ACL entries must be tables {perms=, scheme=, id=}";
        }
        raw_field(L, -1, "perms");
        raw_field(L, -2, "scheme");
        raw_field(L, -3, "id");
        ok = lua_isnumber(L, -3) && lua_isstring(L, -2) && lua_isstring(L, -1);
        lua_pop(L, 4);
        if (!ok)
            return "ACL entry needs numeric perms and string scheme and id";
    }
    return NULL;
}

int convert_acl(lua_State *L, int idx, struct ACL_vector *out)
{
    int i, n;
    out->count = 0;
    out->data = NULL;
    if (lua_isnoneornil(L, idx))
        return 0;
    n = (int)zk_rawlen(L, idx);
    out->data = calloc((size_t)n, sizeof(struct ACL));
    if (!out->data)
        return -1;
    for (i = 0; i < n; i++) {
        lua_rawgeti(L, idx, i + 1);
        raw_field(L, -1, "perms");
        raw_field(L, -2, "scheme");
        raw_field(L, -3, "id");
        out->data[i].perms = (int32_t)lua_tointeger(L, -3);
        out->data[i].id.scheme = strdup(lua_tostring(L, -2));
        out->data[i].id.id = strdup(lua_tostring(L, -1));
        out->count = i + 1;
        lua_pop(L, 4);
        if (!out->data[i].id.scheme || !out->data[i].id.id) {
            convert_free_acl(out);
            return -1;
        }
    }
    return 0;
}

int convert_check_acl(lua_State *L, int idx, struct ACL_vector *out)
{
    const char *why = convert_acl_error(L, idx);
    out->count = 0;
    out->data = NULL;
    if (why)
        return luaL_argerror(L, idx, why);
    if (convert_acl(L, idx, out) != 0)
        return luaL_error(L, "out of memory");
    return 0;
}
