"""kazoo_bench.py: the kazoo (Python) peer for bench/run.lua.

    python3 kazoo_bench.py SCENARIO HOSTS PATH DURATION_S [EXTRA]

Prints one line of key=value pairs. Uses kazoo's own recipes with their
defaults, as a kazoo user would: Lock, ReadLock/WriteLock, Counter (whose
retries go through the client's command retry: 0.1 s first delay, doubling,
+-40% jitter). On kazoo < 2.9 the ReadLock gets upstream's deadlock fix
(see FixedReadLock): without it the rwlock row deadlocks within a second. Scenarios and the BENCH_SYNC / BENCH_ID / BENCH_WARMUP
environment contract: see bench/run.lua. counter_threads: EXTRA threads
(default 16) of this one process, each with its own Counter on the one
client (kazoo's best form: one session per process); thread_min= the fewest
increments of a thread.

Scale curves for bench/scale.lua (SCENARIO HOSTS PATH SECONDS EXTRA; SECONDS
bounds each wait, and what did not finish in it is reported):
  scale_lock     EXTRA = "W,S": W threads of this process contend for one
                 Lock at PATH, spread over S sessions (thread k on session
                 k mod S). Once the line has formed (W nodes under the
                 lock) and 0.5 s more, SECONDS are measured: handoffs/s and
                 the handoff latency (the holder's release call to the next
                 grant, on this process's clock).
  scale_locks    EXTRA = N: one session takes N Locks on PATH/l<k> (16
                 threads acquiring in turn), then its session is expired:
                 Python memory per held lock (tracemalloc) and the time
                 from the expiry to the client's LOST state.
  scale_watches  EXTRA = N: a DataWatch on each of the N nodes
                 PATH/n1..nN (the driver made them): memory per watch,
                 delivery latency of a change set by a second session, and
                 the time after an expiry until the server holds as many
                 watches as before (the four-letter word wchs).
"""
import faulthandler
import logging
import os
import random
import re
import signal
import sys
import threading
import time

import kazoo.version
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError
from kazoo.recipe.counter import Counter
from kazoo.recipe.lock import Lock, ReadLock, WriteLock
from kazoo.recipe.watchers import DataWatch
from kazoo.retry import ForceRetryError


class CountingCounter(Counter):
    """kazoo's Counter, counting the compare-and-sets that lost a race
    (each one raises ForceRetryError into the client's retry loop)."""

    failed_cas = 0
    _lock = threading.Lock()    # counter_threads: threads count together

    def _inner_change(self, value):
        try:
            return Counter._inner_change(self, value)
        except ForceRetryError:
            with CountingCounter._lock:
                CountingCounter.failed_cas += 1
            raise


class FixedReadLock(ReadLock):
    """kazoo 2.8's ReadLock with upstream's fix for its deadlock
    (python-zk/kazoo#649, fixed by #650): its own __rlock__ node does not
    match its contenders pattern (__lock__ only), so a reader waits for the
    LAST writer in line, even one queued after it, which waits for the
    reader. Here only lower nodes count, as in ZooKeeper's shared-lock
    recipe; the round trips are kazoo's."""

    def _get_predecessor(self, node):
        children = self.client.get_children(self.path)
        if node not in children:
            raise ForceRetryError()
        mine = int(re.search(r"(-?\d{10})$", node).group(1))
        best, predecessor = None, None
        for child in children:
            m = self._contenders_re.search(child)
            if m is not None:
                seq = int(m.group(1))
                if seq < mine and (best is None or seq > best):
                    best, predecessor = seq, child
        return predecessor


def kazoo_needs_readlock_fix():
    v = tuple(int(x) for x in re.findall(r"\d+", kazoo.version.__version__)[:2])
    return v < (2, 9)


def rss():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[:5]] = int(line.split()[1])
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


def barrier():
    """The driver's start barrier; returns the monotonic start time."""
    d = os.environ.get("BENCH_SYNC")
    if not d:
        return time.monotonic()
    with open(os.path.join(d, "ready." + os.environ.get("BENCH_ID", "0")), "w"):
        pass
    go = os.path.join(d, "go")
    deadline = time.monotonic() + 300
    start = None
    while time.monotonic() < deadline:
        try:
            with open(go) as f:
                start = float(f.read().strip())
            break
        except (OSError, ValueError):
            time.sleep(0.002)
    if start is not None:
        delay = start - time.time()
        if delay > 0:
            time.sleep(delay)
    return time.monotonic()


