-- The guard: how long past its window an admission keeps counting, per model, learned.
--
-- The router's window entry of a call starts when the call was sent (sent.lua); the provider
-- counts it from when the call reached it. When that delay varies (a loaded client or
-- provider, a proxy queue), a call sent W after another may reach the provider less than W
-- after it, and the provider's window then holds one call more than the router's. Keeping
-- each entry GUARD ms longer than the window absorbs a variation of up to GUARD ms.
--
-- Base: GUARD ms, or GUARD_SHARE of the window if more (a minute-long window has more time
-- for delays to vary in, and the guard costs only guard/window of its throughput).
-- Learned, in K_HEALTH '<m>|guard' (ms) and '<m>|guard_t' (when set):
-- - a measured delay (the provider reported when the call reached it, see complete.lua)
--   raises it to GUARD_MARGIN times the delay, plus 5 ms, at the full quota only (as
--   for 429s below);
-- - a 429 on a call the router admitted (it had room by the router's count, so the
--   provider counted differently) doubles it, at most once per burst: only a call admitted
--   after the last widening widens again; only at the full quota: below it, the effective
--   limit (lib/effective.lua) is being learned, and a 429 is its answer (complete.lua);
-- - what it holds above the base halves every GUARD_DECAY windows without a widening, so a
--   passing load spike costs throughput for a while, not for ever.
-- Capped at GUARD_MAX of the window: past that, a delay is no longer a window's timing and
-- the effective limit (lib/effective.lua) is the answer.
local GUARD_MARGIN = 1.25
local GUARD_DECAY = 8
local GUARD_MAX = 0.25

local function guard_base(q)
  return math.max(GUARD, math.floor(q.win * GUARD_SHARE))
end

-- The longest guard model m can have (how long its window log can still matter).
local function guard_longest(q)
  return math.max(guard_base(q), math.floor(q.win * GUARD_MAX))
end

-- The guard in force for a model with quota q, learned guard g set at time t (nil: none).
local function guard_of(q, g, t)
  local base = guard_base(q)
  if not g or g <= base then return base end
  local halvings = math.floor((NOW - (t or 0)) / (GUARD_DECAY * q.win))
  if halvings >= 30 then return base end
  return math.min(math.floor(q.win * GUARD_MAX),
                  math.floor(base + (g - base) / 2 ^ halvings + 0.5))
end

-- Model m's guard in force and when it was last widened (nil: never), read from Redis
-- (for scripts that did not load the model's state).
local function guard_read(m, q)
  local h = redis.call('HMGET', K_HEALTH, m .. '|guard', m .. '|guard_t')
  local t = tonumber(h[2])
  return guard_of(q, tonumber(h[1]), t), t
end

-- Raise model m's guard from `cur` to `ms` (at most the cap); returns true when it grew.
local function guard_raise(m, q, cur, ms)
  ms = math.min(math.floor(q.win * GUARD_MAX), math.ceil(ms))
  if ms <= cur then return false end
  redis.call('HSET', K_HEALTH, m .. '|guard', int(ms), m .. '|guard_t', int(NOW))
  redis.call('HINCRBY', K_STATS, m .. '|guard_widened', 1)
  return true
end

-- The provider reported a delay of `delay_ms` between a call's send and its arrival;
-- `allowed()` says whether the guard may widen now (asked only when it would).
local function guard_observe(m, q, delay_ms, allowed)
  if delay_ms <= 0 then return false end
  local cur = guard_read(m, q)
  local want = delay_ms * GUARD_MARGIN + 5
  if want <= cur or not allowed() then return false end
  return guard_raise(m, q, cur, want)
end

-- A 429 on model m's call admitted at `admitted` ms: double the guard, once per burst.
local function guard_widen(m, q, admitted)
  local cur, t = guard_read(m, q)
  if t and admitted <= t then return false end
  return guard_raise(m, q, cur, 2 * cur)
end
