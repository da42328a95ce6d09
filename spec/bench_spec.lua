-- Smoke test of the side-by-side benchmark driver (bench/run.lua): one
-- quick round (1 s per run) of every row for zkcoord and the raw C peer,
-- on the driver's own ZooKeeper. Checks that every row produced a number,
-- not what the numbers are (that is the benchmark's business).
describe("bench/run.lua smoke #zk #slow", function()
    it("runs every row for zkcoord and raw C with positive figures", function()
        local json = os.tmpname()
        local t0 = os.time()
        local f = assert(io.popen("luajit bench/run.lua --quick --only zkcoord,raw --json "
                                  .. json .. " 2>&1; echo \"__rc=$?\""))
        local out = f:read("*a")
        f:close()
        local secs = os.time() - t0
        assert.equals("0", out:match("__rc=(%d+)"), out)

        local rows, seen = 0, {}
        for line in out:gmatch("[^\n]+") do
            local label, better, z, raw = line:match("^| ([^|]-) | (%a+) | ([^|]-) | ([^|]-) |")
            if label and better ~= "better" then
                seen[#seen + 1] = label
                -- 0 failed CAS is fine, and so is a starved process (fairness 0)
                if not label:find("failed CAS", 1, true) and not label:find("slowest", 1, true) then
                    rows = rows + 1
                    assert.is_true((tonumber(z) or 0) > 0, "zkcoord: " .. line)
                    if raw ~= "—" then
                        assert.is_true((tonumber(raw) or 0) > 0, "raw C: " .. line)
                    end
                end
            end
        end
        -- uncontended (rate, p50, p99), contended 4 and 16, rwlock, counter
        -- 1, 4, 16, 16 with fair = false, 4 x 32 coroutines (fair and not),
        -- peak RSS; and the best form in one process: lock with 16 sessions
        -- and with 16 coroutines on one session, rwlock with 8 sessions,
        -- counter with 16 coroutines on one session and with 16 sessions;
        -- the cohort's rows: lock with 16 coroutines, 2 x 16 coroutines
        -- without and with, rwlock with 16 sessions, 16 coroutines without
        -- and with; with cohort = true the uncontended lock (rate, p50), 16
        -- processes, and for 2 x 16 the longest cycle (without and with) and
        -- the remote waiter's longest and p99 wait
        assert.equals(31, rows, table.concat(seen, "\n") .. "\n" .. out)

        local jf = assert(io.open(json))
        local text = jf:read("*a")
        jf:close()
        os.remove(json)
        assert.truthy(text:find('"counter_coroutines"', 1, true))
        -- measured at load 2: 36-50 s (3x: 150)
        assert.is_true(secs < 150, "took " .. secs .. " s")
    end)
end)
