// CuratorRevoke: Curator's lock revocation, for spec/revoke_spec.lua.
//
//   java -cp <dir>:<curator jars> CuratorRevoke hold HOSTS PATH WAIT_MS
//       takes an InterProcessMutex made revocable; when revocation is
//       requested it releases (from its own thread, as Curator requires):
//       prints "acquired", then "revoked" and "released", or "kept" when
//       nobody asked within WAIT_MS.
//   java ... CuratorRevoke revoke HOSTS PATH
//       asks the holder of PATH to give it up with Curator's Revoker:
//       prints "revoked <node>" (the first participant node), or "none".
//   java ... CuratorRevoke acquire HOSTS PATH WAIT_MS
//       prints "acquired" or "timeout".
import java.util.Collection;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorRevoke {
    private static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    public static void main(String[] a) throws Exception {
        String mode = a[0], hosts = a[1], path = a[2];
        long waitMs = a.length > 3 ? Long.parseLong(a[3]) : 0;
        CuratorFramework c = CuratorFrameworkFactory.builder().connectString(hosts)
                .sessionTimeoutMs(4000).connectionTimeoutMs(5000)
                .retryPolicy(new ExponentialBackoffRetry(50, 5)).build();
        c.start();
        if (!c.blockUntilConnected(10, TimeUnit.SECONDS)) {
            say("error connect");
            System.exit(1);
        }
        InterProcessMutex m = new InterProcessMutex(c, path);
        if (mode.equals("hold")) {
            CountDownLatch asked = new CountDownLatch(1);
            m.makeRevocable(lock -> asked.countDown());
            if (!m.acquire(10, TimeUnit.SECONDS)) {
                say("error timeout");
                System.exit(1);
            }
            say("acquired");
            if (asked.await(waitMs, TimeUnit.MILLISECONDS)) {
                say("revoked");
                m.release();
                say("released");
            } else {
                say("kept");
                m.release();
            }
        } else if (mode.equals("revoke")) {
            Collection<String> nodes = m.getParticipantNodes();
            if (nodes.isEmpty()) {
                say("none");
            } else {
                String node = nodes.iterator().next();
                Revoker.attemptRevoke(c, node);
                say("revoked " + node);
            }
        } else if (mode.equals("acquire")) {
            if (m.acquire(waitMs, TimeUnit.MILLISECONDS)) {
                say("acquired");
                m.release();
            } else {
                say("timeout");
            }
        }
        c.close();
    }
}
