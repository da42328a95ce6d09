--- zkcoord.client: a ZooKeeper client over the C core.
--
-- The C core submits asynchronous operations and queues their replies; this
-- module turns request ids into results, keeps the session alive (states,
-- reconnects, a new session after expiry), retries idempotent reads, and
-- runs watch and state callbacks on the caller's thread. How the caller
-- waits is the waiter's business (zkcoord.wait.*): it drives the client's
-- pump (zkcoord.client.pump) and gives the client events, sleeps and
-- deferred calls.
--
-- Every operation exists in two forms:
--   client:get(path)              waits and returns the result
--   client:send("get", path)      returns a future at once; future:wait()
-- Several futures may be in flight: one session runs its requests in order,
-- so `send` several and wait for all is one round trip, not several.
--
-- The client is one class (zkcoord.client.class); each module below adds
-- the methods of one concern to it:
--   checks     the client's argument checks (paths, versions ...; the
--              rule that blames the caller is zkcoord.util's)
--   acl        ACL names and entries
--   future     the pending-request record and futures
--   options    the connect options and the waiter they name
--   connect    connect, the client's fields, opening sessions
--   pump       what a waiter drives: drain, wait, callbacks
--   session    records from the queue, states, timers, a lost session
--   requests   submitting one request, retrying reads
--   ops        the operations: send table, sync forms, remove_watches
--   nodes      guaranteed deletes, nodes recipes own
--   paths      ensure_path, recursive delete: paths made and removed whole
--   lifecycle  state, listeners, dispatch, contract accessors, close
--
-- What recipes, waiters and the engine need from a client and users do not
-- (own_node, read_until, wait_state, serial ..., the argument checks they
-- share) is zkcoord.contract: the class holds only public methods.
local _M = require "zkcoord.client.class"

require "zkcoord.client.connect"
require "zkcoord.client.requests"
require "zkcoord.client.ops"
require "zkcoord.client.nodes"
require "zkcoord.client.paths"
require "zkcoord.client.lifecycle"

return _M
