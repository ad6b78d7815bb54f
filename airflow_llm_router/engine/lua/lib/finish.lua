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
-- in three. About the 90th-95th percentile of a log-normal latency.
local FINISH_SPREAD = 2

-- A model's likely latency (ms), or nil when nothing is known of it.
local function likely_latency(view)
  local mean = EST[view.m .. '|lat']
  if not mean and view.q.lat then mean = view.q.lat * 1000 end
  if not mean then return nil end
  local dev = EST[view.m .. '|latd'] or mean / 2
  return mean + FINISH_SPREAD * dev
end

-- The candidates in the order to try them (likeliest to finish first; equal ones in fair
-- share order) and their likely latencies, or nil when the fair share decides: fewer than
-- two candidates, or one without any latency estimate.
local function finish_order(names)
  if #names < 2 then return nil end
  local lat, order = {}, {}
  for k, m in ipairs(names) do
    local view = model_view(m)
    local l = view and likely_latency(view)
    if not l then return nil end
    lat[m], order[k] = l, m
  end
  local f = fair_load()
  local function tag(m) return math.max(f.tags[m] or 0, f.v) end
  table.sort(order, function(a, b)
    if lat[a] ~= lat[b] then return lat[a] < lat[b] end
    if tag(a) ~= tag(b) then return tag(a) < tag(b) end
    return a < b
  end)
  return order, lat
end
