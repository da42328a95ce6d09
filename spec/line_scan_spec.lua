-- The engine's one-pass scan (zkcoord.line.driver's scan) against the rule
-- on parse's entries: the same verdict on random listings (markers of the
-- line and foreign ones, hand-made names, sequence numbers around the
-- signed 32-bit wrap, equal numbers, our node absent), and which drivers
-- get a scan. Scanned lines on a real server: spec/line_spec.lua.
local rng_mod = require "helpers.rng"
local line = require "zkcoord.line"
local rules = require "zkcoord.line.rules"
local drivers = require "zkcoord.line.driver"

local DOWNGRADE, READ, WRITE = "downgrade-__READ__", "__READ__", "__WRIT__"
local RW_MARKERS = { DOWNGRADE, READ, WRITE }

-- The drivers compared: every built-in rule with a scan, and markers that
-- end with a digit or are one character, which the greedy match must read
-- as parse does.
local CONFIGS = {
    { what = "lock", marker = "lock-", rule = rules.first },
    { what = "first over two markers", marker = "latch-", markers = { "latch-", "h-" },
      rule = rules.first },
    { what = "rwlock writer", marker = WRITE, markers = RW_MARKERS,
      rule = rules.first_none_above(DOWNGRADE) },
    { what = "rwlock reader", marker = READ, markers = RW_MARKERS, rule = rules.none_below(WRITE) },
    { what = "none_below of two markers", marker = "r-", markers = { "w-", "r-", "lock-" },
      rule = rules.none_below("w-", "lock-") },
    { what = "markers with digits and dashes", marker = "v2", markers = { "v2", "-", "9", "x-1" },
      rule = rules.first_none_above("9") },
    { what = "none_below, digit markers", marker = "9", markers = { "1", "9", "v2" },
      rule = rules.none_below("1", "v2") },
}

local PREFIX_CHARS = { "a", "-", "9", "2", "v", "x", "_", "1", "k", "_c_" }
local FOREIGN = { "", "other-", "lock", "-lock-", "__READ", "READ__", "v", "x-", "19" }

-- A sequence-number part: ZooKeeper's %010d of a signed 32-bit counter
-- (small, near 2^31 - 1, negative past the wrap), and what hand-made names
-- may carry (short, -0, longer than a double holds, none, junk).
local function seq_text(r)
    local k = r:int(1, 10)
    if k <= 3 then
        return ("%010d"):format(r:int(0, 40))
    elseif k == 4 then
        return ("%010d"):format(2147483647 - r:int(0, 5))
    elseif k == 5 then
        return ("%010d"):format(-2147483648 + r:int(0, 5))
    elseif k == 6 then
        return ("%010d"):format(-r:int(0, 5))
    elseif k == 7 then
        return r:pick { "0", "7", "-0", "-7", "40", "00", "-" }
    elseif k == 8 then
        local t = {}
        for i = 1, r:int(14, 22) do t[i] = tostring(r:int(0, 9)) end
        return r:pick { "", "-" } .. table.concat(t)
    elseif k == 9 then
        return r:pick { "", "a", "12a", "1-", "3 " }
    end
    return tostring(r:int(0, 40))
end

local function random_name(r, cfg)
    local t = {}
    for i = 1, r:int(0, 5) do t[i] = r:pick(PREFIX_CHARS) end
    local markers = cfg.markers or { cfg.marker }
    local m = r:int(1, 3) == 1 and r:pick(FOREIGN) or r:pick(markers)
    return table.concat(t) .. m .. seq_text(r)
end

