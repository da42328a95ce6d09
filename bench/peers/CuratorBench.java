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
import java.io.BufferedReader;
import java.io.File;
import java.io.FileReader;
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

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: CuratorBench SCENARIO HOSTS PATH DURATION_S [EXTRA]");
            System.exit(2);
        }
        scen = args[0];
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
