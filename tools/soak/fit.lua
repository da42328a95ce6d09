-- soak.fit: how the soak judges memory. Samples of the Lua heap (after a
-- full collection) and VmRSS; after the warm-up (the first third of the
-- run) a least-squares line through the samples gives the slope per minute,
-- and growth = slope x the measured span. Flat means heap growth < 1 MiB and
-- RSS growth < 5 MiB over that span (why these bounds: docs/RELIABILITY.md).
local _M = {}

_M.HEAP_BOUND_KB, _M.RSS_BOUND_KB = 1024, 5120

-- Slope per minute of points[i][key] over points[i].t (seconds).
local function slope(points, key)
    local n, sx, sy, sxx, sxy = 0, 0, 0, 0, 0
    for _, p in ipairs(points) do
        local x, y = p.t / 60, p[key]
        n = n + 1
        sx, sy, sxx, sxy = sx + x, sy + y, sxx + x * x, sxy + x * y
    end
    if n < 2 then
        return 0
    end
    local den = n * sxx - sx * sx
    if den == 0 then
        return 0
    end
    return (n * sxy - sx * sy) / den
end

-- start / end / max over the measured samples, the whole run's max, the
-- slope and the growth, for one key.
local function figures(samples, measured, key)
    local first, last = measured[1], measured[#measured]
    local maxv, max_all = -math.huge, -math.huge
    for _, s in ipairs(measured) do maxv = math.max(maxv, s[key]) end
    for _, s in ipairs(samples) do max_all = math.max(max_all, s[key]) end
    local k = slope(measured, key)
    local span = last and (last.t - first.t) / 60 or 0
    return {
        start = first and first[key], ["end"] = last and last[key],
        max = maxv, max_run = max_all, first_sample = samples[1] and samples[1][key],
        slope_per_min = k, growth = k * span,
    }
end

--- Judges the samples of a run of `elapsed` seconds. `asan`: RSS is the
--- sanitizer's (its quarantine grows by design), so only the heap counts.
function _M.judge(samples, elapsed, asan)
    local warm_until = elapsed / 3
    local measured = {}
    for _, s in ipairs(samples) do
        if s.t >= warm_until then
            measured[#measured + 1] = s
        end
    end
    local heap = figures(samples, measured, "heap_kb")
    local rss = figures(samples, measured, "rss_kb")
    local enough = #measured >= 3
    local heap_flat = enough and heap.growth < _M.HEAP_BOUND_KB
    local rss_flat = enough and rss.growth < _M.RSS_BOUND_KB
    return {
        warmup = warm_until, measured = #measured, heap = heap, rss = rss,
        heap_flat = heap_flat, rss_flat = rss_flat, flat = heap_flat and (rss_flat or asan),
    }
end

function _M.format(f)
    return ("start %.1f, end %.1f, max %.1f (whole run %.1f) KiB; slope %+.2f KiB/min, "
            .. "growth %+.1f KiB"):format(f.start or 0, f["end"] or 0, f.max, f.max_run,
                                          f.slope_per_min, f.growth)
end

return _M
