-- The effective limit: the share of its quota a model is admitted at, learned from the
-- provider's 429s (AIMD), for when the provider's real limit is below the configured one.
--
-- Cut: a 429 on a call admitted at time t says the provider refused the k-th call of the
-- window ending at t, so it takes fewer: the new share is what the window held before that
-- call, as a share of the quota, in its most used dimension (calls, tokens, input, output
-- tokens), but at most half the share in force, and never less than one call per window;
-- a 429 while probing (below) goes back to the level of the window before, which held.
-- The halving floor matters: calls sent at once reach the provider in any order, so the
-- refused one may be first in the router's log (a storm of 429s says nothing of the limit
-- either); a cut then halves, as in AIMD, and only calls spread over the window (the
-- steady state, where a probe crosses the limit) are cut back to exactly what was taken.
-- Only a call admitted after the last cut can cut again: the rest of a burst was admitted
-- under the old share, and its 429s were already answered by the cut.
-- Probe: after a hold of whole windows without a cut, the share grows by one unit in the
-- next window, then two, four, ... (a unit: one call's share of the quota, or 1 % of the
-- share if more), back to the quota. The hold is EFF_HOLD windows, doubled for each probe
-- in a row that was cut back to where it started (the limit has not moved), up to
-- EFF_HOLD * 2^EFF_HOLD_DOUBLINGS: a limit that stays put is crossed by one unit (one 429,
-- one cut back) once every ~33 windows; one that rose, or a cut made by a passing storm,
-- is regained in a few windows (doubling).
-- State, in K_HEALTH: '<m>|eff' = the share at the last cut, '<m>|eff_t' = when (ms),
-- '<m>|eff_n' = probes in a row cut back to the same share.
-- Announced: a provider that states its limits (rate-limit headers, passed in by the
-- caller) needs no guessing: while announced (EFF_ANNOUNCED windows after the last
-- announcement), the share is at most announced / quota, in calls and in tokens. This
-- assumes the provider counts over the quota's window (configure the quota so). State:
-- '<m>|ann' = "<requests>:<tokens>" (-1: not stated), '<m>|ann_t' = when (ms).
local EFF_HOLD = 2
local EFF_UNIT = 0.01
local EFF_MAX_CUT = 0.5
local EFF_HOLD_DOUBLINGS = 4
local EFF_ANNOUNCED = 4

-- The share in force now, from the share, time and repeats of the last cut (nil f: none),
-- and the share of the window before (the last level a whole window held without a cut).
local function eff_levels(q, f, t, n)
  if not f then return 1, 1 end
  local hold = EFF_HOLD * 2 ^ math.min(n or 0, EFF_HOLD_DOUBLINGS)
  local clean = math.floor((NOW - t) / q.win) - hold
  if clean <= 0 then return f, f end
  local unit = math.max(1 / q.rpm, EFF_UNIT * f)
  local k = math.min(clean, 40)
  return math.min(1, f + unit * (2 ^ k - 1)), math.min(1, f + unit * (2 ^ (k - 1) - 1))
end

-- The share the provider's announced limits allow ("<requests>:<tokens>" set at ann_t).
local function eff_announced(q, ann, ann_t)
  if not ann or not ann_t or NOW - ann_t > EFF_ANNOUNCED * q.win then return 1 end
  local r, k = string.match(ann, '^(-?%d+):(-?%d+)$')
  r, k = tonumber(r), tonumber(k)
  local share = 1
  if r and r >= 0 then share = math.min(share, r / q.rpm) end
  if k and k >= 0 then share = math.min(share, k / q.tpm) end
  return math.max(share, 1 / q.rpm)
end

local function eff_share(q, f, t, n, ann, ann_t)
  return math.min((eff_levels(q, f, t, n)), eff_announced(q, ann, ann_t))
end

-- The provider announced its limits for model m (-1: not stated): remember them.
local function eff_announce(m, requests, tokens)
  redis.call('HSET', K_HEALTH, m .. '|ann', int(requests) .. ':' .. int(tokens),
             m .. '|ann_t', int(NOW))
end

