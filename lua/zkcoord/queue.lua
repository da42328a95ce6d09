--- zkcoord.queue: the old name of zkcoord.line, kept for one release.
--
-- DEPRECATED: require "zkcoord.line" instead. This module returns the very
-- same table (queue.new, queue.ANY, queue.rule_first ... are line.new,
-- line.ANY, line.rules.first ...), so positions made through either name
-- are one class. "queue" now names only the work queue (zkcoord.work_queue).
return require "zkcoord.line"
