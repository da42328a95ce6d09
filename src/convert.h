/* convert.h: records and ZooKeeper structs to Lua values and back (Lua thread only). */
#ifndef ZKCOORD_CONVERT_H
#define ZKCOORD_CONVERT_H

#include "compat.h"
#include "completions.h"

/* Writes the 2 * n lowercase hex digits of bytes b[0..n-1] to out (no NUL). */
void convert_hex(char *out, const unsigned char *b, size_t n);
void convert_push_hex64(lua_State *L, int64_t v);
int convert_parse_hex64(const char *s, int64_t *out);
/* The names of a record's fields (RF_*), then of a stat's (SF_*), in Lua
 * (see convert_fill_record). */
enum { RF_KIND, RF_ID, RF_RC, RF_VALUE, RF_STAT, RF_EXTRA, RF_TYPE, RF_STATE, RF_PATH,
       SF_CZXID, SF_MZXID, SF_PZXID, SF_CTIME, SF_MTIME, SF_VERSION, SF_CVERSION,
       SF_AVERSION, SF_DATA_LENGTH, SF_NUM_CHILDREN, SF_EPHEMERAL_OWNER,
       CONVERT_KEY_COUNT };
extern const char *const convert_keys[CONVERT_KEY_COUNT];
/* Sets record r's fields in the table at index t. Called from a C closure
 * whose upvalues keys .. keys + CONVERT_KEY_COUNT - 1 hold convert_keys. */
void convert_fill_record(lua_State *L, int t, int keys, record *r);
/* Reads an ACL array at index idx into a malloc'd vector; nil gives NULL (open ACL).
 * Raises a Lua error on malformed input. */
int convert_check_acl(lua_State *L, int idx, struct ACL_vector *out);
/* The same in two steps, for callers holding memory: why the ACL at idx is
 * malformed (NULL: fine; never raises), then its conversion (-1: out of
 * memory, nothing held). */
const char *convert_acl_error(lua_State *L, int idx);
int convert_acl(lua_State *L, int idx, struct ACL_vector *out);
void convert_free_acl(struct ACL_vector *acl);

#endif
