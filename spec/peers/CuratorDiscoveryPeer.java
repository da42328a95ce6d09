// CuratorDiscoveryPeer: Curator's ServiceDiscovery (curator-x-discovery)
// beside zkcoord's service_discovery, for spec/service_discovery_spec.lua.
// One JVM serves the whole spec: it reads commands from a file, one a line,
// as they are appended, and answers each on stdout.
//
//   java -cp <dir>:<curator jars> CuratorDiscoveryPeer HOSTS COMMAND_FILE
//
// Commands (fields separated by one tab):
//   register BASE NAME ID ADDRESS PORT PAYLOAD_JSON   -> "registered ID"
//   unregister BASE NAME ID                           -> "unregistered ID"
//   query BASE NAME     -> "instance <json>" for each instance, as Curator's
//                          serializer writes it again, then "end"
// Payloads are typed Object: Jackson's "@class" says what a JSON object
// is (a LinkedHashMap for what register sends), a string is a String.
// Errors print "error WHY".
import java.io.BufferedReader;
import java.io.FileReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.x.discovery.ServiceDiscovery;
import org.apache.curator.x.discovery.ServiceDiscoveryBuilder;
import org.apache.curator.x.discovery.ServiceInstance;
import org.apache.curator.x.discovery.details.JsonInstanceSerializer;

public final class CuratorDiscoveryPeer {
    private static CuratorFramework c;
    private static final Map<String, ServiceDiscovery<Object>> discoveries = new HashMap<>();
    private static final JsonInstanceSerializer<Object> serializer =
            new JsonInstanceSerializer<>(Object.class);

    private static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }

    private static ServiceDiscovery<Object> discovery(String base) throws Exception {
        ServiceDiscovery<Object> sd = discoveries.get(base);
        if (sd == null) {
            sd = ServiceDiscoveryBuilder.builder(Object.class).client(c).basePath(base)
                    .serializer(serializer).build();
            sd.start();
            discoveries.put(base, sd);
        }
        return sd;
    }

    private static void run(String[] f) throws Exception {
        if (f[0].equals("register")) {
            Map payload = new ObjectMapper().readValue(f[6], Map.class);
            ServiceInstance<Object> i = ServiceInstance.<Object>builder().name(f[2]).id(f[3])
                    .address(f[4]).port(Integer.parseInt(f[5])).payload(payload).build();
            discovery(f[1]).registerService(i);
            say("registered " + f[3]);
        } else if (f[0].equals("unregister")) {
            ServiceInstance<Object> i = discovery(f[1]).queryForInstance(f[2], f[3]);
            discovery(f[1]).unregisterService(i);
            say("unregistered " + f[3]);
        } else if (f[0].equals("query")) {
            for (ServiceInstance<Object> i : discovery(f[1]).queryForInstances(f[2])) {
                say("instance " + new String(serializer.serialize(i), StandardCharsets.UTF_8));
            }
            say("end");
        } else {
            say("error unknown command " + f[0]);
        }
    }

    public static void main(String[] a) throws Exception {
        c = CuratorFrameworkFactory.builder().connectString(a[0]).sessionTimeoutMs(4000)
                .connectionTimeoutMs(5000).retryPolicy(new ExponentialBackoffRetry(50, 5)).build();
        c.start();
        if (!c.blockUntilConnected(10, TimeUnit.SECONDS)) {
            say("error connect");
            System.exit(1);
        }
        say("ready");
        // The spec appends whole lines; a line without its newline yet waits.
        long deadline = System.currentTimeMillis() + 600_000;   // a forgotten peer ends
        StringBuilder partial = new StringBuilder();
        try (BufferedReader r = new BufferedReader(new FileReader(a[1], StandardCharsets.UTF_8))) {
            while (System.currentTimeMillis() < deadline) {
                int ch = r.read();
                if (ch < 0) {
                    Thread.sleep(10);
                    continue;
                }
                if (ch != '\n') {
                    partial.append((char) ch);
                    continue;
                }
                String line = partial.toString();
                partial.setLength(0);
                if (line.equals("quit")) {
                    break;
                }
                try {
                    run(line.split("\t"));
                } catch (Exception e) {
                    say("error " + e);
                }
            }
        }
        for (ServiceDiscovery<Object> sd : discoveries.values()) {
            sd.close();
        }
        c.close();
        say("done");
    }
}
