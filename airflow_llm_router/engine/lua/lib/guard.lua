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
-- Receipts: the guard covers the delay of a call whose arrival is not known yet. A call
-- whose backend said when it counted it (complete.lua: the receipt, x-received-ms) needs
-- none of it: its entry counts from the receipt plus RECEIPT_MARGIN (guard_receipts), so
-- a window's places free a window after the calls that held them arrived, not a window
-- plus the widest delay seen after they were sent.
local guard_base, guard_longest, guard_of, guard_read, guard_observe, guard_widen
local guard_receipts, guard_hold
-- What this library keeps to itself (a script's main function may have at most 200
-- locals; admit.lua loads every library).
do
local GUARD_MARGIN = 1.25
local GUARD_DECAY = 8
local GUARD_MAX = 0.25
-- What a receipt's entry keeps past its window: the receipt is the backend's clock less
-- the caller's (as a measured delay is), read in whole milliseconds.
local RECEIPT_MARGIN = 25

function guard_base(q)
  return math.max(GUARD, math.floor(q.win * GUARD_SHARE))
end

-- The longest guard model m can have (how long its window log can still matter).
function guard_longest(q)
  return math.max(guard_base(q), math.floor(q.win * GUARD_MAX))
end

-- The guard in force at `at` (default: now) for a model with quota q, learned guard g set
-- at time t (nil: none). Without a widening it only shrinks as `at` grows.
function guard_of(q, g, t, at)
  local base = guard_base(q)
  if not g or g <= base then return base end
  local halvings = math.floor(((at or NOW) - (t or 0)) / (GUARD_DECAY * q.win))
  if halvings >= 30 then return base end
  return math.min(math.floor(q.win * GUARD_MAX),
                  math.floor(base + (g - base) / 2 ^ halvings + 0.5))
end

-- Model m's guard in force now and when it was last widened (nil: never), read from Redis
-- (for scripts that did not load the model's state).
function guard_read(m, q)
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
function guard_observe(m, q, delay_ms, allowed)
  if delay_ms <= 0 then return false end
  local cur = guard_read(m, q)
  local want = delay_ms * GUARD_MARGIN + 5
  if want <= cur or not allowed() then return false end
  return guard_raise(m, q, cur, want)
end

-- A 429 on model m's call admitted at `admitted` ms: double the guard, once per burst.
-- Receipts are not trusted for GUARD_DECAY windows after (guard_receipts): a provider
-- that refuses what the router counted may count from later than it says.
function guard_widen(m, q, admitted)
  local cur, t = guard_read(m, q)
  if t and admitted <= t then return false end
  redis.call('HSET', K_HEALTH, m .. '|guard_429_t', int(NOW))
  return guard_raise(m, q, cur, 2 * cur)
end

-- Window entries of model m (quota q) whose backend said when it counted the call: the
-- leases `ids` and, for each, `agos` = ms ago (by the caller's clock when it built the
-- settlement; the script runs later, so NOW - ago is no earlier than the receipt). Each
-- entry moves so that it counts until its receipt (never before what it counted from) +
-- the window + RECEIPT_MARGIN. An entry's end is its score + the window + the guard in
-- force when it is read, so the score takes the least guard in force until then: the
-- guard at that end (it only shrinks without a widening, and a widening only keeps the
-- entry longer).
-- Earlier (counted in the model's 'receipts'): a call that arrived within its guard frees
-- its place a window after its arrival; not after a 429 widened the guard (the provider
-- may count from later than it says).
-- Later, always (counted in 'late_receipts'): a call that arrived later than its send plus
-- the guard (a loaded client or provider, past the guard's cap) counts a whole window from
-- its arrival, as the provider counts it; else its place would free while the provider
-- still counts the call, and a call admitted then would be one too many there.
-- Returns how many entries moved.
function guard_receipts(m, q, ids, agos)
  if #ids == 0 then return 0 end
  local h = redis.call('HMGET', K_HEALTH, m .. '|guard', m .. '|guard_t', m .. '|guard_429_t')
  local refused = tonumber(h[3])
  local trusted = not (refused and NOW - refused < GUARD_DECAY * q.win)
  local least = guard_of(q, tonumber(h[1]), tonumber(h[2]), NOW + q.win + RECEIPT_MARGIN)
  local froms = redis.call('ZMSCORE', K_WIN(m), unpack(ids))
  local args, early, late = {}, 0, 0
  for k, lid in ipairs(ids) do
    local from = tonumber(froms[k])
    if from then
      -- never before the send (or admission) it counts from now: a receipt before it is
      -- a backend clock behind ours
      local at = math.max(from, NOW - agos[k]) + RECEIPT_MARGIN - least
      if at > from or (trusted and at < from) then
        args[#args + 1], args[#args + 2] = score_of(at), lid
        if at > from then late = late + 1 else early = early + 1 end
      end
    end
  end
  if #args == 0 then return 0 end
  redis.call('ZADD', K_WIN(m), 'XX', unpack(args))
  if early > 0 then redis.call('HINCRBY', K_STATS, m .. '|receipts', early) end
  if late > 0 then redis.call('HINCRBY', K_STATS, m .. '|late_receipts', late) end
  return early + late
end

-- Model m's guard in force is about to drop other than by its decay: its quota deleted
-- (the learned guard goes with it) or its window changed (the base and the cap follow the
-- window). An entry moved by its receipt counts until its end only with the guard it was
-- moved with, so every entry of the window log moves `by` ms later: each counts at least
-- as long as before the drop. A few hundred ms more for entries that were never moved.
function guard_hold(m, by)
  by = math.ceil(by)
  if by <= 0 then return end
  local raw = redis.call('ZRANGE', K_WIN(m), 0, -1, 'WITHSCORES')
  for first = 1, #raw, 2000 do  -- unpack's stack: a thousand entries a ZADD
    local args = {}
    for k = first, math.min(#raw, first + 1999), 2 do
      args[#args + 1] = score_of(tonumber(raw[k + 1]) + by)
      args[#args + 1] = raw[k]
    end
    redis.call('ZADD', K_WIN(m), unpack(args))
  end
end
end
