// CuratorCounterPeer: Curator's counters for spec/counter_curator_spec.lua,
// which runs it beside zkcoord counters (format int32 / int64) on one node.
//
//   java -cp <dir>:<curator jars> CuratorCounterPeer KIND ACTION HOSTS PATH [N THREADS GOFILE]
//
// KIND: shared (SharedCount: a 4-byte big-endian int) or atomic
// (DistributedAtomicLong: an 8-byte big-endian long).
// ACTION:
//   get            prints "value V"
//   set N          sets V = N (SharedCount.setCount / DistributedAtomicLong.forceSet),
//                  prints "ok"
//   add N THREADS GOFILE
//                  prints "ready", waits for GOFILE to exist, then THREADS
//                  threads of this JVM (each with its own recipe object on
//                  the one session: Curator's best form) increment N times
//                  each; every new value on a line "v V", then "done".
//                  An increment Curator gives up on prints "error ...".
import java.io.File;
import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;

public final class CuratorCounterPeer {
    private static final PrintStream out = System.out;

    private static synchronized void say(String s) {
        out.println(s);
        out.flush();
    }

    // One increment; returns the new value. SharedCount: the versioned
    // compare-and-set loop its javadoc describes; DistributedAtomicLong:
    // increment() under its retry policy (tried again while it fails).
    private static long increment(String kind, Object counter) throws Exception {
        for (int attempt = 0; attempt < 10000; attempt++) {
            if (kind.equals("shared")) {
                SharedCount sc = (SharedCount) counter;
                VersionedValue<Integer> v = sc.getVersionedValue();
                if (sc.trySetCount(v, v.getValue() + 1)) {
                    return v.getValue() + 1L;
                }
            } else {
                AtomicValue<Long> v = ((DistributedAtomicLong) counter).increment();
                if (v.succeeded()) {
                    return v.postValue();
                }
            }
        }
        throw new IllegalStateException("gave up after 10000 attempts");
    }

    private static Object open(CuratorFramework c, String kind, String path) throws Exception {
        if (kind.equals("shared")) {
            SharedCount sc = new SharedCount(c, path, 0);
            sc.start();
            return sc;
        }
        return new DistributedAtomicLong(c, path, new RetryNTimes(50, 10));
    }

    public static void main(String[] a) throws Exception {
        String kind = a[0], action = a[1], hosts = a[2], path = a[3];
        CuratorFramework c = CuratorFrameworkFactory.builder().connectString(hosts)
                .sessionTimeoutMs(10000).connectionTimeoutMs(5000)
                .retryPolicy(new ExponentialBackoffRetry(50, 5)).build();
        c.start();
        if (!c.blockUntilConnected(10, TimeUnit.SECONDS)) {
            say("error connect");
            System.exit(1);
        }
        if (action.equals("get")) {
            Object counter = open(c, kind, path);
            long v = kind.equals("shared") ? ((SharedCount) counter).getCount()
                                           : ((DistributedAtomicLong) counter).get().postValue();
            say("value " + v);
        } else if (action.equals("set")) {
            Object counter = open(c, kind, path);
            long n = Long.parseLong(a[4]);
            if (kind.equals("shared")) {
                ((SharedCount) counter).setCount((int) n);
            } else {
                ((DistributedAtomicLong) counter).forceSet(n);
            }
            say("ok");
        } else if (action.equals("add")) {
            final int n = Integer.parseInt(a[4]);
            int threads = Integer.parseInt(a[5]);
            File go = new File(a[6]);
            List<Object> counters = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                counters.add(open(c, kind, path));
            }
            say("ready");
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (!go.exists() && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
            List<Thread> ts = new ArrayList<>();
            for (final Object counter : counters) {
                Thread t = new Thread(() -> {
                    try {
                        for (int i = 0; i < n; i++) {
                            say("v " + increment(kind, counter));
                        }
                    } catch (Exception e) {
                        say("error " + e);
                    }
                });
                t.start();
                ts.add(t);
            }
            for (Thread t : ts) {
                t.join();
            }
            say("done");
        } else {
            say("error action " + action);
            System.exit(64);
        }
        c.close();
        System.exit(0);   // SharedCount's watcher threads would keep the JVM
    }
}