-- The quota with its limits scaled by share f (the same table when f is 1).
local function eff_quota(q, f)
  if f >= 1 then return q end
  local e = {}
  for k, v in pairs(q) do e[k] = v end
  f = math.max(f, 1e-9)  -- share 0 (a recovery pause) is enforced by capacity.blocked
  e.rpm = math.max(1, math.floor(q.rpm * f + 1e-6))
  e.tpm = math.max(1, math.floor(q.tpm * f + 1e-6))
  e.conc = math.max(1, math.ceil(q.conc * f - 1e-6))
  if q.itpm then e.itpm = math.max(1, math.floor(q.itpm * f + 1e-6)) end
  if q.otpm then e.otpm = math.max(1, math.floor(q.otpm * f + 1e-6)) end
  e.share = f
  return e
end

-- The share, time and repeats of the last cut of model m (nil share when none).
local function eff_state(m)
  local h = redis.call('HMGET', K_HEALTH, m .. '|eff', m .. '|eff_t', m .. '|eff_n')
  return tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0
end

-- Whether model m is admitted at its full quota (nothing learned, or probed back up).
local function eff_at_quota(m, q)
  local f0, t0, n0 = eff_state(m)
  return not f0 or (eff_levels(q, f0, t0, n0)) >= 1
end

-- The lease number of a lease id ('<model>#<n>'): admission order within a millisecond.
local function lease_no(lid)
  return tonumber(string.match(lid, '#(%d+)$')) or 0
end

-- A 429 on model m's call `lid`, admitted at `admitted` ms: cut the share (see above).
-- q: the model's quota (decoded). Returns the new share, or nil when this 429 does not cut.
local function eff_cut(m, q, lid, admitted)
  local f0, t0, n0 = eff_state(m)
  if f0 and admitted <= t0 then return nil end  -- admitted under the share already cut
  local now_share, prev_share = eff_levels(q, f0, t0, n0)
  -- the calls of the refused call's window admitted before it: earlier milliseconds, and
  -- lower lease numbers within its own
  local from, before = int(admitted - q.win), '(' .. int(admitted)
  local ids = {}
  local n = redis.call('ZCOUNT', K_WIN(m), from, before)
  local mine = lease_no(lid)
  for _, other in ipairs(redis.call('ZRANGEBYSCORE', K_WIN(m), int(admitted), int(admitted),
                                    'LIMIT', 0, BOUND)) do
    if lease_no(other) < mine then
      n = n + 1
      ids[#ids + 1] = other
    end
  end
  local used = {n = n, s = 0, i = 0, o = 0}
  if n <= BOUND then
    for _, other in ipairs(redis.call('ZRANGEBYSCORE', K_WIN(m), from, before)) do
      ids[#ids + 1] = other
    end
    if #ids > 0 then
      for _, t in ipairs(redis.call('HMGET', K_WTOK(m), unpack(ids))) do
        local s, a, b = string.match(t or '0:0:0', '^(%d+):(%d+):(%d+)$')
        used.s, used.i, used.o = used.s + tonumber(s), used.i + tonumber(a), used.o + tonumber(b)
      end
    end
  else  -- a long window: its tokens in proportion to the window's totals
    local tot = redis.call('HMGET', K_WTOK(m), '_s', '_i', '_o')
    local all = math.max(1, redis.call('ZCARD', K_WIN(m)))
    used.s = (tonumber(tot[1]) or 0) * n / all
    used.i = (tonumber(tot[2]) or 0) * n / all
    used.o = (tonumber(tot[3]) or 0) * n / all
  end
  local share = used.n / q.rpm
  share = math.max(share, used.s / q.tpm)
  if q.itpm then share = math.max(share, used.i / q.itpm) end
  if q.otpm then share = math.max(share, used.o / q.otpm) end
  share = math.max(share, EFF_MAX_CUT * now_share, 1 / q.rpm)
  if f0 and prev_share < now_share then
    -- a probe crossed the limit: back to the level the window before held
    share = prev_share
  end
  if share >= now_share then return nil end
  -- a probe cut back to (about) the share it started from: the limit has not moved
  -- the first step of a probe failed: the limit has not moved; hold longer next time
  local n = 0
  if f0 and prev_share <= f0 and now_share > f0 then n = n0 + 1 end
  redis.call('HSET', K_HEALTH, m .. '|eff', string.format('%.6f', share),
             m .. '|eff_t', int(NOW), m .. '|eff_n', n)
  redis.call('HINCRBY', K_STATS, m .. '|limit_cuts', 1)
  return share
end
