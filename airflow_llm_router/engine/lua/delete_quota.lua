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
redis.call('HDEL', K_HEALTH, m .. '|eff', m .. '|eff_t', m .. '|eff_n')  -- a learned limit goes with it
redis.call('PEXPIRE', K_WIN(m), int(q.win + GUARD))
redis.call('PEXPIRE', K_WTOK(m), int(q.win + GUARD))
redis.call('PEXPIRE', K_LIVE(m), int(LEASE_TTL + q.win))
redis.call('PUBLISH', CHANNEL, 'quota:' .. m)
return 1
