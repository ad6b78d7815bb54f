-- admit: decide a batch of requests in one call; each is admitted (a lease is reserved on
-- one model) or told how long to wait, or rejected when no allowed model could ever take it.
-- ARGV[2]: JSON [[request id, hot 0/1, tokens, input tokens, output tokens, ordered 0/1,
--                [models] or 0 for any], ...]  (tokens are estimates until complete;
--                tokens and output -1: input + the chosen model's learned output)
-- Reply per request: {'A', model, lease id, ttl ms, reused 0/1} | {'W', wait ms, reason}
--                    | {'E', reason, model or ''}
local reqs = cjson.decode(ARGV[2])
local ALL = nil

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

-- Allowed models that could ever take the request, or an error reply.
local function candidates(req)
  if not req.ms and not ALL then ALL = redis.call('HKEYS', K_QUOTAS) end
  local names = req.ms or ALL
  if #names == 0 then return nil, {'E', 'no_models', ''} end
  local cands, why = {}, {}
  for _, m in ipairs(names) do
    local st = load_model(m)
    if not st then
      if req.ms then return nil, {'E', 'unknown_model', m} end
    else
      local bad = never_fits(st, need_for(st, req))
      if bad then
        why[bad] = m
        redis.call('HINCRBY', K_STATS, m .. '|rejected', 1)
      else
        cands[#cands + 1] = st
      end
    end
  end
  if #cands > 0 then return cands end
  if why.too_large then return nil, {'E', 'too_large', why.too_large} end
  return nil, {'E', 'all_disabled', ''}
end

local function decide(req)
  local again = reuse(req)
  if again then return again end
  local cands, err = candidates(req)
  if not cands then return err end
  local fair = not (req.ordered and req.ms)
  if fair then
    local names = {}
    for k, st in ipairs(cands) do names[k] = st.m end
    for k, e in ipairs(fair_order(names)) do cands[k] = STATE[e.m] end
  end
  local rank = waiter_rank(req.rid, req.hot)
  local best, reason, on = nil, nil, nil
  for _, st in ipairs(cands) do
    local wait, why = blocked(st, need_for(st, req), held_back(st.m, rank, req.rid, req.hot))
    if wait == 0 then
      local lid = reserve(st, req)
      if fair then fair_charge(st.m, st.q.w) end
      waiter_remove(req.rid)
      return {'A', st.m, lid, LEASE_TTL, 0}
    end
    if not best or wait < best then best, reason, on = wait, why, st.m end
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
