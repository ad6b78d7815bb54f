-- admit: decide a batch of requests in one call; each is admitted (a lease is reserved on
-- one model) or told how long to wait, or rejected when no allowed model could ever take it.
-- ARGV[2]: JSON [[request id, hot 0/1, tokens, input tokens, output tokens, ordered 0/1,
--                [models] or 0 for any], ...]  (tokens are estimates until complete;
--                tokens and output -1: input + the chosen model's learned output)
-- Reply per request: {'A', model, lease id, ttl ms, reused 0/1} | {'W', wait ms, reason}
--                    | {'E', reason, model or ''}
local reqs = cjson.decode(ARGV[2])

local function reuse(req)
  local lid = redis.call('HGET', K_REQUESTS, req.rid)
  if not lid then return nil end
  local m = split_model(lid)
  local exp = redis.call('ZSCORE', K_LIVE(m), lid)
  if not exp or tonumber(exp) <= NOW then return nil end
  return {'A', m, lid, tonumber(exp) - NOW, 1}
end

local function reserve(st, req)
  local need = need_for(st, req)
  local lid = st.m .. '#' .. redis.call('INCR', K_SEQ)
  local rec = {m = st.m, s = need.s, i = need.i, o = need.o, t = NOW, r = req.rid}
  if st.open > 0 then
    rec.p = 1
    st.probe = lid
    redis.call('HSET', K_HEALTH, st.m .. '|probe', lid)
  end
  st.n, st.s, st.i, st.o = st.n + 1, st.s + need.s, st.i + need.i, st.o + need.o
  st.live = st.live + 1
  st.head = nil
  redis.call('HSET', K_LEASES, lid, cjson.encode(rec))
  redis.call('HSET', K_REQUESTS, req.rid, lid)
  redis.call('ZADD', K_LIVE(st.m), int(NOW + LEASE_TTL), lid)
  redis.call('ZADD', K_WIN(st.m), int(NOW), lid)
  redis.call('HSET', K_WTOK(st.m), lid, need.s .. ':' .. need.i .. ':' .. need.o,
    '_s', int(st.s), '_i', int(st.i), '_o', int(st.o))
  redis.call('HINCRBY', K_STATS, st.m .. '|admitted', 1)
  return lid
end

-- Try the allowed models in fair-share order (or the caller's order) and admit on the
-- first that has room. A model's state is loaded only when it is tried, so an admission
-- usually touches one model however many there are.
local function decide(req)
  local again = reuse(req)
  if again then return again end
  local names = req.ms or model_names()
  if #names == 0 then return {'E', 'no_models', ''} end
  if req.ms then
    for _, m in ipairs(names) do
      if not model_view(m) then return {'E', 'unknown_model', m} end
    end
  end
  local fair = not (req.ordered and req.ms)
  local pool = {}
  for k, m in ipairs(names) do pool[k] = m end
  local rank, queued, best, reason, on = nil, false, nil, nil, nil
  local why, tried = {}, 0
  for k = 1, #names do
    local m = names[k]
    if fair then m = next_fair(pool) end
    local view = model_view(m)
    local bad = never_fits(view, need_for(view, req))
    if bad then
      why[bad] = m
      redis.call('HINCRBY', K_STATS, m .. '|rejected', 1)
    else
      tried = tried + 1
      local st = load_model(m)
      if not rank then rank, queued = waiter_rank(req.rid, req.hot) end
      local wait, w = blocked(st, need_for(st, req), held_back(m, rank, req.rid, req.hot))
      if wait == 0 then
        local lid = reserve(st, req)
        if fair then fair_charge(m, st.q.w) end
        if queued then waiter_remove(req.rid) end
        return {'A', m, lid, LEASE_TTL, 0}
      end
      if not best or wait < best then best, reason, on = wait, w, m end
    end
  end
  if tried == 0 then
    if why.too_large then return {'E', 'too_large', why.too_large} end
    return {'E', 'all_disabled', ''}
  end
  redis.call('HINCRBY', K_STATS, on .. '|waited', 1)
  waiter_add(req.rid, rank, req, best)
  return {'W', best, reason}
end

local out = {}
for k, r in ipairs(reqs) do
  local ms = nil
  if type(r[7]) == 'table' then ms = r[7] end
  out[k] = decide({rid = r[1], hot = r[2] == 1, s = r[3], i = r[4], o = r[5],
                   ordered = r[6] == 1, ms = ms})
end
fair_save()
if RELEASED then redis.call('PUBLISH', CHANNEL, '*') end
return out
