/* convert.h: records and ZooKeeper structs to Lua values and back (Lua thread only). */
#ifndef ZKCOORD_CONVERT_H
#define ZKCOORD_CONVERT_H

#include "compat.h"
#include "queue.h"

void convert_push_hex64(lua_State *L, int64_t v);
int convert_parse_hex64(const char *s, int64_t *out);
void convert_push_stat(lua_State *L, const struct Stat *st);
int convert_push_record(lua_State *L, record *r);   /* returns the number of values */
/* Reads an ACL array at index idx into a malloc'd vector; nil gives NULL (open ACL).
 * Raises a Lua error on malformed input. */
int convert_check_acl(lua_State *L, int idx, struct ACL_vector *out);
void convert_free_acl(struct ACL_vector *acl);

#endif
