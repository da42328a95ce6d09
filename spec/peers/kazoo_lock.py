"""kazoo's lock family as a peer of zkcoord's layout = "kazoo" (spec/kazoo_layout_spec.lua).

    kazoo_lock.py HOSTS PATH KIND [MAX_LEASES]

KIND is lock, read, write (kazoo's Lock, ReadLock, WriteLock), semaphore,
election or party (kazoo's ShallowParty: joins as "kazoo", prints the
members once one more is there, "enter" and "done", and leaves). Holds twice, as "kazoo": the first time until one more
contender is in line (the zkcoord process), then releases and takes it
again, which waits for that contender. Prints, one a line:

    enter T / exit T       CLOCK_MONOTONIC seconds, after the acquire returned
                           and before the release (zkcoord's proc.now())
    contenders JSON        what kazoo saw while holding the first time
    done
Bounded: every wait is at most WAIT seconds, then it exits with an error.
"""
import json
import sys
import threading
import time

from kazoo.client import KazooClient

WAIT = 30


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def say(*words):
    print(*words, flush=True)


def wait_children(zk, path, n):
    """Waits (on a children watch) until `path` has at least n children."""
    deadline = now() + WAIT
    while True:
        changed = threading.Event()
        names = zk.get_children(path, watch=lambda _event: changed.set())
        if len(names) >= n:
            return names
        left = deadline - now()
        if left <= 0 or not changed.wait(left):
            raise SystemExit("%s: still %d children" % (path, len(names)))


def hold(zk, path, kind, max_leases, first):
    """One hold: acquire, log, (first time) wait for the other contender."""
    if kind == "semaphore":
        sem = zk.Semaphore(path, "kazoo", max_leases=max_leases)
        if not sem.acquire(timeout=WAIT):
            raise SystemExit("semaphore: no lease")
        say("enter", now())
        if first:
            # the other one waits on the semaphore's lock, or holds a lease
            wait_children(zk, path + "-__lock__", 1)
            say("contenders", json.dumps(sorted(sem.lease_holders())))
        say("exit", now())
        sem.release()
        return
    if kind == "election":
        election = zk.Election(path, "kazoo")

        def lead():
            say("enter", now())
            if first:
                wait_children(zk, path, 2)
                say("contenders", json.dumps(election.contenders()))
            say("exit", now())

        timer = threading.Timer(WAIT, election.cancel)
        timer.start()
        election.run(lead)
        timer.cancel()
        return
    make = {"lock": zk.Lock, "read": zk.ReadLock, "write": zk.WriteLock}[kind]
    lock = make(path, "kazoo")
    if not lock.acquire(timeout=WAIT):
        raise SystemExit("%s: not acquired" % kind)
    say("enter", now())
    if first:
        wait_children(zk, path, 2)
        say("contenders", json.dumps(lock.contenders()))
    say("exit", now())
    lock.release()


def main():
    hosts, path, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    max_leases = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    try:
        if kind == "party":
            party = zk.ShallowParty(path, "kazoo")
            party.join()
            say("enter", now())
            wait_children(zk, path, 2)
            say("contenders", json.dumps(sorted(party)))
            party.leave()
            say("done")
            return
        hold(zk, path, kind, max_leases, True)
        hold(zk, path, kind, max_leases, False)
        say("done")
    finally:
        zk.stop()
        zk.close()


if __name__ == "__main__":
    main()
