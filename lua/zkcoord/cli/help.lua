-- zkcoord.cli.help: the command's help texts: USAGE (zkcoord --help) and
-- one page per verb (zkcoord VERB --help, zkcoord help VERB). Not a public API.
local _M = {}

_M.USAGE = [[
usage: zkcoord [--servers HOSTS] [--session-timeout S] [--connect-timeout S]
               [--chroot P] [--auth user:secret] VERB ...

  lock    [--timeout S | -n | -w S] [--shared | -s | -x] [-E CODE] [--data TEXT]
          [--grace S] [--verbose] [-o] PATH {-- CMD [ARGS...] | -c CMD}
  elect   [--id ID] [--timeout S | -n | -w S] [-E CODE] [--grace S] [--verbose]
          [-o] PATH {-- CMD [ARGS...] | -c CMD}
  once    --period S [--data TEXT] [--grace S] [--verbose] [-o]
          PATH {-- CMD [ARGS...] | -c CMD}
  locks   [--json] PATH
  get     PATH
  set     PATH {DATA | -}
  create  [-e] [-s] [-p] PATH [DATA]
  rm      [-r] PATH
  ls      [-l] PATH
  stat    PATH
  tree    PATH
  watch   [--children] PATH
  counter PATH [add N | set N]
  services [--dubbo] BASE [NAME]

Servers: --servers, else $ZKCOORD_SERVERS, else 127.0.0.1:2181.
TLS: --tls-ca FILE --tls-cert FILE --tls-key FILE (PEM), else $ZKCOORD_TLS_CA,
$ZKCOORD_TLS_CERT, $ZKCOORD_TLS_KEY; an encrypted key's password only in
$ZKCOORD_TLS_KEY_PASSWORD. Needs a core built with TLS (scripts/build.sh --tls).
SASL: --sasl-user NAME --sasl-password-file FILE (its first line), else
$ZKCOORD_SASL_USER and $ZKCOORD_SASL_PASSWORD_FILE or $ZKCOORD_SASL_PASSWORD;
--sasl-mechanism (or $ZKCOORD_SASL_MECHANISM) DIGEST-MD5 (default) or GSSAPI.
Needs a core built with SASL (scripts/build.sh --secure).
`zkcoord VERB --help` (or `zkcoord help VERB`) describes a verb;
`zkcoord --version` (-V) prints the version.
Exit status: 0 ok, 1 runtime failure, 64 usage, 69 no server reachable,
71 lock lost while CMD ran, 75 lock not acquired in time (silent unless
--verbose); lock, elect and once exit with CMD's status (128+N when a
signal N killed it).
]]

