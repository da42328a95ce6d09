// CuratorBench: the Curator (Java) peer for bench/run.lua.
//
//   java -cp <build>:<curator and zookeeper jars> CuratorBench SCENARIO HOSTS PATH DURATION_S [EXTRA]
//
// Prints one line of key=value pairs. Uses Curator's recipes as a Curator
// user would: InterProcessMutex, InterProcessReadWriteLock,
// DistributedAtomicLong (with RetryNTimes: BENCH_CURATOR_RETRY="n,ms",
// default "100,100": the best of the sleeps tried here at 16 contenders,
// about 890 increments/s against about 64/s with 1 ms; a failed
// compare-and-set is an optimistic try beyond the first, from
// AtomicValue.getStats().getOptimisticTries()). Logging goes
// through slf4j; the driver puts slf4j-nop on the classpath, so nothing is
// logged. Scenarios and the BENCH_SYNC / BENCH_ID / BENCH_WARMUP environment
// contract: see bench/run.lua. counter_threads: EXTRA threads (default 16)
// in this one JVM, each with its own DistributedAtomicLong on the one
// client (Curator's best form); thread_min= the fewest increments of a
// thread.
//
// Scale curves for bench/scale.lua (SCENARIO HOSTS PATH SECONDS EXTRA):
//   scale_lock    EXTRA = "W,S": W threads of this JVM contend for one
//                 InterProcessMutex at PATH, spread over S sessions (thread
//                 k on session k mod S); each acquires and releases at once.
//                 Once the line has formed (W nodes under the lock) and
//                 0.5 s more, SECONDS are measured: handoffs/s, and the
//                 handoff latency (the holder's release call to the next
//                 grant, on this JVM's clock).
//   scale_locks   EXTRA = N: one session takes N InterProcessMutex on
//                 PATH/l<k> (16 threads acquiring in turn), then its
//                 session is expired: JVM heap used after GC per held lock,
//                 and the time from the expiry to Curator's LOST.
//   scale_watches EXTRA = N: a CuratorCache (SINGLE_NODE_CACHE) with a
//                 listener on each of the N nodes PATH/n1..nN (the driver
//                 made them): heap per watch, delivery latency of a change
//                 set by a second session, and the time after an expiry
//                 until the server holds as many watches as before (wchs).
// SECONDS bounds each wait of the scale scenarios; what did not finish
// in it is reported (a key =-1 or dnf=...).
import java.io.BufferedReader;
import java.io.File;
import java.io.FileReader;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.Locale;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.KeeperException;

public final class CuratorBench {
    private static String scen;
    private static int readPct = 90;
    private static int retryN = 100, retryMs = 100;
    private static long failedCas, failedIncrements, reads, writes;
    private static double[] lat = new double[1 << 16];
    private static int nlat;
    private static final Random rng = new Random(ProcessHandle.current().pid());

    private static double mono() {
        return System.nanoTime() / 1e9;
    }

