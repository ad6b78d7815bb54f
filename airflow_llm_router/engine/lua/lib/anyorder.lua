-- The candidates of an any-model request, read from the head of the orders lib/speed.lua
-- keeps, in the order admission tries them: by likely finish (groups of equally fast
-- models, fastest first: lib/finish.lua), each group in fair-share order; or, while a
-- model's latency is unknown, every model in fair-share order alone. The fair order of
-- the index is by finish tag: the start tag max(F, V) rises with F, and tags at or below
-- the virtual time V (an idle model: its start is V either way) tie, in any order.
-- A request reads as many candidates as it tries (usually one), so its cost does not grow
-- with the number of models; the caller declares only the head of the order (the reply
-- names it: admit.lua) and a request that would try a model past it answers 'stale'.
-- A caller that hedges late calls is ordered by the same groups (ranges of the likely
-- latencies, lib/finish.lua), each group placed by its lead's hedged latency: every
-- group's lead is read (their number grows with the spread of the latencies, not with the
-- number of models) and their late points (K_LATE), and a member's hedged latency is
-- read with its likely latency.
-- ANYORDER: this library's functions (walk, head) and what admit.lua counts of a
-- call's any-model requests (n: how many; depth: the deepest place in the order one of
-- them reached, or went stale at: the head named in the reply reaches past it, so requests
-- that pass full models find the head they need declared the next time).
local ANYORDER = {n = 0, depth = 0, hedge = false}
do
local CHUNK = 32  -- names read from an order at once (a large group's scan: 4 first)
local SMALL = 64  -- a group of equally fast models this size or less is read whole
local N, ALONE, GROUPS = nil, nil, {}
-- For a caller that hedges: every group, in the order of its lead's hedged latency (hl),
-- and the fastest model's likely latency (a hedge is a call on it: lib/finish.lua).
local HGROUPS, FAST = nil, nil
-- With no more models than a small group holds, the whole order by speed, read at once
-- ({names, speeds}): the groups are then cut from it, not read one by one.
local ALL = nil
local function num(x) return string.format('%.17g', x) end

local function setup()
  if N then return end
  local raw
  N, raw = SPEED.check(SMALL)
  if raw then
    ALL = {names = {}, speeds = {}}
    for k = 1, #raw, 2 do
      ALL.names[#ALL.names + 1], ALL.speeds[#ALL.speeds + 1] = raw[k], tonumber(raw[k + 1])
    end
    ALONE = N < 2 or ALL.speeds[N] == math.huge
  else
    ALONE = N < 2 or #redis.call('ZRANGEBYSCORE', K_SPEED, '+inf', '+inf', 'LIMIT', 0, 1) > 0
  end
end

-- Group i cut from ALL (see group_at).
local function group_in_all(i)
  local start = 1
  if i > 1 then
    local prev = GROUPS[i - 1]
    if not prev then return false end
    start = prev.last + 1
  end
  local speeds = ALL.speeds
  if start > #speeds then return false end
  local grp = {L = speeds[start], B = SPEED.tier * speeds[start], names = {}, lat = {},
               lead = ALL.names[start]}
  local last = start
  while last < #speeds and speeds[last + 1] <= grp.B do last = last + 1 end
  for k = start, last do
    grp.names[#grp.names + 1], grp.lat[ALL.names[k]] = ALL.names[k], speeds[k]
  end
  grp.g, grp.last = last - start + 1, last
  return grp
end

-- Group i of equally fast models ({L: its lead's likely latency, B: the bound of its
-- members', g: its size}), or false past the last: the lead is the fastest model not in
-- an earlier group, the members every model within SPEED.tier times of it.
local function group_at(i)
  local grp = GROUPS[i]
  if grp ~= nil then return grp end
  if ALL then
    if i > 1 then group_at(i - 1) end
    GROUPS[i] = group_in_all(i)
    return GROUPS[i]
  end
  local got
  if i == 1 then
    got = redis.call('ZRANGE', K_SPEED, 0, 0, 'WITHSCORES')
  else
    local prev = group_at(i - 1)
    if not prev then return false end
    got = redis.call('ZRANGEBYSCORE', K_SPEED, '(' .. num(prev.B), '+inf', 'WITHSCORES',
                     'LIMIT', 0, 1)
  end
  grp = false
  if #got > 0 then
    local L = tonumber(got[2])
    grp = {L = L, B = SPEED.tier * L, lead = got[1]}
    grp.g = redis.call('ZCOUNT', K_SPEED, num(L), num(grp.B))
  end
  GROUPS[i] = grp
  return grp
end

-- Every group for a caller that hedges, by its lead's hedged latency (hl: the sooner of
-- its own likely end and its late point plus a call on the fastest model), then speed.
local function hedged_groups()
  if HGROUPS then return HGROUPS end
  HGROUPS = {}
  local leads, i = {}, 1
  while group_at(i) do
    HGROUPS[i], leads[i] = GROUPS[i], GROUPS[i].lead
    i = i + 1
  end
  if i == 1 then return HGROUPS end
  FAST = GROUPS[1].L
  local late = redis.call('ZMSCORE', K_LATE, unpack(leads))
  for k, grp in ipairs(HGROUPS) do
    grp.hl = math.min(grp.L, (tonumber(late[k]) or math.huge) + FAST)
  end
  table.sort(HGROUPS, function(a, b)
    if a.hl ~= b.hl then return a.hl < b.hl end
    return a.L < b.L
  end)
  return HGROUPS
end

-- The latency a candidate is judged by: its likely latency `s`, or for a caller that
-- hedges, its hedged latency from its late point (`late`, as ZMSCORE answers it).
local function judged(s, late, hedge)
  if not hedge then return s end
  return math.min(s, (tonumber(late) or math.huge) + FAST)
end

-- A small group's members in fair order (their names read once per call), by start tag
-- and name, as lib/finish.lua orders a list.
local function small_order(grp, lat, hedge)
  if not grp.names then
    local raw = redis.call('ZRANGEBYSCORE', K_SPEED, num(grp.L), num(grp.B), 'WITHSCORES')
    grp.names, grp.lat = {}, {}
    for k = 1, #raw, 2 do
      grp.names[#grp.names + 1], grp.lat[raw[k]] = raw[k], tonumber(raw[k + 1])
    end
  end
  if hedge and not grp.late then grp.late = redis.call('ZMSCORE', K_LATE, unpack(grp.names)) end
  local f = fair_load(grp.names)
  local order, tag = {}, {}
  for k, m in ipairs(grp.names) do
    order[k], tag[m] = m, math.max(f.tags[m] or 0, f.v)
    lat[m] = judged(grp.lat[m], hedge and grp.late[k], hedge)
  end
  local function before(a, b)
    if tag[a] ~= tag[b] then return tag[a] < tag[b] end
    return a < b
  end
  -- An admission usually takes the first candidate: it is found by one pass (names are
  -- unique, so the order is total and the least is the sort's first); the rest are
  -- sorted only when a second one is asked for.
  local k = 0
  return function()
    k = k + 1
    if k == 1 then
      local best = 1
      for j = 2, #order do
        if before(order[j], order[best]) then best = j end
      end
      order[1], order[best] = order[best], order[1]
    elseif k == 2 and #order > 2 then
      local rest = {}
      for j = 2, #order do rest[j - 1] = order[j] end
      table.sort(rest, before)
      for j, m in ipairs(rest) do order[j + 1] = m end
    end
    return order[k]
  end
end

-- The fair order of the models whose likely latency is within [lo, hi] (`every`: of every
-- model), read from its head as the caller asks: {m, s: likely latency, late: late point
-- when `hedge`} each. The models whose tag is at or below the virtual time V all start at
-- V (a tie); the parked ones (K_PARK: idle, their tags below V, kept by likely latency)
-- too: they come after the idle ones still in K_FAIRQ, then the models whose tag is past
-- V, by tag. Unless `every`, an idle model out of the range met on the way is parked, so
-- no later request walks past it again: its tag stays below V until an admission charges
-- it (V never falls), which takes it back into K_FAIRQ (SPEED.fairq). Left in K_FAIRQ,
-- the idle models of slower groups sat at the head of the fair order of a fast group that
-- takes the work, and each request of it read past them (python -m bench.scale).
local function fair_scan(lo, hi, hedge, every)
  local v = fair_load({}).v
  local from, to = every and '-inf' or num(lo), every and '+inf' or num(hi)
  local pos, step, ppos, idle = 0, 4, 0, true
  local parking = true  -- the parked ones not all read yet
  local buf, k = {}, 0
  local function read_park()
    local raw = redis.call('ZRANGEBYSCORE', K_PARK, from, to, 'WITHSCORES',
                           'LIMIT', ppos, CHUNK)
    if #raw == 0 then return false end
    ppos = ppos + #raw / 2
    local names = {}
    for j = 1, #raw, 2 do names[#names + 1] = raw[j] end
    local late = hedge and redis.call('ZMSCORE', K_LATE, unpack(names)) or {}
    for j, m in ipairs(names) do
      buf[#buf + 1] = {m = m, s = tonumber(raw[2 * j]), late = late[j]}
    end
    return true
  end
  local function read_fairq()
    local raw = redis.call('ZRANGE', K_FAIRQ, pos, pos + step - 1, 'WITHSCORES')
    step = math.min(CHUNK, 2 * step)
    if #raw == 0 then return false end
    local names = {}
    for j = 1, #raw, 2 do names[#names + 1] = string.sub(raw[j], 2) end
    local speeds = every and {} or redis.call('ZMSCORE', K_SPEED, unpack(names))
    local late = hedge and redis.call('ZMSCORE', K_LATE, unpack(names)) or {}
    local gone, park = {}, {}
    for j, m in ipairs(names) do
      if idle and tonumber(raw[2 * j]) > v then
        idle = false  -- the rest is read after the parked ones
        break
      end
      local s = tonumber(speeds[j])
      if every or (s and s >= lo and s <= hi) then
        buf[#buf + 1] = {m = m, s = s, late = late[j]}
        pos = pos + 1
      elseif idle and s then
        gone[#gone + 1], park[#park + 1], park[#park + 2] = raw[2 * j - 1], speeds[j], m
      else
        pos = pos + 1
      end
    end
    if #gone > 0 then
      redis.call('ZREM', K_FAIRQ, unpack(gone))
      redis.call('ZADD', K_PARK, unpack(park))
    end
    return true
  end
  return function()
    while true do
      k = k + 1
      if buf[k] then return buf[k] end
      buf, k = {}, 0
      if idle then
        if not read_fairq() then idle = false end  -- K_FAIRQ read to its end
      elseif parking then
        if not read_park() then parking = false end
      elseif not read_fairq() then
        return nil
      end
    end
  end
end

-- A large group's members in fair order (a model's group: its likely latency within the
-- group's range), from the fair order (fair_scan).
local function big_order(grp, lat, hedge)
  local scan, found = fair_scan(grp.L, grp.B, hedge, false), 0
  return function()
    if found >= grp.g then return nil end
    local x = scan()
    if not x then return nil end
    found = found + 1
    lat[x.m] = judged(x.s, x.late, hedge)
    return x.m
  end
end

-- The candidates of one any-model request: a function returning the next one (nil past
-- the last); the likely latency, mean latency and group (its lead's likely latency) of
-- each one returned, or nil for all three when the fair share decides alone; the number
-- of models. `hedge`: the caller hedges late calls. Each request asks anew: admissions
-- move the fair order.
function ANYORDER.walk(hedge)
  setup()
  if ALONE then
    local scan = fair_scan(nil, nil, false, true)
    return function()
      local x = scan()
      return x and x.m
    end, nil, nil, nil, N
  end
  local lat, group = {}, {}
  local mean = setmetatable({}, {__index = function(t, m)
    local u = EST[m .. '|lat'] or model_view(m).q.lat * 1000
    rawset(t, m, u)
    return u
  end})
  local gi, cur, next_in = 0, nil, nil
  return function()
    while true do
      if next_in then
        local m = next_in()
        if m then
          group[m] = hedge and cur.hl or cur.L
          return m
        end
        next_in = nil
      end
      gi = gi + 1
      if hedge then cur = hedged_groups()[gi] else cur = group_at(gi) end
      if not cur then return nil end
      if cur.g <= SMALL then next_in = small_order(cur, lat, hedge)
      else next_in = big_order(cur, lat, hedge) end
    end
  end, lat, mean, group, N
end

-- The first `depth` candidates an any-model request would try now: what the caller
-- declares for the next call (every model, when there are no more), in the order of a
-- caller that hedges late calls or (`hedge` false) of one that does not.
function ANYORDER.head(depth, hedge)
  setup()
  if ALL and N <= depth then return ALL.names end
  if N <= depth then return redis.call('ZRANGE', K_SPEED, 0, -1) end
  local walk = ANYORDER.walk(hedge)
  local head = {}
  for k = 1, depth do
    head[k] = walk()
    if not head[k] then break end
  end
  return head
end

end  -- of what this library keeps to itself
