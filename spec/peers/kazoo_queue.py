"""kazoo's LockingQueue as a peer of zkcoord's work queue (spec/work_queue_spec.lua).

    kazoo_queue.py HOSTS PATH put PRIORITY:DATA ...   puts each item, in order
    kazoo_queue.py HOSTS PATH take N TIMEOUT          takes, prints and consumes
                                                      up to N items, one a line
"""
import sys

from kazoo.client import KazooClient


def main():
    hosts, path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    try:
        q = zk.LockingQueue(path)
        if mode == "put":
            for arg in sys.argv[4:]:
                prio, data = arg.split(":", 1)
                q.put(data.encode(), priority=int(prio))
        else:
            n, timeout = int(sys.argv[4]), float(sys.argv[5])
            for _ in range(n):
                data = q.get(timeout)
                if data is None:
                    print("none", flush=True)
                    break
                print(data.decode(), flush=True)
                if not q.consume():
                    print("consume failed", flush=True)
                    break
    finally:
        zk.stop()
        zk.close()


if __name__ == "__main__":
    main()
