-- delete_quota: remove one model's quota; no new admission goes to it. Its window log and
-- leases are kept until they could no longer matter (window + guard, lease TTL), so a model
-- deleted and re-created at once still counts the traffic it already had.
-- ARGV[2]: model name. Reply: 1 deleted, 0 unknown model.
local m = ARGV[2]
local raw = redis.call('HGET', K_QUOTAS, m)
if not raw then return 0 end
local q = cjson.decode(raw)
redis.call('HDEL', K_QUOTAS, m)
redis.call('HDEL', K_FAIR, m)
redis.call('ZREM', K_SPEED, m)  -- out of the any-model orders (lib/speed.lua)
redis.call('ZREM', K_LATE, m)
redis.call('ZREM', K_FAIRQ, '0' .. m, '1' .. m)
redis.call('ZREM', K_PARK, m)
-- a learned limit and guard go with it (what the guard held past the least any quota has,
-- its window entries keep: lib/guard.lua); the window log lives as long as the longest guard
guard_hold(m, guard_read(m, q) - GUARD)
redis.call('HDEL', K_HEALTH, m .. '|eff', m .. '|eff_t', m .. '|eff_n', m .. '|ann', m .. '|ann_t',
           m .. '|guard', m .. '|guard_t', m .. '|guard_429_t')
local keep = q.win + guard_longest(q)
redis.call('PEXPIRE', K_WIN(m), int(keep))
redis.call('PEXPIRE', K_WTOK(m), int(keep))
redis.call('PEXPIRE', K_LIVE(m), int(LEASE_TTL + q.win))
notify('quota:' .. m)
return 1
