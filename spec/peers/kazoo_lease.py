"""kazoo's leases and Lock as peers of zkcoord's (spec/lease_spec.lua).

    kazoo_lease.py HOSTS PATH lease DURATION IDHEX [GOFILE]  one NonBlockingLease
    kazoo_lease.py HOSTS PATH multi COUNT DURATION IDHEX     one MultiNonBlockingLease
        print "obtained" or "refused"; with GOFILE, print "ready" once
        connected and try once GOFILE exists (30 s at most)
    kazoo_lease.py HOSTS PATH lock GOFILE                  takes Lock(PATH), prints
        "locked", releases once GOFILE exists (30 s at most)
    kazoo_lease.py HOSTS PATH contenders                   prints the data of the nodes
        Lock(PATH) counts as contenders, in its order, one a line

IDHEX is the identifier's UTF-8 bytes in hex (no locale in the way).
"""
import datetime
import os
import sys
import time

from kazoo.client import KazooClient
from kazoo.recipe.lease import MultiNonBlockingLease, NonBlockingLease


def main():
    hosts, path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    try:
        if mode == "lock":
            lock = zk.Lock(path, "kazoo-lock-holder")
            lock.acquire(timeout=10)
            print("locked", flush=True)
            end = time.time() + 30
            while not os.path.exists(sys.argv[4]) and time.time() < end:
                time.sleep(0.05)
            lock.release()
            return
        if mode == "contenders":
            for data in zk.Lock(path).contenders():
                print(data, flush=True)
            return
        if mode == "lease":
            duration, ident = float(sys.argv[4]), sys.argv[5]
            if len(sys.argv) > 6:
                print("ready", flush=True)
                end = time.time() + 30
                while not os.path.exists(sys.argv[6]) and time.time() < end:
                    time.sleep(0.005)
            lease = NonBlockingLease(zk, path, datetime.timedelta(seconds=duration),
                                     identifier=bytes.fromhex(ident).decode())
        else:
            count, duration, ident = int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
            lease = MultiNonBlockingLease(zk, count, path,
                                          datetime.timedelta(seconds=duration),
                                          identifier=bytes.fromhex(ident).decode())
        print("obtained" if lease else "refused", flush=True)
    finally:
        zk.stop()
        zk.close()


if __name__ == "__main__":
    main()
