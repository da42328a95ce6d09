--- zkcoord.cache.tree: the mirror's node records and their path index.
--
-- Owns the node record, the path index (cache._nodes: path -> node,
-- pending ones too) and how a reply changes them: data applied by
-- versions, a listing applied as children added and removed, a subtree
-- removed, the root replaced when it goes.
-- Rules: the mirror never goes back: a reply older than the node
-- (czxid, then mzxid) is dropped and the node read again. A node's events
-- follow its versions ("added", "updated" when mzxid grew, "removed"); a
-- node found re-created (a newer czxid) is "removed" and "added" again. A
-- subtree is removed children first, siblings in name order; only shown
-- nodes (stat known) are reported.
-- Part of the cache's class: these are its private methods (see
-- zkcoord.cache), called through self.
local pairs, ipairs = pairs, ipairs
local sort = table.sort

local _M = {}


-- The names of `kids` (name -> node), sorted.
local function sorted_names(kids)
    local names = {}
    for name in pairs(kids) do
        names[#names + 1] = name
    end
    sort(names)
    return names
end


-- A node of the mirror. `stat` is nil while it is pending (listed by its
-- parent, data not read yet): pending nodes are not shown. Only the fields
-- every node has are made here; the others (data, stat, dsid and csid: the
-- session in which our data / child watch is set; the flags dbusy, ddirty,
-- cbusy, cdirty, dowed, cowed, dead; the counts retries, stale; err: why
-- a listed node could not be read) are set when needed and cleared to nil,
-- so a node stays small.
function _M:_new_node(path, depth, parent, name)
    local node = {
        path = path, name = name, depth = depth, parent = parent,
        kids = depth < self.depth and {} or nil,   -- name -> node
        ccz = -1, cpz = -1,       -- czxid and pzxid of the last listing applied
    }
    self._nodes[path] = node
    if parent then
        parent.kids[name] = node
    end
    return node
end


-- Applies a data reply. Returns the node now at that path (a new one when
-- it was re-created).
function _M:_apply_data(node, data, stat)
    local old = node.stat
    if old == nil then
        node.data, node.stat, node.stale, node.err = data, stat, nil, nil
        self:_emit("added", node)
        if node.kids and not node.cbusy and node.ccz ~= stat.czxid then
            self:_read(node, "children")   -- the root, found (again)
        end
        return node
    end
    if stat.czxid < old.czxid or (stat.czxid == old.czxid and stat.mzxid < old.mzxid) then
        self:_stale(node, "data")
        return node
    end
    node.stale = nil
    if stat.czxid ~= old.czxid then
        -- Deleted and created again between two reads: the old one is
        -- gone (with its subtree), this is another node.
        local parent, name, dsid = node.parent, node.name, node.dsid
        local fresh
        if node == self._root then
            fresh = self:_root_gone(node)
        else
            self:_remove(node)
            fresh = self:_new_node(node.path, node.depth, parent, name)
        end
        fresh.dsid = dsid
        fresh.data, fresh.stat = data, stat
        self:_emit("added", fresh)
        self:_read(fresh, "children")
        return fresh
    end
    if stat.mzxid ~= old.mzxid then
        node.data, node.stat = data, stat
        self:_emit("updated", node)
    elseif stat.pzxid >= old.pzxid then
        node.stat = stat                -- same data, newer children counts
    end
    return node
end


-- Applies a listing: children gone are removed, new ones read.
function _M:_apply_children(node, names, stat)
    node.ccz, node.cpz = stat.czxid, stat.pzxid
    local kids = node.kids
    local present = {}
    for _, name in ipairs(names) do
        present[name] = true
    end
    -- Removed first (their deletes came first), in name order.
    local gone
    for name, kid in pairs(kids) do
        if not present[name] then
            gone = gone or {}
            gone[#gone + 1] = kid
        end
    end
    if gone then
        sort(gone, function(a, b) return a.name < b.name end)
        for _, kid in ipairs(gone) do
            self:_remove(kid)
        end
    end
    sort(names)
    local base = node.path == "/" and "" or node.path
    for _, name in ipairs(names) do
        if not kids[name] then
            local kid = self:_new_node(base .. "/" .. name, node.depth + 1, node, name)
            self:_read(kid, "data")
            self:_read(kid, "children")
        end
    end
end


-- Removes a node and its subtree, children first; "removed" for those shown.
function _M:_remove(node)
    if node.dead then
        return
    end
    if node.kids then
        for _, name in ipairs(sorted_names(node.kids)) do
            self:_remove(node.kids[name])
        end
    end
    node.dead = true
    if self._nodes[node.path] == node then
        self._nodes[node.path] = nil
    end
    local parent = node.parent
    if parent and parent.kids[node.name] == node then
        parent.kids[node.name] = nil
    end
    if node.stat then
        self:_emit("removed", node)
    end
end


-- The root is gone: its subtree is removed and a new pending root takes
-- its place (replies for the old one are dropped).
function _M:_root_gone(node)
    if not node.stat then
        return node                    -- never shown: nothing to report
    end
    self:_remove(node)
    local root = self:_new_node(node.path, 0, nil, nil)
    self._root = root
    return root
end


-- Every shown node below and with `node`, parents first, siblings in name
-- order, appended to `out`.
function _M:_shown(node, out)
    if node.stat then
        out[#out + 1] = node
    end
    if node.kids then
        for _, name in ipairs(sorted_names(node.kids)) do
            self:_shown(node.kids[name], out)
        end
    end
    return out
end

return _M
