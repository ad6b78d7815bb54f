-- Model health fed by call outcomes. 'rate_limited' (a 429) puts the model in cooldown for
-- every caller, for the backend's Retry-After or COOLDOWN ms. BREAKER_FAILS 'error's in a
-- row open the circuit breaker for BREAKER_OPEN ms; then one probe call is let through
-- (half-open): its success closes the breaker, its failure opens it again. 'unknown_model'
-- (the backend does not have the model: no call to it can succeed until that changes)
-- opens the breaker at once, with that cause, so no other call is sent there until the
-- probe; the cause ('errors' or 'unknown_model', '<m>|cause') is shown in the stats.
-- 'abandoned' (the
-- lease's call was never made: its caller gave up before sending it) says nothing of the
-- model: no streak broken or extended (an abandoned probe, no longer live, lets the next
-- probe go: lib/capacity.lua).

-- n 'ok' outcomes at once (n may be 0): they end the error streak, and one of them being
-- the probe closes the breaker. Returns the model's count of completed calls after them.
local function record_ok(m, n, was_probe)
  if n == 0 then return 0 end
  local h = m .. '|'
  redis.call('HDEL', K_HEALTH, h .. 'fails')
  if was_probe then redis.call('HDEL', K_HEALTH, h .. 'open', h .. 'probe', h .. 'cause') end
  return redis.call('HINCRBY', K_STATS, h .. 'completed', n)
end

-- Cool model m down until `untl` ms (a later cooldown already set stays).
local function cool_until(m, untl)
  local cur = tonumber(redis.call('HGET', K_HEALTH, m .. '|cool')) or 0
  if untl > cur then redis.call('HSET', K_HEALTH, m .. '|cool', int(untl)) end
end

-- Open model m's breaker for BREAKER_OPEN ms, for `cause`.
local function open_breaker(m, cause)
  local h = m .. '|'
  redis.call('HSET', K_HEALTH, h .. 'open', int(NOW + BREAKER_OPEN), h .. 'fails', 0,
             h .. 'cause', cause)
  redis.call('HDEL', K_HEALTH, h .. 'probe')
  redis.call('HINCRBY', K_STATS, h .. 'breaker_opened', 1)
  history_breaker_opened(m)
end

-- One outcome; returns the model's count of completed calls after an 'ok' (0 otherwise).
local function record_outcome(m, outcome, retry_ms, was_probe)
  local h = m .. '|'
  if outcome == 'ok' then
    return record_ok(m, 1, was_probe)
  elseif outcome == 'abandoned' then
    redis.call('HINCRBY', K_STATS, h .. 'abandoned', 1)
  elseif outcome == 'rate_limited' then
    cool_until(m, NOW + ((retry_ms and retry_ms > 0) and retry_ms or COOLDOWN))
    redis.call('HINCRBY', K_STATS, h .. 'rate_limited', 1)
  elseif outcome == 'unknown_model' then
    open_breaker(m, 'unknown_model')
    redis.call('HINCRBY', K_STATS, h .. 'unknown_model', 1)
    redis.call('HINCRBY', K_STATS, h .. 'errors', 1)
  else
    local fails = redis.call('HINCRBY', K_HEALTH, h .. 'fails', 1)
    if was_probe or fails >= BREAKER_FAILS then open_breaker(m, 'errors') end
    redis.call('HINCRBY', K_STATS, h .. 'errors', 1)
  end
  return 0
end
