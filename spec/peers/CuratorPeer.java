// CuratorPeer: a Curator (Java) contender for spec/curator_spec.lua, which
// runs it beside zkcoord contenders on the same paths.
//
//   java -cp <dir>:<curator jars> CuratorPeer MODE HOSTS PATH MARKERS NAME ROUNDS HOLD_MS [N]
//
// MODE: lock (InterProcessMutex), semaphore (InterProcessSemaphoreV2 of N
// leases), read / write (InterProcessReadWriteLock), leader (LeaderLatch),
// group (GroupMember). While it holds, it creates the ephemeral node
// MARKERS/<kind>-NAME in the same session and counts the markers, so an
// overlap is seen by ZooKeeper itself: it prints "violation" then. Prints
// "acquired K" (the markers seen), "released", "error WHY", "done";
// group prints "members id,id,..." (every member seen while it was one).
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.nodes.GroupMember;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.CreateMode;

public final class CuratorPeer {
    private static CuratorFramework c;
    private static String markers, name;

    private static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    // Creates our marker, counts the markers; returns how many of `kinds` there are.
    private static int mark(String kind, String countKinds) throws Exception {
        c.create().forPath(markers + "/" + kind + "-" + name);
        return count(countKinds);
    }

    // How many markers of `kinds` there are.
    private static int count(String kinds) throws Exception {
        int n = 0;
        for (String m : c.getChildren().forPath(markers)) {
            if (kinds.indexOf(m.substring(0, 1)) >= 0) {
                n++;
            }
        }
        return n;
    }

    private static void unmark(String kind) throws Exception {
        c.delete().forPath(markers + "/" + kind + "-" + name);
    }

    public static void main(String[] a) throws Exception {
        String mode = a[0], hosts = a[1], path = a[2];
        markers = a[3];
        name = a[4];
        int rounds = Integer.parseInt(a[5]);
        long hold = Long.parseLong(a[6]);
        int max = a.length > 7 ? Integer.parseInt(a[7]) : 1;
        c = CuratorFrameworkFactory.builder().connectString(hosts).sessionTimeoutMs(4000)
                .connectionTimeoutMs(5000).retryPolicy(new ExponentialBackoffRetry(50, 5)).build();
        c.start();
        if (!c.blockUntilConnected(10, TimeUnit.SECONDS)) {
            say("error connect");
            System.exit(1);
        }
        say("ready");
        for (int r = 0; r < rounds; r++) {
            if (mode.equals("lock") || mode.equals("write") || mode.equals("read")) {
                InterProcessMutex m;
                if (mode.equals("lock")) {
                    m = new InterProcessMutex(c, path);
                } else {
                    InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, path);
                    m = mode.equals("write") ? rw.writeLock() : rw.readLock();
                }
                if (!m.acquire(20, TimeUnit.SECONDS)) {
                    say("error timeout");
                    break;
                }
                String kind = mode.equals("read") ? "r" : "w";
                // a writer (or lock holder) must be alone; a reader must see no writer
                int n = mark(kind, mode.equals("read") ? "w" : "wr");
                say("acquired " + n);
                if (n > (mode.equals("read") ? 0 : 1)) {
                    say("violation " + n);
                }
                Thread.sleep(hold);
                unmark(kind);
                m.release();
                say("released");
            } else if (mode.equals("semaphore")) {
                InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(c, path, max);
                Lease lease = s.acquire(20, TimeUnit.SECONDS);
                if (lease == null) {
                    say("error timeout");
                    break;
                }
                int n = mark("s", "s");
                say("acquired " + n);
                if (n > max) {
                    say("violation " + n);
                }
                Thread.sleep(hold);
                unmark("s");
                s.returnLease(lease);
                say("released");
            } else if (mode.equals("leader")) {
                LeaderLatch latch = new LeaderLatch(c, path, name);
                latch.start();
                if (!latch.await(20, TimeUnit.SECONDS)) {
                    say("error timeout");
                    latch.close();
                    break;
                }
                int n = mark("l", "l");
                say("acquired " + n);
                if (n > 1) {
                    say("violation " + n);
                }
                Thread.sleep(hold);
                unmark("l");
                latch.close();
                say("released");
            } else if (mode.equals("group")) {
                GroupMember g = new GroupMember(c, path, name, ("data-" + name).getBytes());
                g.start();
                // a member until each of the `max` contenders has seen them
                // all (its "g" marker), for at most `hold`: they start at
                // different times
                long until = System.nanoTime() + hold * 1000000L;
                TreeSet<String> seen = new TreeSet<>();
                boolean marked = false;
                while (System.nanoTime() < until) {
                    seen.addAll(g.getCurrentMembers().keySet());
                    if (!marked && seen.size() >= max) {
                        mark("g", "g");
                        marked = true;
                    }
                    if (marked && count("g") >= max) {
                        break;
                    }
                    Thread.sleep(50);
                }
                say("members " + String.join(",", seen));
                g.close();
            } else {
                say("error mode " + mode);
                System.exit(64);
            }
        }
        say("done");
        c.close();
    }
}
