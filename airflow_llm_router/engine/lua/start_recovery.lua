-- start_recovery: Redis lost its data and the quotas are being restored: start the recovery
-- hold (K_RECOVER = now, on Redis's clock, the one every admission compares with), during
-- which each model is admitted at the recovery share until one of its windows has passed.
-- A hold already running is kept, not restarted (several clients may restore at once).
-- ARGV[2]: the longest window (ms); the marker lives that + its base guard, and a second.
-- Reply: 1 started, 0 already running.
local win = tonumber(ARGV[2])
local ttl = win + guard_base({win = win}) + 1000
if redis.call('SET', K_RECOVER, int(NOW), 'PX', int(ttl), 'NX') then return 1 end
return 0