def pct(lat, p):
    if not lat:
        return 0.0
    return lat[int(p * (len(lat) - 1) + 0.5)] * 1000.0


# ---------------------------------------------------------------------------
# Scale curves (bench/scale.lua).

def new_client(hosts, timeout=10.0):
    c = KazooClient(hosts=hosts, timeout=timeout)
    c.start(timeout=30)
    return c


def expire(hosts, zk, lost=None):
    """Expires zk's session: a second handle joins it and closes it. The
    client may win its session back meanwhile (the close then fails), so
    again until it has lost it (`lost`: a dict whose "at" is set then) or
    has another session. Returns the time the close that took effect was
    sent (the server may tell zk before it answers it)."""
    sid = zk.client_id
    t = time.monotonic()
    for _ in range(10):
        other = KazooClient(hosts=hosts, client_id=sid, timeout=zk._session_timeout / 1000.0)
        other.start(timeout=30)
        t = time.monotonic()
        other.stop()
        other.close()
        t1 = time.monotonic()
        while time.monotonic() - t1 < 2 and zk.client_id == sid and not (lost and lost["at"]):
            time.sleep(0.005)
        if zk.client_id != sid or (lost and lost["at"]):
            break
    return t


def server_watches(zk):
    m = re.search(r"Total watches:(\d+)", zk.command(b"wchs"))
    return int(m.group(1)) if m else -1


LINE = 90    # scale_lock: the longest wait for the line to form


def scale_lock(hosts, path, seconds, w, s):
    t0 = time.monotonic()
    clients = [new_client(hosts) for _ in range(s)]
    st = {"last": -1.0, "grants": 0, "begin": float("inf"), "end": float("inf")}
    lat = []

    def work(k):
        lock = Lock(clients[k % s], path)
        while time.monotonic() < st["end"]:
            if not lock.acquire(timeout=seconds + 60):
                continue
            ta = time.monotonic()
            lr = st["last"]
            if st["begin"] <= ta <= st["end"]:
                st["grants"] += 1
                if lr >= st["begin"]:
                    lat.append(ta - lr)
            st["last"] = time.monotonic()
            lock.release()

    for k in range(w):
        t = threading.Thread(target=work, args=(k,), daemon=True)
        t.start()
    setup = time.monotonic() - t0
    # The window opens once the line has formed (W nodes under the lock:
    # the first burst of W creates and listings is over), at most LINE s.
    line = -1
    while time.monotonic() - t0 < LINE:
        stat = clients[0].exists(path)
        if stat is not None and stat.numChildren >= w:
            line = time.monotonic() - t0
            break
        time.sleep(0.02)
    st["begin"] = time.monotonic() + 0.5
    st["end"] = st["begin"] + seconds
    while time.monotonic() < st["end"] + 0.05:
        time.sleep(0.02)
    g = st["grants"]
    lat.sort()
    print("grants=%d secs=%.3f rate=%.1f p50_ms=%.3f p99_ms=%.3f setup_s=%.2f line_s=%.2f"
          " sessions=%d threads=%d rss_kb=%d" % (g, seconds, g / seconds, pct(lat, 0.5),
                                                 pct(lat, 0.99), setup, line, s, w, rss()[0]))
    sys.stdout.flush()
    os._exit(0)       # waiting threads are abandoned; their sessions expire


def scale_locks(hosts, path, bound, n):
    import tracemalloc
    zk = new_client(hosts)
    zk.ensure_path(path)
    lost = {"at": None}

    def listener(state):
        if state == KazooState.LOST and lost["at"] is None:
            lost["at"] = time.monotonic()

    zk.add_listener(listener)
    rss0 = rss()[0]
    tracemalloc.start()
    heap0 = tracemalloc.get_traced_memory()[0]
    locks = [None] * n
    workers = 16
    t0 = time.monotonic()
    deadline = t0 + bound

    def work(first):
        for k in range(first, n, workers):
            if time.monotonic() > deadline:
                return
            lk = Lock(zk, "%s/l%d" % (path, k))
            try:
                if lk.acquire(timeout=60):
                    locks[k] = lk
            except Exception:  # counted as not held
                pass

    ts = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(max(0.1, deadline - time.monotonic() + 60))
    took = time.monotonic() - t0
    held = sum(1 for lk in locks if lk is not None)
    heap1 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    rss1 = rss()[0]
    te = expire(hosts, zk, lost)
    while lost["at"] is None and time.monotonic() - te < bound:
        time.sleep(0.005)
    print("held=%d of=%d acquire_s=%.2f rate=%.1f heap_per_lock=%.0f rss_per_lock=%.0f lost_s=%.3f"
          " workers=%d" % (held, n, took, held / took, (heap1 - heap0) / max(1, held),
                           (rss1 - rss0) * 1024.0 / max(1, held),
                           -1 if lost["at"] is None else lost["at"] - te, workers))
    sys.stdout.flush()
    os._exit(0)


