-- Clock and settings shared by every script. Units: milliseconds from Redis TIME (the one
-- clock every caller shares), tokens as integers. BOUND caps the entries any one step may
-- touch, so a call's cost never grows with a model's limit.
-- ARGV[1] (every script):
--   "lease_ttl|guard|max_wait|starve|waiter_ttl|cooldown|breaker_fails|breaker_open|
--    recovery_share|guard_share|hot_share"
local BOUND = 256
local LEASE_TTL, GUARD, MAX_WAIT, STARVE, WAITER_TTL, COOLDOWN, BREAKER_FAILS, BREAKER_OPEN
local RECOVERY_SHARE, GUARD_SHARE, HOT_SHARE
do
  local v = {}
  for x in string.gmatch(ARGV[1], '[^|]+') do v[#v + 1] = tonumber(x) end
  LEASE_TTL, GUARD, MAX_WAIT, STARVE = v[1], v[2], v[3], v[4]
  WAITER_TTL, COOLDOWN, BREAKER_FAILS, BREAKER_OPEN = v[5], v[6], v[7], v[8]
  RECOVERY_SHARE = v[9] or 0
  GUARD_SHARE = v[10] or 0
  HOT_SHARE = v[11] or 1
end
local NOW
do
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local RELEASED = false
-- Sharded pub/sub where the server has it (Redis 7+): an event then goes to the shard
-- that holds the namespace only, not to every node of a cluster. The clients ask
-- pubsub_mode.lua which kind to listen on, so both sides read this one line.
local SHARDED = (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000
local function notify(message)
  redis.call(SHARDED and 'SPUBLISH' or 'PUBLISH', CHANNEL, message)
end

local function split_model(lease_id)
  return string.match(lease_id, '^(.*)#%d+$')
end

local function int(x)
  return string.format('%d', x)
end

-- A window entry's score as text: whole ms, and the half that marks a sent call's entry
-- (sent.lua) kept; sent_score(ms): the score of a call sent at `ms`.
local function score_of(x)
  if x % 1 ~= 0 then return int(x) .. '.5' end
  return int(x)
end
local function sent_score(ms)
  return int(ms) .. '.5'
end

-- The largest overrun of one call past its reservation, as learned (K_EST '<m>|xm', set
-- at '<m>|xmt' ms), halving every XM_HALF ms since: an output's tail is a property of the
-- model and its prompts, and a long-past straggler should not cost a window's tokens for
-- ever (lib/kinds.lua observes it, lib/capacity.lua keeps it free).
local XM_HALF = 60000
local function excess_top(xm, at)
  if not xm or xm <= 0 then return 0 end
  return xm * 0.5 ^ (math.max(0, NOW - (at or NOW)) / XM_HALF)
end

-- A model's output tail (K_EST '<m>|ot', lib/kinds.lua) is at least TAIL_EARLY times its
-- output estimate until 64 answers were seen, and that before its first is computed.
local TAIL_EARLY = 3

-- A lease's record in K_LEASES: "<admitted ms>:<probe 0/1>:<request id>", then "\31<kind>"
-- when admitted with a task kind (a string, not JSON: encoding and decoding it is a pattern
-- match, on the path of every admission; kinds are printable, request ids hold no \31),
-- then "\30<cost>" for a priced model (its reservation: lib/budget.lua; no \30 either).
local function lease_record(t, probe, rid, kind, cost)
  local rec = int(t) .. ':' .. probe .. ':' .. rid
  if kind then rec = rec .. '\31' .. kind end
  if cost then rec = rec .. '\30' .. cost end
  return rec
end

-- {t = admitted ms, p = 1 for a breaker probe, r = request id, k = kind or nil,
-- c = cost record or nil}; reads the JSON records of earlier versions too (a lease lives
-- one TTL, so they are gone after an upgrade).
local function lease_fields(info)
  local c = nil
  local base, cost = string.match(info, '^([^\30]*)\30(.*)$')
  if base then info, c = base, cost end
  local t, p, r, k = string.match(info, '^(%d+):([01]):([^\31]*)\31(.*)$')
  if t then return {t = tonumber(t), p = tonumber(p), r = r, k = k, c = c} end
  t, p, r = string.match(info, '^(%d+):([01]):(.*)$')
  if t then return {t = tonumber(t), p = tonumber(p), r = r, c = c} end
  return cjson.decode(info)
end