-- A listing of distinct names, and our name: in it, or absent, or one of
-- the others', or one no pattern takes.
local function random_case(r, cfg)
    local names, seen = {}, {}
    for _ = 1, r:int(0, 30) do
        local name = random_name(r, cfg)
        if not seen[name] then
            seen[name] = true
            names[#names + 1] = name
        end
    end
    local mine
    local k = r:int(1, 20)
    if k <= 15 or #names == 0 then
        mine = ("_c_%08x-%s%s"):format(r:int(0, 2147483646), cfg.marker, seq_text(r))
        if k ~= 1 and not seen[mine] then
            table.insert(names, r:int(1, #names + 1), mine)
        end
    elseif k <= 19 then
        mine = r:pick(names)
    else
        mine = "no-number-here"
        names[#names + 1] = mine
    end
    return names, mine
end

-- What the engine does without a scan: parse, find our entry, ask the rule
-- (nil: our node is not in the line).
local function by_parse(d, parent, names, mine)
    local entries = assert(drivers.parse(d, parent, names))
    for i, e in ipairs(entries) do
        if e.name == mine then
            return d.rule(entries, i)
        end
    end
    return nil
end

local function show(v)
    if type(v) == "table" then
        return ("{ name = %q, path = %q, seq = %s, marker = %q }")
               :format(v.name, v.path, tostring(v.seq), v.marker)
    end
    return tostring(v)
end


local function check_same(want, got, what)
    local same = #want == #got
    for i = 1, same and #want or 0 do
        local a, b = want[i], got[i]
        same = same and a.name == b.name and a.path == b.path and a.seq == b.seq
               and a.marker == b.marker
    end
    if not same then
        error(what, 2)
    end
end


describe("line scan", function()
    it("gives the verdict the rule gives on parse's entries, over random listings", function()
        local seed = tonumber(os.getenv("SCAN_SEED")) or os.time()
        local r = rng_mod.new(seed)
        local counts = { through = 0, entry = 0, absent = 0 }
        for _, cfg in ipairs(CONFIGS) do
            local d = line.driver { marker = cfg.marker, markers = cfg.markers, rule = cfg.rule }
            assert.truthy(d.scan, cfg.what .. ": no scan")
            for case = 1, 3000 do
                local names, mine = random_case(r, cfg)
                local parent = r:pick { "/", "/a/line" }
                local want = by_parse(d, parent, names, mine)
                local got = drivers.scan(d, parent, names, mine)
                if type(want) ~= type(got)
                   or (type(want) == "table" and not (want.name == got.name
                       and want.path == got.path and want.seq == got.seq
                       and want.marker == got.marker)) then
                    error(("%s, case %d (SCAN_SEED=%d): listing %s, ours %q: parse+rule %s, scan %s")
                          :format(cfg.what, case, seed, table.concat(names, " "), mine,
                                  show(want), show(got)))
                end
                local kind = want == true and "through" or want and "entry" or "absent"
                counts[kind] = counts[kind] + 1
            end
        end
        -- the listings reached every verdict, often
        for kind, n in pairs(counts) do
            assert.is_true(n > 1000, kind .. " only " .. n .. " times")
        end
    end)

    it("sorted gives parse's entries, in parse's order, over random listings, "
       .. "also from an earlier listing's answer", function()
        -- line.join's view of a listing many joins read: parse made cheaper
        local seed = tonumber(os.getenv("SCAN_SEED")) or os.time()
        local r = rng_mod.new(seed)
        for _, cfg in ipairs(CONFIGS) do
            local d = line.driver { marker = cfg.marker, markers = cfg.markers, rule = cfg.rule }
            for case = 1, 1000 do
                local names = random_case(r, cfg)
                local parent = r:pick { "/", "/a/line" }
                local want = assert(drivers.parse(d, parent, names))
                local got = assert(drivers.sorted(d, parent, names))
                check_same(want, got, ("%s, case %d (SCAN_SEED=%d): listing %s"):format(
                    cfg.what, case, seed, table.concat(names, " ")))
                -- A later listing from this one's answer: some left, some
                -- came (sequence numbers above, or anything at all).
                local index = {}
                for i, e in ipairs(got) do index[e.name] = i end
                local later, seen = {}, {}
                for _, name in ipairs(names) do
                    if r:int(1, 4) > 1 then
                        later[#later + 1], seen[name] = name, true
                    end
                end
                local top = #got > 0 and got[#got].seq or 0
                for _ = 1, r:int(0, 8) do
                    local name = r:int(1, 5) == 1 and random_name(r, cfg)
                        or ("_c_%08x-%s%010d"):format(r:int(0, 2147483646), cfg.marker,
                                                      math.min(top + r:int(1, 9), 2147483647))
                    if not seen[name] then
                        table.insert(later, r:int(1, #later + 1), name)
                        seen[name] = true
                    end
                end
                check_same(assert(drivers.parse(d, parent, later)),
                           assert(drivers.sorted(d, parent, later, { entries = got, index = index })),
                           ("%s, case %d (SCAN_SEED=%d): listing %s after %s"):format(cfg.what,
                               case, seed, table.concat(later, " "), table.concat(names, " ")))
            end
        end
    end)

    it("reads names exactly as parse does, around the wrap and past a double's digits", function()
        local d = line.driver { marker = "lock-", rule = rules.first }
        local names = { "_c_a-lock-2147483647", "_c_b-lock--2147483648", "_c_c-lock-0000000002",
                        "_c_d-lock-12345678901234567890", "lock-x", "_c_e-lock-", "other-1" }
        -- past the wrap is newest: the -2147483648 node waits behind 2147483647
        local v = drivers.scan(d, "/l", names, "_c_b-lock--2147483648")
        assert.same({ name = "_c_a-lock-2147483647", path = "/l/_c_a-lock-2147483647",
                      seq = 2147483647, marker = "lock-" }, v)
        -- ... which waits behind 2; the 20-digit number sorts above all
        assert.equal("_c_c-lock-0000000002", drivers.scan(d, "/l", names, "_c_a-lock-2147483647").name)
        assert.equal("_c_b-lock--2147483648",
                     drivers.scan(d, "/", names, "_c_d-lock-12345678901234567890").name)
        assert.is_true(drivers.scan(d, "/l", names, "_c_c-lock-0000000002"))
        -- ours absent, or not a participant: not in the line
        assert.is_nil(drivers.scan(d, "/l", names, "_c_f-lock-0000000001"))
        assert.is_nil(drivers.scan(d, "/l", names, "lock-x"))
        assert.is_nil(drivers.scan(d, "/l", names, nil))
    end)

    it("is chosen once, by line.driver, for a built-in rule without a key only", function()
        assert.truthy(line.driver { marker = "m-", rule = rules.first }.scan)
        assert.truthy(line.driver { marker = "m-", rule = rules.none_below("m-") }.scan)
        assert.truthy(line.driver { marker = "m-", rule = rules.first_none_above("m-") }.scan)
        assert.is_nil(line.driver { marker = "m-", rule = rules.first,
                                    key = function(e) return -e.seq end }.scan)
        assert.is_nil(line.driver { marker = "m-", rule = rules.fewer_than(2) }.scan)
        assert.is_nil(line.driver { marker = "m-", rule = function(_, me) return me == 1 end }.scan)
        assert.is_nil(line.driver { marker = "m-", rule = rules.at_most(1) }.scan)
    end)
end)
