--- zkcoord.contract: what a recipe, a waiter or the waiting-line engine
--- needs from a client and its users do not (for recipe authors).
--
-- The client object shows only its public methods (README, docs/client.md);
-- what builds on it calls these functions with the client first:
--
--   local contract = require "zkcoord.contract"
--   contract.own_node(client, path, position)     -- not client:own_node(...)
--   local st = contract.read_until(client, deadline, "exists", path)
--
-- Argument checks raise in the library's one wording, blaming the first
-- caller outside zkcoord (`raise`, `argerror`, `check_path` ...); `retry`
-- is the one retry helper (a recipe never writes a retry loop of its own).
-- The functions that take a client are the client's own (its modules in
-- zkcoord/client/ define them: nothing outside reads a client's `_` fields).
require "zkcoord.client"
local impl = require "zkcoord.client.contract"
local args = require "zkcoord.util.args"
local retries = require "zkcoord.util.retry"
local checks = require "zkcoord.client.checks"

local _M = { _VERSION = require("zkcoord.version") }


-- ---------------------------------------------------------------------------
-- The client's contract functions (contract.f(client, ...)).

--- Registers `path`, created by this client's current session for `q`, a
--- position that answers node() (its node's path), is_through() and
--- leave() (the nginx waiter calls them when the request that made the
--- node ends or its thread is killed): a new session, or the end of the
--- nginx request, deletes it. `shared`: others create this very path once
--- our node is gone (a work-queue claim), so only this session may delete
--- it: a new session forgets it instead of deleting whoever's node is there
--- by then.
-- @function own_node
-- @param client
-- @string path
-- @param q
-- @bool[opt] shared
_M.own_node = impl.own_node

--- `path` was deleted or is being deleted (registered by `own_node`). A
--- node of an earlier session stays listed until the new session deletes it.
-- @function disown_node
-- @param client
-- @string path
_M.disown_node = impl.disown_node

--- Reads `op` (exists, get, children, get_acl, sync) as the client's
--- synchronous method does, retried on connection loss under the client's
--- policy, but gives up with "timeout" at `deadline` (a `zkcoord.now()`
--- time; nil: the retry policy only). `a`, `b`, `c`: the operation's
--- arguments (a watch function too).
-- @function read_until
-- @param client
-- @number[opt] deadline
-- @string op
-- @param a
-- @param[opt] b
-- @param[opt] c
_M.read_until = impl.read_until

--- Waits (bounded: at most `timeout` seconds, default the request timeout)
--- until `pred(state)` is true for the client's state. Returns true if it is.
-- @function wait_state
-- @param client
-- @func pred
-- @number[opt] timeout
_M.wait_state = impl.wait_state

--- For try-onces: the results of the future `fut`, waited for while the
--- connection lives (at most the request timeout, as Curator's and kazoo's
--- try-once): nil, "connectionloss" when no reply came by then; a link gone
--- silent ends it when libzookeeper gives the connection up (2/3 of the
--- session timeout). `client:link_silent()` is a hint, not a verdict.
-- @function wait_once
-- @param client
-- @param fut
_M.wait_once = impl.wait_once

--- The pump a waiter drives (zkcoord.client.pump): drain, wait, kick,
--- check_timers, run_callbacks, enqueue_callback, fd.
-- @function pump
-- @param client
_M.pump = impl.pump

--- Serial number of the client's current session: it grows by one each time a
--- new session replaces a lost one, so a recipe can tell whether a node it
--- created belongs to the session that is live now.
-- @function serial
-- @param client
-- @treturn integer
_M.serial = impl.serial

--- How many times the client has connected (a new connection, in the same
--- session or a new one). Watch events of one connection arrive in the order
--- of the changes; across a reconnection they may not (zkcoord.line.walk's
--- proof needs one connection).
-- @function connection
-- @param client
-- @treturn integer
_M.connection = impl.connection

--- The state for a state answer (`held()`, `is_leader()` ...): like
--- `client:state()`, and with a waiter that runs callbacks inline (blocking)
--- the callbacks already queued run first, so that what reached the process
--- (a deleted node, an ended session) has been told (on_lost) before the
--- answer. Never blocks.
-- @function current_state
-- @param client
-- @treturn string
_M.current_state = impl.current_state

--- True once the client's `close()` was called.
-- @function is_closed
-- @param client
-- @treturn boolean
_M.is_closed = impl.is_closed

--- The bound in seconds of one synchronous operation of the client (its
--- `request_timeout` option).
-- @function request_timeout
-- @param client
-- @treturn number
_M.request_timeout = impl.request_timeout

--- The metatable of every client (`getmetatable(x) == contract.mt`: x is a
--- client).
_M.mt = impl.mt

--- Live clients, weakly held (keys), so tests can find leaks.
_M.live = impl.live


-- ---------------------------------------------------------------------------
-- Argument checks, in the library's one wording (zkcoord.util.args,
-- zkcoord.client.checks).

--- Raises `msg`, blaming the first caller outside this library; `level`
--- (default 2: the caller of the function calling raise) is where the
--- search starts.
-- @function raise
-- @string msg
-- @int[opt] level
_M.raise = args.raise

--- Raises "bad argument #n to 'fname' (msg)", blaming the first caller
--- outside this library.
-- @function argerror
-- @int n
-- @string fname
-- @string msg
-- @int[opt] level
_M.argerror = args.argerror

--- Raises unless `path` is an absolute ZooKeeper path (argument #n of
--- `fname`). A trailing "/" is allowed only where ZooKeeper appends a
--- sequence number (`sequential`).
-- @function check_path
-- @string path
-- @string fname
-- @int n
-- @bool[opt] sequential
_M.check_path = checks.check_path

--- Checks the timeout of a call that waits (argument #n of `fname`): nil or
--- a number of seconds >= 0, at most 600 unless math.huge (no limit). Returns it.
-- @function check_timeout
-- @param t
-- @string fname
-- @int[opt] n
-- @bool[opt] required
_M.check_timeout = args.check_timeout

--- The length of `t` as an array, counted up to its largest integer key
--- (not `#` or ipairs, which stop at or skip a hole): nil, why when a key
--- is not a positive integer or an index below the largest is missing.
-- @function array_length
-- @tab t
_M.array_length = checks.array_length


-- ---------------------------------------------------------------------------
-- Retries.

--- Calls fn(...) until it succeeds (a first result other than nil), fails
--- with an error that is not transient (zkcoord.errors.transient, or one in
--- `policy.also`), the client is closed (nil, "closed") or `deadline` passes
--- (nil, "timeout"). Between tries it sleeps a jittered, doubling pause and
--- waits for the connection while there is none. `client:retry(deadline,
--- fn, ...)` is this with the client's own policy.
-- @function retry
-- @param client
-- @number[opt] deadline a `zkcoord.now()` time; nil: `max_tries` alone bounds it
-- @tab[opt] policy `{ max_tries =, base_delay =, max_delay =, also = { code = true },
--   last_error = true }`
-- @func fn returns r1, err, r3 like a client call
_M.retry = retries.retry

--- The policy of a step that holds nothing in the session (a read, a wait
--- for a node): tried again until the deadline, also in a new session after
--- the old one expired.
_M.UNTIL_DEADLINE = retries.UNTIL_DEADLINE


return _M