_M.HELP = {
    lock = [[
usage: zkcoord lock [--timeout S | -n | -w S] [--shared | -s | -x] [-E CODE]
                    [--data TEXT] [--grace S] [--verbose] [-o]
                    PATH {-- CMD [ARGS...] | -c CMD}

Runs CMD while holding the lock PATH (exclusive; --shared: the read side of
the read-write lock PATH), then releases it. Fair: first come, first
served. Exclusive and shared runs on PATH exclude each other, and respect
the zkcoord library's lock and rwlock holders and Curator's InterProcessMutex
on PATH (the same node names); kazoo's locks are listed by `locks` only.

  --timeout S, -w S   give up after S seconds (exit 75, nothing printed:
                      as flock); 0 tries once; without it, wait as long as
                      it takes
  -n, --nonblock      give up at once when held (--timeout 0)
  --shared, -s        take the read lock: many --shared holders at once, none
                      while an exclusive holder or an earlier writer is there
  -x, --exclusive     the exclusive lock (the default)
  -E CODE             exit status when not acquired (default 75)
  -c CMD              run CMD through `sh -c` (before or after PATH)
  --data TEXT         the lock node's data (default hostname:pid), shown by `locks`
  --grace S           when the lock is lost while CMD runs (or zkcoord gets a
                      signal that ends CMD), CMD's processes get SIGTERM (that
                      signal) at once and SIGKILL S seconds later (default 10)
  --verbose           say on stderr how long the lock took, or why it was not
                      acquired (who holds it) and how long zkcoord waited
  -o, --close         accepted for flock compatibility; does nothing: CMD
                      never gets zkcoord's descriptors (flock -o closes its
                      lock file's)

CMD runs in a process group of its own with zkcoord as the subreaper of all
its descendants: the lock is held until the last of them has exited (a
daemon that double-forks included), SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1 and SIGUSR2 are passed on to all of them, and if zkcoord dies (even by SIGKILL) a guard process
SIGKILLs the group. CMD's environment has ZKCOORD_FENCING_TOKEN (grows with
every grant of the lock) and ZKCOORD_LOCK_NODE.
Exit status: CMD's (128+N for a signal N), 75 (-E) not acquired in time, 71
lock lost while CMD ran (session expired, node deleted), 69 no server, 64
usage; 126/127 CMD not executable / not found.
]],
    elect = [[
usage: zkcoord elect [--id ID] [--timeout S | -n | -w S] [-E CODE] [--grace S]
                     [--verbose] [-o] PATH {-- CMD [ARGS...] | -c CMD}

Joins the leader election PATH (Curator LeaderLatch compatible), waits to be
leader, then runs CMD while leader. When leadership is lost, CMD gets SIGTERM
at once and SIGKILL --grace S seconds later (default 10); the exit status is
then 71. When CMD ends, leadership passes on at once.

  --id ID       this candidate's id, stored as node data (default hostname:pid)
  --timeout S   give up when not leader after S seconds (exit 75); -w S
                the same, -n: --timeout 0; -E CODE: that status instead of 75
  --grace S     seconds between SIGTERM and SIGKILL after a loss
  -c CMD        run CMD through `sh -c`
  --verbose, -o as for `zkcoord lock`

Process group, environment, signals and exit statuses as for `zkcoord lock`.
]],
    once = [[
usage: zkcoord once --period S [--data TEXT] [--grace S] [--verbose] [-o]
                    PATH {-- CMD [ARGS...] | -c CMD}

Runs CMD at most once per period of S seconds across hosts (a cron job
every host runs): the first host to come runs CMD under the lock PATH; a
host that finds this period's run done, or running, exits 0 silently. A run
that fails (CMD's status not 0, or the lock lost) is not done: the next
host (or the next cron tick) in the period runs CMD again.

Periods are counted on the ZooKeeper server's clock (not the hosts'): the
period of a time t is floor(t / S), t in seconds since the epoch (UTC), so
--period 3600 runs once per hour o'clock, 86400 once per UTC day. Start the
job away from a period's start (cron at :30 for an hourly period) so that
late or skewed hosts still fall into the same period.

Nodes: the lock PATH (as `zkcoord lock PATH`: it never waits for it), and
PATH's own data "<ms> <id>", the server time of the last successful run
and who ran it (--data, default hostname:pid).

  --verbose, -o, --grace, -c, --data as for `zkcoord lock`
Exit status: CMD's when it ran; 0 when the run was done or under way; 71
lock lost while CMD ran; 69, 64, 1 as for `zkcoord lock`.
]],
    locks = [[
usage: zkcoord locks [--json] PATH

Lists the holders and waiters of every lock (read-write lock, election) at
or below PATH: a lock is a node with a child named as a lock node; the
walk goes through every other child, depth first, by name. After a header,
one line per node, tab-separated, each lock's in line order:
  LOCK  STATE  KIND  NODE  DATA  SESSION  AGE
LOCK is the lock's path; STATE holder or waiter; KIND lock, read, write or
leader; DATA the node's data (who holds it: hostname:pid by default, for
the command's and the library's locks). Knows the nodes of zkcoord,
Curator (_c_<uuid>-lock-<seq>, __READ__, __WRIT__, latch-) and kazoo
(<uuid>__lock__<seq>, __rlock__). SESSION is the owner session (hex), AGE
the node's age.

  --json   one JSON array of objects instead: lock, state, kind, node,
           data, session (null when not ephemeral), age (seconds)
]],
    get = "usage: zkcoord get PATH\n\nPrints the node's data and a newline.\n",
    set = [[
usage: zkcoord set PATH {DATA | -}

Sets the node's data (the node must exist). With - the data is read from
stdin, as it is (no newline is taken off).
]],
    create = [[
usage: zkcoord create [-e] [-s] [-p] PATH [DATA]

Creates a node and prints its path.
  -e  ephemeral (it goes when this command exits: useful for tests only)
  -s  sequential (a sequence number is appended to the name)
  -p  create missing parents
]],
    rm = "usage: zkcoord rm [-r] PATH\n\nDeletes the node; -r: with its whole subtree.\n",
    ls = [[
usage: zkcoord ls [-l] PATH

Prints the node's children, sorted, one a line. -l: tab-separated
NAME  DATA_LENGTH  NUM_CHILDREN  EPHEMERAL_OWNER (or -)  MTIME (UTC)
]],
    stat = "usage: zkcoord stat PATH\n\nPrints the node's stat, one NAME<tab>VALUE a line.\n",
    tree = "usage: zkcoord tree PATH\n\nPrints PATH and every node below it, one path a line, depth first.\n",
    watch = [[
usage: zkcoord watch [--children] PATH

Prints the node's data (--children: its children, separated by spaces)
now and again on every change, one line each, until interrupted (SIGINT,
SIGTERM or SIGHUP: exit 0). While the node does not exist nothing is
printed on stdout; stderr says so.
]],
    counter = [[
usage: zkcoord counter PATH [add N | set N]

Prints the counter's value (after adding N, or setting it to N). The node
holds a decimal integer; it is created (with 0) on first use.
]],
    services = [[
usage: zkcoord services [--dubbo] BASE [NAME]

Lists the services registered under BASE in Curator's ServiceDiscovery
layout (BASE/NAME/ID, JSON), one NAME<tab>INSTANCES a line; with NAME,
that service's instances, tab-separated:
  ID  ADDRESS  PORT  AGE  [disabled]
AGE is the time since the instance's registrationTimeUTC. --dubbo: Dubbo's
registry (BASE /dubbo, NAME an interface, its providers).
]],
}
_M.HELP.help = _M.USAGE

return _M
