/* convert.h: records and ZooKeeper structs to Lua values and back (Lua thread only). */
#ifndef ZKCOORD_CONVERT_H
#define ZKCOORD_CONVERT_H

#include "compat.h"
#include "completions.h"

void convert_push_hex64(lua_State *L, int64_t v);
int convert_parse_hex64(const char *s, int64_t *out);
void convert_push_stat(lua_State *L, const struct Stat *st);
/* A record's fields in Lua, by name (see convert_fill_record). */
enum { RF_KIND, RF_ID, RF_RC, RF_VALUE, RF_STAT, RF_EXTRA, RF_TYPE, RF_STATE, RF_PATH,
       RF_COUNT };
extern const char *const convert_record_keys[RF_COUNT];
/* Sets record r's fields in the table at index t. Called from a C closure
 * whose upvalues keys .. keys + RF_COUNT - 1 hold the field names. */
void convert_fill_record(lua_State *L, int t, int keys, record *r);
/* Reads an ACL array at index idx into a malloc'd vector; nil gives NULL (open ACL).
 * Raises a Lua error on malformed input. */
int convert_check_acl(lua_State *L, int idx, struct ACL_vector *out);
void convert_free_acl(struct ACL_vector *acl);

#endif
