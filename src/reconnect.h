/* reconnect.h: make libzookeeper drop its connection and connect again,
 * same session (see reconnect.c). */
#ifndef ZKCOORD_RECONNECT_H
#define ZKCOORD_RECONNECT_H

#include <zookeeper/zookeeper.h>

/* hosts: the handle's server list as given to zookeeper_init (a chroot
 * suffix is ignored). Returns ZOK, libzookeeper's error (nothing changed),
 * or ZRECONNECT_RESTORE: the real list did not resolve the second time and
 * the handle points nowhere until reconnect_restore succeeds (retry it).
 * Any thread. */
#define ZRECONNECT_RESTORE (-9001)
int reconnect_now(zhandle_t *zh, const char *hosts);
int reconnect_restore(zhandle_t *zh, const char *hosts);

#endif
