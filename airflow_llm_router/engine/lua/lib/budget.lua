-- Spend budgets in fixed point (docs/budgets.md). Units: micro-dollars (whole numbers),
-- prices in micro-dollars per million tokens, times in ms of the Redis clock.
-- A model is priced when its quota has "pi" or "po" (a missing one is 0). Its spend is kept
-- per budget period (aligned to multiples of "bper" ms since the epoch) in
-- K_SPEND(model|start), and the router-wide total in K_SPEND(*|start) per the period of
-- K_BUDGET (a UTC day without one). Each holds c, committed (settled + reserved), and r,
-- reserved by calls in flight. Admission reserves a call's estimated cost (c and r grow by
-- it); completion settles the actual cost (c moves by actual - estimate, r drops by the
-- estimate; a 429 costs 0); an expired lease settles at its reservation (r drops, c keeps
-- it). A call is admitted only while c + its cost <= the budget, so c exceeds a budget by
-- at most what settlements above their reservations add.
local DAY_MS = 86400000
local SPEND = {}      -- spend key -> {c, r, exp, gone, dirty}, loaded once per call
local TOTAL = nil     -- {b = budget or nil, per = period ms}
local NEW_COSTS = {}  -- K_LCOST field/value pairs, written by budget_flush

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

local function total_budget()
  if TOTAL then return TOTAL end
  local raw = redis.call('GET', K_BUDGET)
  TOTAL = {per = DAY_MS}
  if raw then
    local d = cjson.decode(raw)
    TOTAL = {b = d.b, per = d.per}
  end
  return TOTAL
end

-- The spend of owner's period starting at `start`. create: a missing key is a new period
-- (admission); otherwise it is a period already forgotten, and moves on it are dropped.
local function spend_of(owner, start, per, create)
  local key = K_SPEND(owner .. '|' .. int(start))
  local s = SPEND[key]
  if not s then
    local v = redis.call('HMGET', key, 'c', 'r')
    s = {c = tonumber(v[1]) or 0, r = tonumber(v[2]) or 0, exp = start + 2 * per + LEASE_TTL,
         gone = not v[1]}
    SPEND[key] = s
  end
  if create then s.gone = false end
  return s
end

local function spend_move(owner, start, per, dc, dr)
  local s = spend_of(owner, start, per, false)
  if s.gone then return end
  s.c, s.r, s.dirty = s.c + dc, math.max(0, s.r + dr), true
end

-- Why a request could never fit a model's budget or the total, or nil.
local function budget_never(q, need)
  if not budget_priced(q) then return nil end
  local cost, t = need_cost(q, need), total_budget()
  if (q.bud and cost > q.bud) or (t.b and cost > t.b) then return 'too_costly' end
  return nil
end

-- 0 when a call fits model m's budget and the total now, else (ms until the period of the
-- budget it exceeds resets, 'budget').
local function budget_wait(m, q, need)
  if not budget_priced(q) then return 0 end
  local cost, wait = need_cost(q, need), 0
  if q.bud then
    local per = q.bper or DAY_MS
    local start = NOW - NOW % per
    if spend_of(m, start, per, true).c + cost > q.bud then wait = start + per - NOW end
  end
  local t = total_budget()
  if t.b then
    local start = NOW - NOW % t.per
    if spend_of('*', start, t.per, true).c + cost > t.b then
      wait = math.max(wait, start + t.per - NOW)
    end
  end
  if wait > 0 then return wait, 'budget' end
  return 0
end

-- Reserve the estimated cost of lease lid on model m and the total.
local function budget_reserve(m, q, lid, need)
  if not budget_priced(q) then return end
  local cost, per, t = need_cost(q, need), q.bper or DAY_MS, total_budget()
  local ms, ts = NOW - NOW % per, NOW - NOW % t.per
  local s, tot = spend_of(m, ms, per, true), spend_of('*', ts, t.per, true)
  s.c, s.r, s.dirty = s.c + cost, s.r + cost, true
  tot.c, tot.r, tot.dirty = tot.c + cost, tot.r + cost, true
  NEW_COSTS[#NEW_COSTS + 1] = lid
  NEW_COSTS[#NEW_COSTS + 1] = table.concat({int(cost), int(q.pi or 0), int(q.po or 0),
                                            int(ms), int(per), int(ts), int(t.per)}, ':')
end

-- Settle the reservations of leases: actual_of(lease id, in price, out price) gives the
-- actual cost (micro-dollars), nil for the reservation.
local function budget_release(lids, actual_of)
  if #lids == 0 then return end
  local raw = redis.call('HMGET', K_LCOST, unpack(lids))
  local done = {}
  for k, lid in ipairs(lids) do
    if raw[k] then
      local v = {}
      for x in string.gmatch(raw[k], '[^:]+') do v[#v + 1] = tonumber(x) end
      local est = v[1]
      local actual = actual_of(lid, v[2], v[3]) or est
      spend_move(split_model(lid), v[4], v[5], actual - est, -est)
      spend_move('*', v[6], v[7], actual - est, -est)
      done[#done + 1] = lid
    end
  end
  if #done > 0 then redis.call('HDEL', K_LCOST, unpack(done)) end
end

-- Expired leases (reclaimed by lib/model_state.lua) settle at their reservation.
local function budget_expire(lids)
  budget_release(lids, function() return nil end)
end

local function budget_flush()
  for key, s in pairs(SPEND) do
    if s.dirty then
      redis.call('HSET', key, 'c', int(s.c), 'r', int(s.r))
      redis.call('PEXPIREAT', key, int(s.exp))
      s.dirty = false
    end
  end
  if #NEW_COSTS > 0 then
    redis.call('HSET', K_LCOST, unpack(NEW_COSTS))
    NEW_COSTS = {}
  end
end

-- Settle completed leases: items {lease id, input or -1, output or -1, outcome, ...}, each
-- lease once (its first mention). Known tokens settle at their cost, a 429 at 0 (the
-- provider served nothing), unknown tokens at the reservation.
local function budget_settle(items)
  local lids, first = {}, {}
  for _, it in ipairs(items) do
    if not first[it[1]] then
      first[it[1]] = it
      lids[#lids + 1] = it[1]
    end
  end
  budget_release(lids, function(lid, pi, po)
    local it = first[lid]
    if it[4] == 'rate_limited' then return 0 end
    if it[2] >= 0 and it[3] >= 0 then return micro_ceil(it[2] * pi + it[3] * po) end
    return nil
  end)
  budget_flush()
end

-- {budget?, committed, reserved, period_ms, period_start_ms} of an owner's current period.
local function spend_view(owner, per, budget)
  local start = NOW - NOW % per
  local s = spend_of(owner, start, per, true)
  return {budget = budget, committed = s.c, reserved = s.r, period_ms = per,
          period_start_ms = start}
end

-- A model's spend (nil when unpriced) and the router-wide total, for stats.
local function budget_view(m, q)
  if not budget_priced(q) then return nil end
  return spend_view(m, q.bper or DAY_MS, q.bud)
end

local function budget_total_view()
  local t = total_budget()
  return spend_view('*', t.per, t.b)
end
