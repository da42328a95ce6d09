-- The soak (tools/soak.lua), short: 30 s (SOAK_SECONDS) of lock acquire /
-- release, counter adds and watches fired by another client, in a process
-- of its own, sampling the Lua heap (after a full collection) and RSS every
-- second. After the warm-up third the fitted growth must stay under the
-- soak's bounds (heap < 1 MiB, RSS < 5 MiB over the measured span); under
-- AddressSanitizer RSS is the sanitizer's (its quarantine grows by design),
-- so only the heap is judged there.
local zk = require "helpers.zk"

local function sh_quote(s)
    return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

describe("soak #zk", function()
    it("keeps heap and RSS flat over lock, counter and watch work", function()
        local seconds = tonumber(os.getenv("SOAK_SECONDS")) or 30
        local dir = zk.tmpdir()
        local report, log = dir .. "/soak-report.lua", dir .. "/soak.log"
        os.remove(report)
        local env = zk.lua_env()
        os.execute(("ZK_HOSTS=%s LUA_PATH=%s LUA_CPATH=%s timeout -s KILL %d luajit tools/soak.lua "
                    .. "--seconds %d --interval 1 --report %s > %s 2>&1")
                   :format(sh_quote(env.ZK_HOSTS), sh_quote(env.LUA_PATH), sh_quote(env.LUA_CPATH),
                           seconds + 120, seconds, sh_quote(report), sh_quote(log)))
        local out = zk.proc.read_file(log) or ""
        local f = loadfile(report)
        local r = f and f()
        assert(r, "the soak did not finish:\n" .. out)
        print(out:match("(soak: .*)done") or out)
        local asan = (os.getenv("LD_PRELOAD") or ""):find("asan", 1, true) ~= nil

        assert.equal(0, r.errors, out)
        assert.truthy(r.rounds >= 50, "only " .. r.rounds .. " rounds")
        assert.equal(r.adds, r.final_counter)
        assert.truthy(r.contended > 0)
        assert.truthy(r.deliveries > 0 and r.raw_fired > 0)
        assert.truthy(r.measured >= 5, "too few samples after the warm-up")
        -- measured at load 2: heap 30 KiB, RSS 16 KiB
        assert.truthy(r.heap.growth < r.heap_bound_kb,
                      ("heap grew %.1f KiB (bound %d)"):format(r.heap.growth, r.heap_bound_kb))
        if not asan then
            assert.truthy(r.rss.growth < r.rss_bound_kb,
                          ("RSS grew %.1f KiB (bound %d)"):format(r.rss.growth, r.rss_bound_kb))
        end
    end)
end)
