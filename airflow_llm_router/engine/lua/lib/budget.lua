-- Spend budgets in fixed point (docs/budgets.md). Units: micro-dollars (whole numbers),
-- prices in micro-dollars per million tokens, times in ms of the Redis clock.
-- A model is priced when its quota has "pi" or "po" (a missing one is 0). Spend is kept per
-- budget period, aligned to multiples of the period since the epoch: the model's "bper",
-- and for the router-wide total ('*') the period of its budget (a UTC day without one).
-- K_SPEND holds, per owner o (a model or '*'): o|s the current period's start, o|c
-- committed (settled + reserved), o|r reserved by calls in flight, and o|ps, o|pc, o|pr the
-- same of the period before it (calls admitted then still settle there); '*|b' and
-- '*|per' are the router-wide budget. Admission reserves a call's estimated cost (c and r
-- grow by it); completion settles the actual cost (c moves by actual - estimate, r drops by
-- the estimate; a 429 costs 0); an expired lease settles at its reservation (r drops, c
-- keeps it). A call is admitted only while c + its cost <= the budget, so c exceeds a
-- budget by at most what settlements above their reservations add. A lease's reservation
-- rides in its record in K_LEASES (lib/prelude.lua): "<cost>:<in price>:<out price>:<model
-- period start>:<total period start>", so settling it reads nothing more.
local DAY_MS = 86400000
local SPEND_FIELDS = {'s', 'c', 'r', 'ps', 'pc', 'pr'}
local SPEND = {}      -- owner -> {s, c, r, ps, pc, pr, dirty}, read once per call
local TOTAL = nil     -- {b = budget or nil, per = period ms}

-- ceil(n / 10^6) for a whole n >= 0, exact while n < 2^53 (a plain division may round a
-- quotient just above a whole number down to it)
local function micro_ceil(n)
  local q = math.floor(n / 1000000)
  local r = n - q * 1000000
  if r < 0 then q, r = q - 1, r + 1000000 elseif r >= 1000000 then q, r = q + 1, r - 1000000 end
  if r > 0 then q = q + 1 end
  return q
end

local function budget_priced(q) return q.pi ~= nil or q.po ~= nil end

-- The estimated cost of a need {s, i, o}. Without a split from the caller (i and o both
-- the whole estimate), every token is charged at the higher price: an upper bound.
local function need_cost(q, need)
  local pi, po = q.pi or 0, q.po or 0
  if need.i + need.o > need.s then return micro_ceil(need.s * math.max(pi, po)) end
  return micro_ceil(need.i * pi + need.o * po)
end