    private static long[] rss() throws Exception {
        long r = 0, h = 0;
        try (BufferedReader in = new BufferedReader(new FileReader("/proc/self/status"))) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.startsWith("VmRSS:")) {
                    r = Long.parseLong(line.substring(6).trim().split("\\s+")[0]);
                } else if (line.startsWith("VmHWM:")) {
                    h = Long.parseLong(line.substring(6).trim().split("\\s+")[0]);
                }
            }
        }
        return new long[] { r, h };
    }

    /** The driver's start barrier; returns the monotonic start time. */
    private static double barrier() throws Exception {
        String dir = System.getenv("BENCH_SYNC");
        if (dir == null || dir.isEmpty()) {
            return mono();
        }
        String id = System.getenv("BENCH_ID");
        new File(dir, "ready." + (id == null ? "0" : id)).createNewFile();
        Path go = Paths.get(dir, "go");
        double deadline = mono() + 300;
        Double start = null;
        while (mono() < deadline) {
            try {
                start = Double.parseDouble(new String(Files.readAllBytes(go)).trim());
                break;
            } catch (Exception e) {
                Thread.sleep(2);
            }
        }
        if (start != null) {
            long delayMs = (long) ((start - System.currentTimeMillis() / 1000.0) * 1000);
            if (delayMs > 0) {
                Thread.sleep(delayMs);
            }
        }
        return mono();
    }

    private static void record(double secs) {
        if (nlat == lat.length) {
            lat = Arrays.copyOf(lat, lat.length * 2);
        }
        lat[nlat++] = secs;
    }

    private static double pct(double p) {
        if (nlat == 0) {
            return 0;
        }
        return lat[(int) (p * (nlat - 1) + 0.5)] * 1000.0;
    }

    private static int threads = 16;
    private static long threadMin;
    private static String hostsArg;
    private static CuratorFramework[] threadClients;   // lock_threads, rwlock_threads

    /** One session per thread for the lock rows (made once, before the
     *  barrier): the process rows' topology, with threads for processes. */
    private static CuratorFramework threadClient(int k) throws Exception {
        if (threadClients == null) {
            threadClients = new CuratorFramework[threads];
        }
        if (threadClients[k] == null) {
            CuratorFramework c = CuratorFrameworkFactory.newClient(hostsArg, 10000, 15000,
                    new ExponentialBackoffRetry(100, 3));
            c.start();
            if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) {
                throw new Exception("thread client did not connect");
            }
            threadClients[k] = c;
        }
        return threadClients[k];
    }

    /** counter_threads: `threads` threads of this JVM, each with its own
     *  DistributedAtomicLong on the one client, increment until `end`.
     *  lock_threads / rwlock_threads: each thread its own session and its
     *  own InterProcessMutex / InterProcessReadWriteLock (readPct reads). */
    private static long loopThreads(CuratorFramework client, String path, double end,
                                    boolean measure) throws Exception {
        final long[] ops = new long[threads];
        final long[] failed = new long[threads];
        final long[] failedInc = new long[threads];
        final double[][] lats = new double[threads][];
        final int[] nlats = new int[threads];
        final Exception[] errs = new Exception[threads];
        Thread[] ts = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            final int k = i;
            final boolean counting = scen.equals("counter_threads");
            final DistributedAtomicLong counter = counting
                ? new DistributedAtomicLong(client, path, new RetryNTimes(retryN, retryMs)) : null;
            final InterProcessMutex mutex = scen.equals("lock_threads")
                ? new InterProcessMutex(threadClient(k), path) : null;
            final InterProcessReadWriteLock rw = scen.equals("rwlock_threads")
                ? new InterProcessReadWriteLock(threadClient(k), path) : null;
            final Random trng = new Random(ProcessHandle.current().pid() * 31 + k);
            ts[i] = new Thread(() -> {
                double[] l = new double[1 << 12];
                int nl = 0;
                try {
                    while (mono() < end) {
                        double t0 = mono();
                        if (!counting) {
                            InterProcessMutex m = mutex;
                            if (rw != null) {
                                m = trng.nextInt(100) < readPct ? rw.readLock() : rw.writeLock();
                            }
                            m.acquire();
                            m.release();    // the critical section is empty
                            double t1 = mono();
                            if (t1 <= end) {
                                ops[k]++;
                                if (measure) {
                                    if (nl == l.length) {
                                        l = Arrays.copyOf(l, l.length * 2);
                                    }
                                    l[nl++] = t1 - t0;
                                }
                            }
                            continue;
                        }
                        AtomicValue<Long> v = counter.increment();
                        long tries = v.getStats().getOptimisticTries();
                        double t1 = mono();
                        if (v.succeeded()) {
                            failed[k] += Math.max(0, tries - 1);
                        } else {
                            failed[k] += tries;
                            failedInc[k]++;
                            continue;
                        }
                        if (t1 <= end) {
                            ops[k]++;
                            if (measure) {
                                if (nl == l.length) {
                                    l = Arrays.copyOf(l, l.length * 2);
                                }
                                l[nl++] = t1 - t0;
                            }
                        }
                    }
                } catch (Exception e) {
                    errs[k] = e;
                }
                lats[k] = l;
                nlats[k] = nl;
            });
            ts[i].start();
        }
        long total = 0;
        threadMin = Long.MAX_VALUE;
        for (int i = 0; i < threads; i++) {
            ts[i].join();
            if (errs[i] != null) {
                throw errs[i];
            }
            total += ops[i];
            threadMin = Math.min(threadMin, ops[i]);
            failedCas += failed[i];
            failedIncrements += failedInc[i];
            for (int j = 0; j < nlats[i]; j++) {
                record(lats[i][j]);
            }
        }
        return total;
    }

    private static long loop(CuratorFramework client, String path, double end, boolean measure)
            throws Exception {
        if (scen.endsWith("_threads")) {
            return loopThreads(client, path, end, measure);
        }
        long ops = 0;
        InterProcessMutex mutex = null;
        InterProcessReadWriteLock rw = null;
        DistributedAtomicLong counter = null;
        if (scen.equals("counter")) {
            counter = new DistributedAtomicLong(client, path, new RetryNTimes(retryN, retryMs));
        } else if (scen.equals("rwlock")) {
            rw = new InterProcessReadWriteLock(client, path);
        } else {
            mutex = new InterProcessMutex(client, path);
        }
        while (mono() < end) {
            double t0 = mono();
            boolean counted = true;
            if (counter != null) {
                AtomicValue<Long> v = counter.increment();
                long tries = v.getStats().getOptimisticTries();
                if (v.succeeded()) {
                    failedCas += Math.max(0, tries - 1);
                } else {
                    failedCas += tries;
                    failedIncrements++;
                    counted = false;
                }
            } else {
                InterProcessMutex m = mutex;
                if (rw != null) {
                    boolean isRead = rng.nextInt(100) < readPct;
                    m = isRead ? rw.readLock() : rw.writeLock();
                    if (isRead) {
                        reads++;
                    } else {
                        writes++;
                    }
                }
                m.acquire();
                m.release();    // the critical section is empty
            }
            double t1 = mono();
            if (t1 <= end && counted) {
                ops++;
                if (measure) {
                    record(t1 - t0);
                }
            }
        }
        return ops;
    }

    // ---------------------------------------------------------------------
    // Scale curves (bench/scale.lua).

    private static CuratorFramework newClient(String hosts, int sessionMs) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.newClient(hosts, sessionMs, 15000,
                new ExponentialBackoffRetry(100, 3));
        c.start();
        if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new Exception("connect");
        }
        return c;
    }

    /** Heap in use after a full collection (bytes). */
    private static long heapUsed() throws Exception {
        Runtime rt = Runtime.getRuntime();
        for (int i = 0; i < 3; i++) {
            System.gc();
            Thread.sleep(100);
        }
        return rt.totalMemory() - rt.freeMemory();
    }

    /** Expires the session of `c`: a second handle joins it and closes
     *  it. The client may win its session back meanwhile (the close then
     *  fails), so again until Curator has another session. Returns the time
     *  the close that took effect was sent (the server may tell `c` before
     *  it answers it). */
    private static double expire(String hosts, CuratorFramework c) throws Exception {
        ZooKeeper zk = c.getZookeeperClient().getZooKeeper();
        long sid = zk.getSessionId();
        byte[] pw = zk.getSessionPasswd();
        double t = mono();
        for (int i = 0; i < 10; i++) {
            CountDownLatch up = new CountDownLatch(1);
            ZooKeeper other = new ZooKeeper(hosts, 10000, e -> {
                if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                    up.countDown();
                }
            }, sid, pw);
            up.await(30, TimeUnit.SECONDS);
            t = mono();
            other.close();
            double t1 = mono();
            while (mono() - t1 < 2 && sessionOf(c) == sid) {
                Thread.sleep(5);
            }
            if (sessionOf(c) != sid) {
                break;
            }
        }
        return t;
    }

    /** The session id of `c` (0 while it has none). */
    private static long sessionOf(CuratorFramework c) {
        try {
            return c.getZookeeperClient().getZooKeeper().getSessionId();
        } catch (Exception e) {
            return 0;
        }
    }

    private static final Pattern TOTAL_WATCHES = Pattern.compile("Total watches:(\\d+)");

    /** The server's number of watches (four-letter word wchs). */
    private static long serverWatches(String hosts) throws Exception {
        String hp = hosts.split(",")[0];
        int colon = hp.lastIndexOf(':');
        try (Socket s = new Socket(hp.substring(0, colon), Integer.parseInt(hp.substring(colon + 1)))) {
            OutputStream o = s.getOutputStream();
            o.write("wchs".getBytes());
            o.flush();
            InputStream in = s.getInputStream();
            String text = new String(in.readAllBytes());
            Matcher m = TOTAL_WATCHES.matcher(text);
            return m.find() ? Long.parseLong(m.group(1)) : -1;
        }
    }

    private static final double LINE = 90;   // scale_lock: the longest wait for the line to form
    private static volatile double lastRelease = -1;
    private static volatile double windowBegin = Double.MAX_VALUE, windowEnd = Double.MAX_VALUE;

    private static void scaleLock(String hosts, String path, double seconds, int w, int s)
            throws Exception {
        double t0 = mono();
        CuratorFramework[] cs = new CuratorFramework[s];
        for (int i = 0; i < s; i++) {
            cs[i] = newClient(hosts, 10000);
        }
        final AtomicLong grants = new AtomicLong();
        final Exception[] err = new Exception[1];
        for (int i = 0; i < w; i++) {
            final InterProcessMutex m = new InterProcessMutex(cs[i % s], path);
            Thread t = new Thread(() -> {
                try {
                    while (mono() < windowEnd) {
                        if (!m.acquire((long) (seconds + 60), TimeUnit.SECONDS)) {
                            continue;
                        }
                        double ta = mono();
                        double lr = lastRelease;
                        if (ta >= windowBegin && ta <= windowEnd) {
                            grants.incrementAndGet();
                            if (lr >= windowBegin) {
                                synchronized (CuratorBench.class) {
                                    record(ta - lr);
                                }
                            }
                        }
                        lastRelease = mono();
                        m.release();
                    }
                } catch (Exception e) {
                    err[0] = e;
                }
            });
            t.setDaemon(true);
            t.start();
        }
        double setup = mono() - t0;
        // The window opens once the line has formed (W nodes under the
        // lock: the first burst of W creates and listings is over).
        double line = -1;
        while (mono() - t0 < LINE) {
            org.apache.zookeeper.data.Stat st = cs[0].checkExists().forPath(path);
            if (st != null && st.getNumChildren() >= w) {
                line = mono() - t0;
                break;
            }
            Thread.sleep(20);
        }
        windowBegin = mono() + 0.5;
        windowEnd = windowBegin + seconds;
        while (mono() < windowEnd + 0.05) {
            Thread.sleep(20);
        }
        long g = grants.get();
        synchronized (CuratorBench.class) {
            Arrays.sort(lat, 0, nlat);
        }
        System.out.println(String.format(Locale.ROOT,
                "grants=%d secs=%.3f rate=%.1f p50_ms=%.3f p99_ms=%.3f setup_s=%.2f line_s=%.2f sessions=%d"
                + " threads=%d rss_kb=%d%s", g, seconds, g / seconds, pct(0.5), pct(0.99), setup, line, s, w,
                rss()[0],
                err[0] != null ? " error=" + err[0].toString().replace(' ', '_') : ""));
        System.out.flush();
        System.exit(0);      // waiting threads are abandoned (daemons); their sessions expire
    }

    private static void scaleLocks(String hosts, String path, double bound, int n) throws Exception {
        CuratorFramework c = newClient(hosts, 10000);
        c.create().creatingParentsIfNeeded().forPath(path);
        final double[] lostAt = { -1 };
        c.getConnectionStateListenable().addListener((cl, st) -> {
            if (st == ConnectionState.LOST && lostAt[0] < 0) {
                lostAt[0] = mono();
            }
        });
        long heap0 = heapUsed();
        long rss0 = rss()[0];
        final InterProcessMutex[] locks = new InterProcessMutex[n];
        final int workers = 16;
        double t0 = mono();
        final double deadline = t0 + bound;
        Thread[] ts = new Thread[workers];
        for (int i = 0; i < workers; i++) {
            final int first = i;
            ts[i] = new Thread(() -> {
                try {
                    for (int k = first; k < n && mono() < deadline; k += workers) {
                        InterProcessMutex m = new InterProcessMutex(c, path + "/l" + k);
                        if (m.acquire(60, TimeUnit.SECONDS)) {
                            locks[k] = m;
                        }
                    }
                } catch (Exception e) {
                    // counted as not held
                }
            });
            ts[i].setDaemon(true);
            ts[i].start();
        }
        for (Thread t : ts) {
            t.join((long) Math.max(1, (deadline - mono() + 60) * 1000));
        }
        double took = mono() - t0;
        int held = 0;
        for (InterProcessMutex m : locks) {
            if (m != null) {
                held++;
            }
        }
        long heap1 = heapUsed();
        long rss1 = rss()[0];
        double te = expire(hosts, c);
        while (lostAt[0] < 0 && mono() - te < bound) {
            Thread.sleep(5);
        }
        System.out.println(String.format(Locale.ROOT,
                "held=%d of=%d acquire_s=%.2f rate=%.1f heap_per_lock=%.0f rss_per_lock=%.0f lost_s=%.3f"
                + " workers=%d", held, n, took, held / took, (heap1 - heap0) / (double) Math.max(1, held),
                (rss1 - rss0) * 1024.0 / Math.max(1, held), lostAt[0] < 0 ? -1 : lostAt[0] - te, workers));
        System.out.flush();
        System.exit(0);
    }

    private static void scaleWatches(String hosts, String path, double bound, int n) throws Exception {
        CuratorFramework c = newClient(hosts, 4000);
        CuratorFramework wr = newClient(hosts, 10000);
        long base = serverWatches(hosts);
        final AtomicReferenceArray<String> seen = new AtomicReferenceArray<>(n + 1);
        final CountDownLatch initialized = new CountDownLatch(n);
        long heap0 = heapUsed();
        long rss0 = rss()[0];
        CuratorCache[] caches = new CuratorCache[n + 1];
        double t0 = mono();
        int armed = 0;
        for (int k = 1; k <= n && mono() - t0 < bound; k++) {
            final int key = k;
            CuratorCache cc = CuratorCache.build(c, path + "/n" + k, CuratorCache.Options.SINGLE_NODE_CACHE);
            cc.listenable().addListener(CuratorCacheListener.builder()
                    .forCreatesAndChanges((before, node) -> seen.set(key, new String(node.getData())))
                    .forInitialized(initialized::countDown)
                    .build());
            cc.start();
            caches[k] = cc;
            armed = k;
        }
        boolean all = armed == n
                && initialized.await((long) Math.max(1, (bound - (mono() - t0)) * 1000), TimeUnit.MILLISECONDS);
        double arm = mono() - t0;
        if (!all) {
            System.out.println(String.format(Locale.ROOT, "dnf=arm armed=%d of=%d secs=%.1f", armed, n, arm));
            System.out.flush();
            System.exit(0);
        }
        long heap1 = heapUsed();
        long rss1 = rss()[0];
        Random r = new Random(42);
        for (int i = 0; i < 200; i++) {
            int k = 1 + r.nextInt(n);
            String v = "v" + i;
            double t = mono();
            wr.setData().forPath(path + "/n" + k, v.getBytes());
            while (!v.equals(seen.get(k)) && mono() - t < 5) {
                java.util.concurrent.locks.LockSupport.parkNanos(50_000);
            }
            record(mono() - t);
        }
        Arrays.sort(lat, 0, nlat);
        long w0 = serverWatches(hosts);
        double te = expire(hosts, c);
        // expire() returned once the client had a new session: the old
        // one's watches are gone from the server, so count until all are back
        long w;
        while ((w = serverWatches(hosts)) < w0 && mono() - te < bound) {
            Thread.sleep(10);
        }
        double rearm = w >= w0 ? mono() - te : -1;
        System.out.println(String.format(Locale.ROOT,
                "watches=%d arm_s=%.2f heap_per_watch=%.0f rss_per_watch=%.0f p50_ms=%.3f p99_ms=%.3f"
                + " rearm_s=%.3f server_watches=%d base=%d",
                n, arm, (heap1 - heap0) / (double) n, (rss1 - rss0) * 1024.0 / n, pct(0.5), pct(0.99),
                rearm, w0, base));
        System.out.flush();
        System.exit(0);
    }

    private static void scale(String[] args) throws Exception {
        String sc = args[0], hosts = args[1], path = args[2];
        double secs = Double.parseDouble(args[3]);
        String extra = args.length > 4 ? args[4] : "";
        if (sc.equals("scale_lock")) {
            String[] ws = extra.split(",");
            scaleLock(hosts, path, secs, Integer.parseInt(ws[0]), Integer.parseInt(ws[1]));
        } else if (sc.equals("scale_locks")) {
            scaleLocks(hosts, path, secs, Integer.parseInt(extra));
        } else {
            scaleWatches(hosts, path, secs, Integer.parseInt(extra));
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: CuratorBench SCENARIO HOSTS PATH DURATION_S [EXTRA]");
            System.exit(2);
        }
        scen = args[0];
        if (scen.startsWith("scale_")) {
            scale(args);
            return;
        }
        String hosts = args[1], path = args[2];
        double duration = Double.parseDouble(args[3]);
        if (!Arrays.asList("lock_uncontended", "lock_contended", "rwlock", "counter", "hold",
                           "counter_threads", "lock_threads", "rwlock_threads").contains(scen)) {
            System.out.println("error=unsupported_scenario");
            System.exit(3);
        }
        if (scen.equals("rwlock") && args.length > 4) {
            readPct = Integer.parseInt(args[4]);
        }
        if (scen.endsWith("_threads") && args.length > 4) {
            threads = Integer.parseInt(args[4]);
        }
        hostsArg = hosts;
        String retry = System.getenv("BENCH_CURATOR_RETRY");
        if (retry != null && retry.contains(",")) {
            retryN = Integer.parseInt(retry.split(",")[0].trim());
            retryMs = Integer.parseInt(retry.split(",")[1].trim());
        }
        String w = System.getenv("BENCH_WARMUP");
        double warmup = w == null ? 0.5 : Double.parseDouble(w);

        CuratorFramework client = CuratorFrameworkFactory.newClient(hosts, 10000, 15000,
                new ExponentialBackoffRetry(100, 3));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            System.out.println("error=connect");
            System.exit(1);
        }

        if (scen.equals("hold")) {
            InterProcessMutex m = new InterProcessMutex(client, path);
            m.acquire();
            Thread.sleep(500);
            long[] r = rss();
            System.out.println("rss_kb=" + r[0] + " hwm_kb=" + r[1]);
            System.out.flush();
            client.close();
            System.exit(0);
        }

        try {
            client.create().forPath(path, new byte[0]);   // empty: DistributedAtomicLong reads 0
        } catch (KeeperException.NodeExistsException e) {
            // made by another contender
        }
        if (warmup > 0) {
            String id = System.getenv("BENCH_ID");
            loop(client, path + "-warm-" + (id == null ? "0" : id), mono() + warmup, false);
            failedCas = failedIncrements = reads = writes = 0;
        }

        double t0 = barrier();
        long ops = loop(client, path, t0 + duration, true);
        double t1 = Math.min(mono(), t0 + duration);
        Arrays.sort(lat, 0, nlat);
        long[] r = rss();
        StringBuilder sb = new StringBuilder();
        sb.append(String.format(Locale.ROOT, "ops=%d secs=%.3f rate=%.1f p50_ms=%.3f p99_ms=%.3f", ops, t1 - t0,
                ops / (t1 - t0), pct(0.5), pct(0.99)));
        if (scen.startsWith("counter")) {
            sb.append(" failed_cas=").append(failedCas);
            sb.append(" failed_increments=").append(failedIncrements);
        }
        if (scen.endsWith("_threads")) {
            sb.append(" threads=").append(threads).append(" thread_min=").append(threadMin);
        }
        if (scen.equals("rwlock")) {
            sb.append(" reads=").append(reads).append(" writes=").append(writes);
        }
        sb.append(" rss_kb=").append(r[0]).append(" hwm_kb=").append(r[1]);
        System.out.println(sb);
        System.out.flush();
        if (threadClients != null) {
            for (CuratorFramework c : threadClients) {
                if (c != null) {
                    c.close();
                }
            }
        }
        client.close();
        System.exit(0);
    }
}
