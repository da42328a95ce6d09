--- zkcoord's version: the one place it is written.
-- CMakeLists.txt compiles it into core.so (`core._VERSION`); the rockspecs,
-- CHANGES.md and every module's `_VERSION` are checked against it
-- (spec/release_spec.lua).
-- @module zkcoord.version
return "0.2.0"