def scale_watches(hosts, path, bound, n):
    import tracemalloc
    zk = new_client(hosts, 4.0)
    wr = new_client(hosts)
    base = server_watches(wr)
    seen = [None] * (n + 1)
    rss0 = rss()[0]
    tracemalloc.start()
    heap0 = tracemalloc.get_traced_memory()[0]
    watches = []
    t0 = time.monotonic()
    for k in range(1, n + 1):
        if time.monotonic() - t0 > bound:
            break

        def fn(data, stat, key=k):
            seen[key] = data

        watches.append(DataWatch(zk, "%s/n%d" % (path, k), fn))
    arm = time.monotonic() - t0
    heap1 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    rss1 = rss()[0]
    if len(watches) < n:
        print("dnf=arm armed=%d of=%d secs=%.1f" % (len(watches), n, arm))
        sys.stdout.flush()
        os._exit(0)
    rng = random.Random(42)
    lat = []
    for i in range(200):
        k = 1 + rng.randrange(n)
        v = ("v%d" % i).encode()
        t = time.monotonic()
        wr.set("%s/n%d" % (path, k), v)
        while seen[k] != v and time.monotonic() - t < 5:
            time.sleep(0.0001)
        lat.append(time.monotonic() - t)
    lat.sort()
    w0 = server_watches(wr)
    te = expire(hosts, zk)
    # expire() returned once the client had a new session: the old one's
    # watches are gone from the server, so count until all are back
    w = server_watches(wr)
    while w < w0 and time.monotonic() - te < bound:
        time.sleep(0.01)
        w = server_watches(wr)
    rearm = time.monotonic() - te if w >= w0 else -1
    print("watches=%d arm_s=%.2f heap_per_watch=%.0f rss_per_watch=%.0f p50_ms=%.3f p99_ms=%.3f"
          " rearm_s=%.3f server_watches=%d base=%d" % (
              n, arm, (heap1 - heap0) / n, (rss1 - rss0) * 1024.0 / n, pct(lat, 0.5),
              pct(lat, 0.99), rearm, w0, base))
    sys.stdout.flush()
    os._exit(0)


def scale(argv):
    scen, hosts, path, secs = argv[1], argv[2], argv[3], float(argv[4])
    extra = argv[5] if len(argv) > 5 else ""
    logging.basicConfig(level=logging.CRITICAL)
    if scen == "scale_lock":
        w, s = (int(x) for x in extra.split(","))
        scale_lock(hosts, path, secs, w, s)
    elif scen == "scale_locks":
        scale_locks(hosts, path, secs, int(extra))
    else:
        scale_watches(hosts, path, secs, int(extra))
    return 0