-- Read the spend of these owners not read yet (and the router-wide budget), one HMGET.
local function spend_load(owners)
  local fields, todo, seen = {}, {}, {}
  if not TOTAL then fields[1], fields[2] = '*|b', '*|per' end
  for _, o in ipairs(owners) do
    if not SPEND[o] and not seen[o] then
      seen[o] = true
      todo[#todo + 1] = o
      for _, f in ipairs(SPEND_FIELDS) do fields[#fields + 1] = o .. '|' .. f end
    end
  end
  if #fields == 0 then return end
  local v, k = redis.call('HMGET', K_SPEND, unpack(fields)), 0
  if not TOTAL then
    TOTAL = {b = tonumber(v[1]), per = tonumber(v[2]) or DAY_MS}
    k = 2
  end
  for _, o in ipairs(todo) do
    local s = {}
    for j, f in ipairs(SPEND_FIELDS) do s[f] = tonumber(v[k + j]) end
    k = k + #SPEND_FIELDS
    s.c, s.r, s.pc, s.pr = s.c or 0, s.r or 0, s.pc or 0, s.pr or 0
    SPEND[o] = s
  end
end

-- A model's budget period (ms), and the start of the period of length `per` now is in
-- (periods are aligned to multiples of their length since the epoch).
local function model_period(q) return q.bper or DAY_MS end
local function period_start(per) return NOW - NOW % per end

-- Owner o's spend in the period starting at `start`, begun (in memory) if it is new: the
-- current one becomes the previous, the one before that is forgotten.
local function spend_current(o, start)
  local s = SPEND[o]
  if s.s ~= start then
    s.ps, s.pc, s.pr = s.s, s.c, s.r
    s.s, s.c, s.r = start, 0, 0
  end
  return s
end

-- Settle on owner o's period `start` (current or previous; an older one is forgotten).
local function spend_move(o, start, dc, dr)
  local s = SPEND[o]
  if s.s == start then
    s.c, s.r = s.c + dc, math.max(0, s.r + dr)
  elseif s.ps == start then
    s.pc, s.pr = s.pc + dc, math.max(0, s.pr + dr)
  else
    return
  end
  s.dirty = true
end

-- Why a request could never fit a model's budget or the total, or nil.
local function budget_never(m, q, need)
  if not budget_priced(q) then return nil end
  spend_load({m, '*'})
  local cost = need_cost(q, need)
  if (q.bud and cost > q.bud) or (TOTAL.b and cost > TOTAL.b) then return 'too_costly' end
  return nil
end

-- 0 when a call fits model m's budget and the total now, else (ms until the period of the
-- budget it exceeds resets, 'budget').
local function budget_wait(m, q, need)
  if not budget_priced(q) then return 0 end
  spend_load({m, '*'})
  local cost, wait = need_cost(q, need), 0
  if q.bud then
    local per = model_period(q)
    local start = period_start(per)
    if spend_current(m, start).c + cost > q.bud then wait = start + per - NOW end
  end
  if TOTAL.b then
    local start = period_start(TOTAL.per)
    if spend_current('*', start).c + cost > TOTAL.b then
      wait = math.max(wait, start + TOTAL.per - NOW)
    end
  end
  if wait > 0 then return wait, 'budget' end
  return 0
end

-- Reserve the estimated cost of a call on model m and the total; returns the record for
-- the lease (nil for an unpriced model).
local function budget_reserve(m, q, need)
  if not budget_priced(q) then return nil end
  spend_load({m, '*'})
  local cost = need_cost(q, need)
  local ms, ts = period_start(model_period(q)), period_start(TOTAL.per)
  local s, tot = spend_current(m, ms), spend_current('*', ts)
  s.c, s.r, s.dirty = s.c + cost, s.r + cost, true
  tot.c, tot.r, tot.dirty = tot.c + cost, tot.r + cost, true
  return int(cost) .. ':' .. int(q.pi or 0) .. ':' .. int(q.po or 0) .. ':' .. int(ms) .. ':'
         .. int(ts)
end

-- Settle the reservations of leases: costs maps lease id -> its cost record (leases of
-- unpriced models have none); actual_of(lease id, in price, out price) gives the actual
-- cost (micro-dollars), nil for the reservation.
local function budget_release(lids, costs, actual_of)
  local recs, owners = {}, {'*'}
  for _, lid in ipairs(lids) do
    if costs[lid] then
      local v = {}
      for x in string.gmatch(costs[lid], '[^:]+') do v[#v + 1] = tonumber(x) end
      recs[#recs + 1] = {lid = lid, m = split_model(lid), v = v}
      owners[#owners + 1] = recs[#recs].m
    end
  end
  if #recs == 0 then return end
  spend_load(owners)
  for _, rec in ipairs(recs) do
    local v = rec.v
    local est = v[1]
    local actual = actual_of(rec.lid, v[2], v[3]) or est
    spend_move(rec.m, v[4], actual - est, -est)
    spend_move('*', v[5], actual - est, -est)
  end
end

-- Expired leases (reclaimed by lib/model_state.lua, with their K_LEASES records) settle
-- at their reservation.
local function budget_expire(lids, infos)
  local costs = {}
  for k, lid in ipairs(lids) do
    if infos[k] then costs[lid] = lease_fields(infos[k]).c end
  end
  budget_release(lids, costs, function() return nil end)
end

local function budget_flush()
  local w = {}
  for o, s in pairs(SPEND) do
    if s.dirty then
      for _, f in ipairs(SPEND_FIELDS) do
        if s[f] then w[#w + 1], w[#w + 2] = o .. '|' .. f, int(s[f]) end
      end
      s.dirty = false
    end
  end
  if #w > 0 then redis.call('HSET', K_SPEND, unpack(w)) end
end

-- Settle completed leases: items {lease id, input or -1, output or -1, outcome, ...}, each
-- lease once (its first mention); records: lease id -> lease_fields of the live ones.
-- Known tokens settle at their cost, a 429 or an unknown model at 0 (the provider served
-- nothing), unknown tokens at the reservation.
local function budget_settle(items, records)
  local lids, first, costs = {}, {}, {}
  for _, it in ipairs(items) do
    local rec = records[it[1]]
    if rec and rec.c and not first[it[1]] then
      first[it[1]] = it
      lids[#lids + 1] = it[1]
      costs[it[1]] = rec.c
    end
  end
  if #lids == 0 then return end
  budget_release(lids, costs, function(lid, pi, po)
    local it = first[lid]
    if it[4] == 'rate_limited' or it[4] == 'unknown_model' then return 0 end
    if it[2] >= 0 and it[3] >= 0 then return micro_ceil(it[2] * pi + it[3] * po) end
    return nil
  end)
  budget_flush()
end

-- {budget?, committed, reserved, period_ms, period_start_ms} of owner o's current period,
-- as decimal strings: cjson writes numbers with 14 significant digits, money needs them all.
local function spend_view(o, per, budget)
  spend_load({o})
  local start, s = period_start(per), SPEND[o]
  local c, r = 0, 0
  if s.s == start then c, r = s.c, s.r end
  return {budget = budget and int(budget), committed = int(c), reserved = int(r),
          period_ms = int(per), period_start_ms = int(start)}
end

-- A model's spend (nil when unpriced) and the router-wide total, for stats.
local function budget_view(m, q)
  if not budget_priced(q) then return nil end
  return spend_view(m, model_period(q), q.bud)
end

local function budget_total_view()
  spend_load({'*'})
  return spend_view('*', TOTAL.per, TOTAL.b)
end
