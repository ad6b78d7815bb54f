-- Finish-time-aware choice: a request that lets the engine choose its model (any model, or
-- an unordered list) goes to the model where it would likely finish soonest: the wait for
-- room there plus that model's likely latency. A fast model that frees in a moment beats a
-- slow one with room now; a slow model is taken while its call would still end before the
-- fast ones could finish it (early in a backlog, when the fast models' windows are full).
-- Without a latency estimate for every candidate (nothing observed, no prior), the weighted
-- fair share decides alone (lib/fair.lua).
--
-- Likely latency: the learned mean (K_EST '<model>|lat', EWMA; before any call, the
-- quota's prior 'lat' in s) plus FINISH_SPREAD mean deviations (K_EST '<model>|latd', an
-- EWMA of |latency - mean| that complete.lua keeps; half the mean before any): model
-- latencies are heavy-tailed, and a call judged by its mean alone ends far later one time
-- in three. About the 97th percentile of a log-normal latency: a slow call that ends late
-- delays the whole backlog by its excess, while one call more for a fast model costs a
-- fraction of a second, so the choice errs towards the fast models.
local FINISH_SPREAD = 3

-- A model's likely and mean latency (ms), or nil when nothing is known of it.
local function likely_latency(view)
  local mean = EST[view.m .. '|lat']
  if not mean and view.q.lat then mean = view.q.lat * 1000 end
  if not mean then return nil end
  local dev = EST[view.m .. '|latd'] or mean / 2
  return mean + FINISH_SPREAD * dev, mean
end

-- How long a request would likely wait for room on a model that has none now (ms), from
-- blocked()'s wait and reason. A concurrency wait is for calls to end, which blocked() does
-- not foresee (it answers at most MAX_WAIT, as every release is announced): there, the
-- waiters queued ahead of the request are served first (its place in the queue, or, not
-- queued yet, every waiter ranked up to its rank: lib/waiters.lua), and the model's calls
-- end at max_concurrency per mean latency (mean, ms).
local function likely_wait(st, wait, reason, req, rank, queued, mean)
  if reason ~= 'concurrency' then return wait end
  local ahead
  if queued then
    ahead = redis.call('ZRANK', K_WAITERS, req.rid) or 0
  else
    ahead = redis.call('ZCOUNT', K_WAITERS, '-inf', int(rank))
  end
  return (ahead + 1) * mean / st.q.conc
end

-- Models whose likely latencies are within FINISH_TIER of the fastest of a group count as
-- equally fast (learned latencies differ by noise, and by the callers' own delays): among
-- them the weighted fair share decides, as it does without latencies.
local FINISH_TIER = 1.5

-- The likely and mean latencies of a list of candidates and each one's group (its fastest
-- member's likely latency), or false when the fair share decides alone: fewer than two
-- candidates, or one without any latency estimate. They depend only on the list and the
-- estimates (read once per script call), so every any-model request of a batch shares one
-- computation (cached by the list: model_names() returns the same table each time).
local TIERS = {}
local function finish_tiers(names)
  local t = TIERS[names]
  if t ~= nil then return t end
  t = false
  if #names >= 2 then
    local lat, mean, order = {}, {}, {}
    for k, m in ipairs(names) do
      local view = model_view(m)
      local l, u = nil, nil
      if view then l, u = likely_latency(view) end
      if not l then order = nil break end
      lat[m], mean[m], order[k] = l, u, m
    end
    if order then
      table.sort(order, function(a, b)
        if lat[a] ~= lat[b] then return lat[a] < lat[b] end
        return a < b
      end)
      local group, lead = {}, nil
      for _, m in ipairs(order) do
        if not lead or lat[m] > FINISH_TIER * lat[lead] then lead = m end
        group[m] = lat[lead]
      end
      t = {lat = lat, mean = mean, group = group}
    end
  end
  TIERS[names] = t
  return t
end

-- The candidates in the order to try them (likeliest to finish first, each group of
-- equally fast ones in fair share order, which moves with every admission), their likely
-- and mean latencies and their group's, or nil when the fair share decides alone.
local function finish_order(names)
  local t = finish_tiers(names)
  if not t then return nil end
  local lat, group, order = t.lat, t.group, {}
  for k, m in ipairs(names) do order[k] = m end
  local f = fair_load()
  local function tag(m) return math.max(f.tags[m] or 0, f.v) end
  table.sort(order, function(a, b)
    local ga, gb = group[a], group[b]
    if ga ~= gb then return ga < gb end
    if tag(a) ~= tag(b) then return tag(a) < tag(b) end
    return a < b
  end)
  return order, lat, t.mean, group
end

-- Whether a group of candidates, its fastest of likely latency `l`, is not worth trying,
-- nor any group after it: the model the request would likely finish soonest on (at
-- `soonest`, its likely latency `soon_lat`, all in ms from now) would finish it sooner by
-- more than one of its own calls. Waiting to save less is not worth holding a request
-- while a model has room (nor is it measurable).
local function finish_passed(l, soonest, soon_lat)
  return soonest ~= nil and l >= soonest + soon_lat
end

-- What a request that waits is queued as (lib/waiters.lua): by the finish time it waits
-- for one model (m; nil: it waits as it asked), so once it has starved it holds back
-- capacity there only, not on the slower models it allows but would not take.
local function finish_waits_for(req, m)
  if not m then return req end
  return {hot = req.hot, s = req.s, i = req.i, o = req.o, k = req.k, ms = {m}}
end
