-- zkcoord.cli.help: the command's help texts: USAGE (zkcoord --help) and
-- one page per verb (zkcoord VERB --help, zkcoord help VERB). Not a public API.
local _M = {}

_M.USAGE = [[
usage: zkcoord [--servers HOSTS] [--session-timeout S] [--connect-timeout S]
               [--chroot P] [--auth user:secret] VERB ...

  lock    [--timeout S | -n | -w S] [--shared | -s | -x] [-E CODE] [--data TEXT]
          [--grace S] PATH {-- CMD [ARGS...] | -c CMD}
  elect   [--id ID] [--timeout S | -n | -w S] [-E CODE] [--grace S]
          PATH {-- CMD [ARGS...] | -c CMD}
  locks   PATH
  get     PATH
  set     PATH {DATA | -}
  create  [-e] [-s] [-p] PATH [DATA]
  rm      [-r] PATH
  ls      [-l] PATH
  stat    PATH
  tree    PATH
  watch   [--children] PATH
  counter PATH [add N | set N]

Servers: --servers, else $ZKCOORD_SERVERS, else 127.0.0.1:2181.
TLS: --tls-ca FILE --tls-cert FILE --tls-key FILE (PEM), else $ZKCOORD_TLS_CA,
$ZKCOORD_TLS_CERT, $ZKCOORD_TLS_KEY; an encrypted key's password only in
$ZKCOORD_TLS_KEY_PASSWORD. Needs a core built with TLS (scripts/build.sh --tls).
`zkcoord VERB --help` (or `zkcoord help VERB`) describes a verb;
`zkcoord --version` (-V) prints the version.
Exit status: 0 ok, 1 runtime failure, 64 usage, 69 no server reachable,
71 lock lost while CMD ran, 75 lock not acquired in time; lock and elect
exit with CMD's status (128+N when a signal N killed it).
]]

_M.HELP = {
    lock = [[
usage: zkcoord lock [--timeout S | -n | -w S] [--shared | -s | -x] [-E CODE]
                    [--data TEXT] [--grace S] PATH {-- CMD [ARGS...] | -c CMD}

Runs CMD while holding the lock PATH (exclusive; --shared: the read side of
the read-write lock PATH), then releases it. Fair: first come, first
served. Exclusive and shared runs on PATH exclude each other, and respect
the zkcoord library's lock and rwlock holders and Curator's InterProcessMutex
on PATH (the same node names); kazoo's locks are listed by `locks` only.

  --timeout S, -w S   give up after S seconds (exit 75); 0 tries once;
                      without it, wait as long as it takes
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
                     PATH {-- CMD [ARGS...] | -c CMD}

Joins the leader election PATH (Curator LeaderLatch compatible), waits to be
leader, then runs CMD while leader. When leadership is lost, CMD gets SIGTERM
at once and SIGKILL --grace S seconds later (default 10); the exit status is
then 71. When CMD ends, leadership passes on at once.

  --id ID       this candidate's id, stored as node data (default hostname:pid)
  --timeout S   give up when not leader after S seconds (exit 75); -w S
                the same, -n: --timeout 0; -E CODE: that status instead of 75
  --grace S     seconds between SIGTERM and SIGKILL after a loss
  -c CMD        run CMD through `sh -c`

Process group, environment, signals and exit statuses as for `zkcoord lock`.
]],
    locks = [[
usage: zkcoord locks PATH

Lists the holders and waiters of the lock (or read-write lock, or
election) PATH in line order, one a line, tab-separated:
  STATE  KIND  NODE  DATA  SESSION  AGE
STATE is holder or waiter; KIND lock, read, write or leader. Knows the
nodes of zkcoord, Curator (_c_<uuid>-lock-<seq>, __READ__, __WRIT__,
latch-) and kazoo (<uuid>__lock__<seq>, __rlock__); other children are
skipped. SESSION is the owner session (hex), AGE the node's age.
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
}
_M.HELP.help = _M.USAGE

return _M