def main():
    if len(sys.argv) < 5:
        sys.stderr.write("usage: kazoo_bench.py SCENARIO HOSTS PATH DURATION_S [EXTRA]\n")
        return 2
    if sys.argv[1].startswith("scale_"):
        return scale(sys.argv)
    scen, hosts, path, duration = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    extra = sys.argv[5] if len(sys.argv) > 5 else None
    if scen not in ("lock_uncontended", "lock_contended", "rwlock", "counter", "hold",
                    "counter_threads", "lock_threads", "rwlock_threads"):
        print("error=unsupported_scenario")
        return 3
    read_pct = int(extra) if scen == "rwlock" and extra else 90
    nthreads = int(extra) if scen.endswith("_threads") and extra else 16
    warmup = float(os.environ.get("BENCH_WARMUP", "0.5"))
    logging.basicConfig(level=logging.ERROR)
    # kill -USR1 <pid> dumps every thread's stack to stderr (for a hang).
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    zk = KazooClient(hosts=hosts, timeout=10.0)
    zk.start(timeout=30)

    if scen == "hold":
        lock = Lock(zk, path)
        lock.acquire()
        time.sleep(0.5)
        r, h = rss()
        print("rss_kb=%d hwm_kb=%d" % (r, h))
        sys.stdout.flush()
        zk.stop()
        zk.close()
        return 0

    rng = random.Random(os.getpid())
    patched = scen == "rwlock" and kazoo_needs_readlock_fix()
    stats = {"reads": 0, "writes": 0}

    thread_clients = []    # lock_threads, rwlock_threads: a session per thread

    def thread_client(k):
        while len(thread_clients) <= k:
            c = KazooClient(hosts=hosts, timeout=10.0)
            c.start(timeout=30)
            thread_clients.append(c)
        return thread_clients[k]

    def loop_threads(p, end, measure, lat):
        """counter_threads: nthreads threads of this process, each with its
        own Counter on the one client, increment until `end`. lock_threads /
        rwlock_threads: each thread its own session and its own Lock (or
        ReadLock/WriteLock, read_pct reads)."""
        counts = [0] * nthreads
        lats = [[] for _ in range(nthreads)]
        clients = [thread_client(k) for k in range(nthreads)] if scen != "counter_threads" else []

        def work(k):
            trng = random.Random(os.getpid() * 31 + k)
            if scen == "counter_threads":
                counter = CountingCounter(zk, p, default=0)
            elif scen == "lock_threads":
                lock = Lock(clients[k], p)
            else:
                rl = (FixedReadLock if kazoo_needs_readlock_fix() else ReadLock)(clients[k], p)
                wl = WriteLock(clients[k], p)
            while time.monotonic() < end:
                t0 = time.monotonic()
                if scen == "counter_threads":
                    counter += 1
                else:
                    lk = lock if scen == "lock_threads" else (
                        rl if trng.randrange(100) < read_pct else wl)
                    lk.acquire()
                    lk.release()
                t1 = time.monotonic()
                if t1 <= end:
                    counts[k] += 1
                    if measure:
                        lats[k].append(t1 - t0)

        ts = [threading.Thread(target=work, args=(k,)) for k in range(nthreads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        stats["thread_min"] = min(counts)
        if measure:
            for l in lats:
                lat.extend(l)
        return sum(counts)

    def loop(p, end, measure, lat):
        if scen.endswith("_threads"):
            return loop_threads(p, end, measure, lat)
        ops = 0
        if scen == "counter":
            counter = CountingCounter(zk, p, default=0)
        elif scen == "rwlock":
            rl = (FixedReadLock if patched else ReadLock)(zk, p)
            wl = WriteLock(zk, p)
        else:
            lock = Lock(zk, p)
        while time.monotonic() < end:
            t0 = time.monotonic()
            if scen == "counter":
                counter += 1
            else:
                if scen == "rwlock":
                    is_read = rng.randrange(100) < read_pct
                    lk = rl if is_read else wl
                    stats["reads" if is_read else "writes"] += 1
                else:
                    lk = lock
                lk.acquire()
                lk.release()     # the critical section is empty
            t1 = time.monotonic()
            if t1 <= end:
                ops += 1
                if measure:
                    lat.append(t1 - t0)
        return ops

    try:
        zk.create(path, b"0" if scen.startswith("counter") else b"")
    except NodeExistsError:
        pass
    if warmup > 0:
        loop("%s-warm-%s" % (path, os.environ.get("BENCH_ID", "0")),
             time.monotonic() + warmup, False, None)
        stats["reads"] = stats["writes"] = 0
        CountingCounter.failed_cas = 0

    lat = []
    t0 = barrier()
    ops = loop(path, t0 + duration, True, lat)
    t1 = min(time.monotonic(), t0 + duration)
    lat.sort()
    r, h = rss()
    line = "ops=%d secs=%.3f rate=%.1f p50_ms=%.3f p99_ms=%.3f" % (
        ops, t1 - t0, ops / (t1 - t0), pct(lat, 0.5), pct(lat, 0.99))
    if scen.startswith("counter"):
        line += " failed_cas=%d" % CountingCounter.failed_cas
    if scen.endswith("_threads"):
        line += " threads=%d thread_min=%d" % (nthreads, stats["thread_min"])
    if scen == "rwlock":
        line += " reads=%d writes=%d patched_readlock=%d" % (
            stats["reads"], stats["writes"], 1 if patched else 0)
    line += " rss_kb=%d hwm_kb=%d" % (r, h)
    print(line)
    sys.stdout.flush()
    for c in thread_clients:
        c.stop()
        c.close()
    zk.stop()
    zk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
