-- complete: settle a batch of leases. Frees each live lease's concurrency slot, replaces the
-- estimate in the window with the actual tokens (if the entry is still in the window, also
-- for a lease that already expired), and feeds the model's health.
-- ARGV[2]: JSON [[lease id, input tokens, output tokens, outcome, retry after ms], ...]
--          tokens -1 = unknown (the estimate stays); outcome 'ok' | 'rate_limited' | 'error'
-- Reply per lease: 1 released, 2 settled but the lease had expired, 0 unknown lease.
-- A live lease released 'ok' also feeds the model's latency estimate (ms, admission to
-- completion) in K_EST '<model>|lat'.
local items = cjson.decode(ARGV[2])
local OBSERVED = 64
local LAT_ALPHA = 0.2

-- Latency EWMA, O(1): the first observation replaces the quota's prior (stats report the
-- prior until then), each later one moves the estimate LAT_ALPHA of the way towards it.
-- After a model's first 16 completions only every 4th is sampled (fewer writes per call).
local function observe_latency(m, ms)
  local f = m .. '|lat'
  local cur = tonumber(redis.call('HGET', K_EST, f))
  if cur then ms = cur + LAT_ALPHA * (ms - cur) end
  redis.call('HSET', K_EST, f, string.format('%.3f', ms))
end

-- Keep the model's output estimate at the 95th percentile of its last OBSERVED calls:
-- recomputed at each of its first 32 completions (a cold start converges fast), then
-- every 8th (the sort is the costly part).
local function observe(m, outp, completed)
  local key = K_OBS(m)
  if redis.call('LPUSH', key, outp) > OBSERVED + 16 then  -- trimmed every 16 pushes
    redis.call('LTRIM', key, 0, OBSERVED - 1)
  end
  if completed > 32 and completed % 8 ~= 0 then return end
  local seen = redis.call('LRANGE', key, 0, OBSERVED - 1)
  for k = 1, #seen do seen[k] = tonumber(seen[k]) end
  table.sort(seen)
  redis.call('HSET', K_EST, m, seen[math.max(1, math.ceil(#seen * 0.95))])
end

local function settle(m, lid, inp, outp)
  local cur = redis.call('HMGET', K_WTOK(m), lid, '_s', '_i', '_o')
  if not cur[1] or inp < 0 or outp < 0 then return cur[1] ~= false end
  local s, a, b = string.match(cur[1], '^(%d+):(%d+):(%d+)$')
  -- one write: the entry and the window totals, moved by actual minus estimate
  redis.call('HSET', K_WTOK(m), lid, (inp + outp) .. ':' .. inp .. ':' .. outp,
    '_s', int((tonumber(cur[2]) or 0) + inp + outp - tonumber(s)),
    '_i', int((tonumber(cur[3]) or 0) + inp - tonumber(a)),
    '_o', int((tonumber(cur[4]) or 0) + outp - tonumber(b)))
  return true
end

local out = {}
for k, it in ipairs(items) do
  local lid, inp, outp, outcome, retry = it[1], it[2], it[3], it[4], it[5]
  local m = split_model(lid)
  out[k] = 0
  if m then
    local in_window = settle(m, lid, inp, outp)
    local info = redis.call('HGET', K_LEASES, lid)
    local was_probe, latency = false, nil
    if info then
      local rec = cjson.decode(info)
      was_probe = rec.p == 1
      if outcome == 'ok' and rec.t then latency = math.max(0, NOW - rec.t) end
      redis.call('ZREM', K_LIVE(m), lid)
      redis.call('HDEL', K_LEASES, lid)
      if redis.call('HGET', K_REQUESTS, rec.r) == lid then
        redis.call('HDEL', K_REQUESTS, rec.r)
      end
      RELEASED = true
      out[k] = 1
    elseif in_window then
      out[k] = 2
    end
    local completed = 0
    if out[k] > 0 then completed = record_outcome(m, outcome, retry, was_probe) end
    if latency and (completed <= 16 or completed % 4 == 0) then
      observe_latency(m, latency)
    end
    if outcome == 'ok' and outp >= 0 then observe(m, outp, completed) end
  end
end
if RELEASED then redis.call('PUBLISH', CHANNEL, '*') end
return out
