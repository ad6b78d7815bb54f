-- The order an any-model request tries the models in, kept in Redis as it changes rather
-- than rebuilt by every request: K_SPEED holds each model's likely latency (ms, 'inf' when
-- nothing is known of it: no estimate, no prior), updated when its estimate or its quota
-- changes, and K_LATE its late point (the mean plus `late` mean deviations: when a caller
-- that hedges sends the call to a second model, lib/finish.lua); K_FAIRQ its fair-share
-- finish tag (lib/fair.lua), updated by the admission that charges it (as '0<model>'; an
-- engine before K_PARK wrote '1<model>' for a model set aside), or K_PARK instead, by its
-- likely latency, while it is parked: idle, its tag below the virtual time (lib/anyorder.lua).
-- An any-model request then reads the head of these orders
-- (lib/anyorder.lua), not every model's name, latency and tag: over 1,000 models that read
-- cost 30-90 times the whole admission over 10 (python -m bench.scale).
-- SPEED: how a likely latency is made (lib/finish.lua says why): the mean plus `spread`
-- mean deviations, the deviation never under `floor` of the mean; models within `tier`
-- times of the fastest of their group count as equally fast; and this library's
-- functions (one table: a script's main function has at most 200 locals).
local SPEED = {spread = 5, floor = 0.5, tier = 1.5, late = 1}
do
-- The latency `spread` mean deviations past `mean` (ms), the deviation `dev` (nil: none
-- learned) never under `floor` of the mean: lib/finish.lua's likely latency and late point
-- and this index's scores, made one way so the index orders the models as admission
-- judges them.
function SPEED.at(mean, dev, spread)
  return mean + spread * math.max(dev or 0, SPEED.floor * mean)
end

-- Model m's likely latency and late point as ZADD scores: from its learned mean and
-- deviation (K_EST, or `known`: both as just written there), else its quota's prior (`q`:
-- the decoded quota; nil: read it), else 'inf'.
local function score(m, q, known)
  local e = known or redis.call('HMGET', K_EST, m .. '|lat', m .. '|latd')
  local mean = tonumber(e[1])
  if not mean then
    if q == nil then
      local raw = redis.call('HGET', K_QUOTAS, m)
      q = raw and cjson.decode(raw) or false
    end
    if q and q.lat then mean = q.lat * 1000 end
  end
  if not mean then return 'inf', 'inf' end
  local dev = tonumber(e[2])
  return string.format('%.17g', SPEED.at(mean, dev, SPEED.spread)),
         string.format('%.17g', SPEED.at(mean, dev, SPEED.late))
end

-- Model m's estimate or quota changed: its place by speed moves. `joined`: its quota was
-- just set (it may be new: it also takes its place in the fair order, at its tag); else
-- only a model already in the index moves (a call settling after its quota went adds none).
-- `known`: its mean and deviation as just written to K_EST (score), not read back.
function SPEED.note(m, q, joined, known)
  local likely, late = score(m, q, known)
  if joined then
    redis.call('ZADD', K_SPEED, likely, m)
    redis.call('ZADD', K_LATE, late, m)
    local at = redis.call('ZMSCORE', K_FAIRQ, '0' .. m, '1' .. m)
    if not (at[1] or at[2] or redis.call('ZSCORE', K_PARK, m)) then
      redis.call('ZADD', K_FAIRQ, redis.call('HGET', K_FAIR, m) or '0', '0' .. m)
    end
  else
    redis.call('ZADD', K_SPEED, 'XX', likely, m)
    redis.call('ZADD', K_LATE, 'XX', late, m)
  end
  redis.call('ZADD', K_PARK, 'XX', likely, m)  -- parked: kept by its likely latency
end

-- Model m's tag in the fair order is now `tag` (a number: an admission charged it); a
-- parked model (or one an older engine set aside) comes back into K_FAIRQ at it.
function SPEED.fairq(m, tag)
  tag = string.format('%.17g', tag)
  -- one call where it is in place (an admission's tag always moves: CH counts it)
  if redis.call('ZADD', K_FAIRQ, 'XX', 'CH', tag, '0' .. m) == 1 then return end
  if redis.call('ZREM', K_PARK, m) + redis.call('ZREM', K_FAIRQ, '1' .. m) > 0 then
    redis.call('ZADD', K_FAIRQ, tag, '0' .. m)
  end
end

-- The number of models with a quota, once the orders hold each of them: an index that
-- does not (written by an engine before it, or estimates set by hand and the index
-- dropped) is rebuilt from the quotas, estimates and tags, once. With `whole` (a number
-- of models) and no more models than it, also the whole order by speed, as ZRANGE
-- WITHSCORES answers it: read in place of counting it, not counted and read again.
function SPEED.check(whole)
  local n = redis.call('HLEN', K_QUOTAS)
  local function by_speed()
    if whole and n <= whole then
      local raw = redis.call('ZRANGE', K_SPEED, 0, -1, 'WITHSCORES')
      return #raw / 2, raw
    end
    return redis.call('ZCARD', K_SPEED), nil
  end
  local have, raw = by_speed()
  if have == n and redis.call('ZCARD', K_FAIRQ) + redis.call('ZCARD', K_PARK) == n
     and redis.call('ZCARD', K_LATE) == n then return n, raw end
  redis.call('DEL', K_SPEED, K_FAIRQ, K_PARK, K_LATE)
  local names = redis.call('HKEYS', K_QUOTAS)
  for k = 1, #names, 500 do
    local part, speeds, lates, tags = {}, {}, {}, {}
    for j = k, math.min(#names, k + 499) do part[#part + 1] = names[j] end
    local got = redis.call('HMGET', K_FAIR, unpack(part))
    for j, m in ipairs(part) do
      local likely, late = score(m, nil)
      speeds[#speeds + 1], speeds[#speeds + 2] = likely, m
      lates[#lates + 1], lates[#lates + 2] = late, m
      tags[#tags + 1], tags[#tags + 2] = got[j] or '0', '0' .. m
    end
    redis.call('ZADD', K_SPEED, unpack(speeds))
    redis.call('ZADD', K_LATE, unpack(lates))
    redis.call('ZADD', K_FAIRQ, unpack(tags))
  end
  return n, select(2, by_speed())
end
end  -- of what this library keeps to itself
