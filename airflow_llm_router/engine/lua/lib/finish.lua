-- Finish-time-aware choice: a request that lets the engine choose its model (any model, or
-- an unordered list) goes to the model where it would likely finish soonest: the wait for
-- room there plus that model's likely latency. A fast model that frees in a moment beats a
-- slow one with room now; a slow model is taken while its call would still end before the
-- fast ones could finish it (early in a backlog, when the fast models' windows are full).
-- Without a latency estimate for every candidate (nothing observed, no prior), the weighted
-- fair share decides alone (lib/fair.lua).
local late_after, likely_wait, backlog_horizon, finish_order, finish_bar, finish_waits_for
-- What this library keeps to itself lives in this block: a script's main function may
-- have at most 200 locals (Lua's limit), and admit.lua loads every library.
do
-- Likely latency: the learned mean (K_EST '<model>|lat', weighted by recency, from the
-- quota's prior 'lat' when it has one: lib/kinds.lua) plus FINISH_SPREAD mean deviations
-- (K_EST '<model>|latd', the mean |latency - mean|), never fewer than SPEED.floor of the
-- mean (SPEED.at, lib/speed.lua: the any-model index is ordered by the same figure).
-- Model latencies are heavy-tailed (a log-normal spread, and stragglers several times the
-- median), and the call that ends a backlog is a slow model's call that ended late: one
-- call more for a fast model costs a fraction of a second, one slow call that strays costs
-- the whole backlog its excess. So a slow model is judged by about the 99th percentile of
-- its latency (five mean deviations of a log-normal at the spreads seen), not its mean.
local FINISH_SPREAD = SPEED.spread  -- 5 (lib/speed.lua keeps the models in this order)
-- The least mean deviation assumed, SPEED.floor (0.5) of the mean: latencies spread in
-- proportion to the mean (about half of it at the spreads seen), and a deviation learned
-- from a model's first calls, the short ones that ended first, is too small: a likely
-- latency is never under 1 + 5/2 times the mean.

-- A model's mean latency plus `spread` mean deviations, and its mean (ms), or nil when
-- nothing is known of it (m has a quota). The quota is decoded only for its prior, when
-- nothing was learned: an any-model request weighs every model's latency.
local function latency_at(m, spread)
  local mean = EST[m .. '|lat']
  if not mean then
    local q = model_view(m).q
    if q.lat then mean = q.lat * 1000 end
  end
  if not mean then return nil end
  return SPEED.at(mean, EST[m .. '|latd'], spread), mean
end

-- A model's likely and mean latency (ms), or nil when nothing is known of it.
local function likely_latency(m)
  return latency_at(m, FINISH_SPREAD)
end

-- When a call on a model is late (ms after its admission, or -1 when nothing is known of
-- the model's latency): HEDGE_SPREAD mean deviations past its mean (about its 85th
-- percentile at the spreads seen, never under 1.5 times the mean). The admission says it
-- to the caller, which may then send the prompt to another model as well, keep the first
-- answer and abandon the other (solver/hedging.py): a straggler that ends a backlog costs
-- it its whole excess, a second call costs one call. One deviation, not two (about the
-- 95th percentile): a caller that hedges judges a slow model by its late point plus a
-- fast call (hedged_latency below), so an earlier late point keeps the slow models taking
-- work later into a backlog; measured on W4 without Airflow, 72.8, 76.1, 75.1 s against
-- 76.7, 77.0, 76.9 s interleaved, W3 and W1 unchanged, at about twice the hedged calls
-- (python -m bench.direct; docs/engine.md, "Finish-time choice").
local HEDGE_SPREAD = SPEED.late  -- 1 (lib/speed.lua keeps the models' late points)
-- A model's late point (ms), or nil when nothing is known of its latency.
local function late_point(m)
  return latency_at(m, HEDGE_SPREAD)
end

function late_after(m)
  local view = model_view(m)
  local late = view and late_point(m)
  return late and int(late) or -1
end

-- How long a request would likely wait for room on a model that has none now (ms), from
-- blocked()'s wait and reason. A concurrency wait is for calls to end, which blocked() does
-- not foresee (it answers at most MAX_WAIT, as every release is announced): there, the
-- waiters queued ahead of the request are served first (its place in the queue, or, not
-- queued yet, every waiter ranked up to its rank: lib/waiters.lua), and the model's calls
-- end at max_concurrency per mean latency (mean, ms).
function likely_wait(st, wait, reason, req, rank, queued, mean)
  if reason ~= 'concurrency' then return wait end
  local ahead = req.ahead  -- the same for every model tried: counted once per request
  if not ahead then
    if queued then
      ahead = redis.call('ZRANK', K_WAITERS, req.rid) or 0
    else
      ahead = redis.call('ZCOUNT', K_WAITERS, '-inf', int(rank))
    end
    req.ahead = ahead
  end
  return (ahead + 1) * mean / st.q.conc
end

-- How long the whole backlog would likely take to drain (ms), or 0 when no drain reports
-- one (K_BACKLOG: the tasks not yet claimed, by source, each report until its expiry;
-- while one is live, the requests waiting in the engine count too). The requests waiting
-- in the engine are only what the callers hold now; with thousands more behind them, a
-- request that waits for a fast model is served no sooner than the backlog ahead of it,
-- not when the fast model's window slides. A slower model's call that ends before the
-- backlog would drain ends no later than it, so it is taken (admit.lua).
-- The horizon is the time t by which the models could start every task of the backlog
-- (backlog_capacity). Counting every model, the chosen ones or not, makes it short
-- rather than long: a slow call is never taken on a backlog that the fast models could
-- drain alone.
local HORIZON = nil

-- What each model (of those declared to this call: an any-model request declares the head
-- of its order, lib/anyorder.lua) could start within t ms, from its
-- window log: the room in its window now (its rpm, or its tpm at its learned output per
-- call, less what the window holds), plus the entries that leave the window by then
-- (a model that took its window in a burst gets it back in a burst: a window-blind rate
-- made a backlog that the next second's refill clears look ten seconds long); never more
-- than its concurrency plus what it ends at its learned mean latency. (A window over its
-- target, after a cut, first sheds what it holds over.) Past one window, what it started
-- a window earlier frees its place again: a call started at s leaves at s + window, so
-- within t it starts a whole window's calls per window passed, then what it could start
-- within the rest, as within the first (where it had spread each later window's calls
-- evenly over it).
local function backlog_capacity()
  local ms = {}
  for m in pairs(DECLARED) do
    local view = model_view(m)
    if view then
      local q = view.q
      local per_win = math.min(q.rpm, q.tpm / math.max(1, view.est))
      local since = NOW - q.win
      local held = redis.call('ZCOUNT', K_WIN(m), '(' .. int(since), '+inf')
      local mean = EST[m .. '|lat'] or (q.lat and q.lat * 1000)
      ms[#ms + 1] = {m = m, win = q.win, since = since, per_win = per_win,
                     room = math.max(0, per_win - held),
                     over = math.max(0, held - per_win), conc = q.conc,
                     ends = (mean and mean > 0) and q.conc / mean or nil}
    end
  end
  return function(t)
    local total = 0
    for _, x in ipairs(ms) do
      local windows = math.floor(t / x.win)
      local rest = t - windows * x.win
      local left = redis.call('ZCOUNT', K_WIN(x.m), '(' .. int(x.since),
                              int(x.since + rest))
      local c = windows * x.per_win + x.room + math.max(0, left - x.over)
      if x.ends then c = math.min(c, x.conc + x.ends * t) end
      total = total + c
    end
    return total
  end
end

local HORIZON_STEPS = 10  -- bisections: a window's 1/1024th
function backlog_horizon()
  if HORIZON then return HORIZON end
  HORIZON = 0
  local n, live = backlog_reports(false)  -- lib/reports.lua
  if live == 0 then return HORIZON end
  n = n + redis.call('ZCARD', K_WAITERS)
  local cap = backlog_capacity()
  if cap(0) >= n then return HORIZON end
  local lo, hi = 0, 1000
  for _ = 1, 40 do  -- doubling
    if cap(hi) >= n then break end
    lo, hi = hi, hi * 2
  end
  for _ = 1, HORIZON_STEPS do
    local mid = (lo + hi) / 2
    if cap(mid) >= n then hi = mid else lo = mid end
  end
  HORIZON = hi
  return HORIZON
end

-- Models whose likely latencies are within FINISH_TIER of the fastest of a group count as
-- equally fast (learned latencies differ by noise, and by the callers' own delays): among
-- them the weighted fair share decides, as it does without latencies. The groups are made
-- from each model's own likely latency, also for a caller that hedges: a hedged latency
-- (below) adds the same fast call to every slow model's late point, which brings models
-- twice as slow as each other within FINISH_TIER (W4's chat-small and chat-medium: about
-- 4.7 and 7.1 s hedged, 5.8 and 11.4 s alone). Counted equally fast, the slower one took
-- the last prompts of a backlog while the faster freed within a second, and its calls,
-- about twice as long, ended the run (measured on W4 without Airflow, python -m
-- bench.direct; docs/engine.md, "Finish-time choice"). The groups are ranges of the own
-- likely latencies, each led by its fastest (so a caller that hedges is ordered from the
-- same index as one that does not: lib/anyorder.lua); the hedged latencies order the
-- groups (by their lead's) and say when a group or a member is passed.
local FINISH_TIER = SPEED.tier  -- 1.5

-- A caller that hedges late calls (the request's `hedge`: solver/hedging.py) sends a
-- call's prompt to another model as well once the call is late, when nothing of its
-- backlog is left to admit: the calls that could end a backlog are hedged. Such a call
-- ends by the sooner of its own end and its late point plus a call on the fastest
-- candidate, so a slow model is judged by that (the fastest's likely latency past the slow
-- model's late point), not by its own 99th percentile: a straggler that would have ended
-- the backlog costs one hedge, not the backlog its excess. Slow models then take calls
-- until their late point, not their 99th percentile, is past the backlog's horizon.
local function hedged_latency(lat, order)
  local fast = nil
  for _, m in ipairs(order) do
    if not fast or lat[m] < fast then fast = lat[m] end
  end
  local out = {}
  for _, m in ipairs(order) do
    out[m] = math.min(lat[m], late_point(m) + fast)
  end
  return out
end

-- The likely and mean latencies of a list of candidates and each one's group (its fastest
-- member's likely latency), or false when the fair share decides alone: fewer than two
-- candidates, or one without any latency estimate. Computed for each request: the lists
-- come from the requests themselves (an any-model request is ordered from the index,
-- lib/anyorder.lua), so no two requests share one.
local function finish_tiers(names, hedge)
  local t = false
  if #names >= 2 then
    local lat, mean, order = {}, {}, {}
    for k, m in ipairs(names) do
      local l, u = nil, nil
      if model_known(m) then l, u = likely_latency(m) end
      if not l then order = nil break end
      lat[m], mean[m], order[k] = l, u, m
    end
    local alone = lat  -- each model's own likely latency: what the groups are made of
    if order and hedge then lat = hedged_latency(lat, order) end
    if order then
      -- groups are ranges of the models' own likely latencies (as lib/anyorder.lua cuts
      -- them from K_SPEED), each led by its fastest; a group's place is its lead's
      -- (hedged) latency
      table.sort(order, function(a, b)
        if alone[a] ~= alone[b] then return alone[a] < alone[b] end
        return a < b
      end)
      local group, lead = {}, nil
      for _, m in ipairs(order) do
        if not lead or alone[m] > FINISH_TIER * alone[lead] then lead = m end
        group[m] = lat[lead]
      end
      t = {lat = lat, mean = mean, group = group}
    end
  end
  return t
end

-- The candidates in the order to try them (likeliest to finish first, each group of
-- equally fast ones in fair share order), their likely and mean latencies and their
-- group's, or nil when the fair share decides alone.
-- Each position is found when first asked: the first SCANNED by a scan of the candidates
-- not yet placed, the rest by one sort. An admission usually takes one of the first
-- candidates, and a sort of every model after each admission made a batch over 1,000
-- models cost about 40 times what it cost over 10 (python -m bench.scale).
-- Read only, and by index only (order[k]): callers must not change it.
local SCANNED = 4
function finish_order(names, hedge)
  local t = finish_tiers(names, hedge)
  if not t then return nil end
  local lat, group = t.lat, t.group
  local f = fair_load(names)
  local function tag(m) return math.max(f.tags[m] or 0, f.v) end
  local function before(a, b)
    local ga, gb = group[a], group[b]
    if ga ~= gb then return ga < gb end
    if tag(a) ~= tag(b) then return tag(a) < tag(b) end
    return a < b
  end
  local left, n = {}, 0
  for k, m in ipairs(names) do left[k] = m end
  local sorted = setmetatable({}, {__index = function(order, k)
    if type(k) ~= 'number' or k > #names then return nil end
    while n < k do
      if n >= SCANNED then
        table.sort(left, before)
        for j, m in ipairs(left) do rawset(order, n + j, m) end
        n, left = #names, {}
      else
        local bi = 1
        for j = 2, #left do
          if before(left[j], left[bi]) then bi = j end
        end
        n = n + 1
        rawset(order, n, left[bi])
        left[bi] = left[#left]
        left[#left] = nil
      end
    end
    return rawget(order, k)
  end})
  return sorted, lat, t.mean, group
end

-- The likely latency at or past which a candidate of group `g` is not worth trying: the
-- model the request would likely finish soonest on (soon_m, at `soonest` ms from now)
-- would finish it sooner. Among equally fast models (soon_m's group) waiting must save
-- more than one of soon_m's calls: their learned latencies differ by noise and by the
-- callers' own delays, and waiting to save less is not worth holding a request while a
-- model has room. A slower group is passed as soon as it would end later: near the end of
-- a backlog, a call that ends after the fast models have done the rest is what ends it.
function finish_bar(g, soonest, soon_m, lat, group)
  if g == group[soon_m] then return soonest + lat[soon_m] end
  return soonest
end

-- What a request that waits is queued as (lib/waiters.lua): by the finish time it waits
-- for one model (m; nil: it waits as it asked), so once it has starved it holds back
-- capacity there only, not on the slower models it allows but would not take.
function finish_waits_for(req, m)
  if not m then return req end
  return {hot = req.hot, s = req.s, i = req.i, o = req.o, k = req.k, ms = {m}}
end
end  -- of what this library keeps to itself
