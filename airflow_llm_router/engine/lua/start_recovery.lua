-- start_recovery: Redis lost its data and the quotas are being restored: start the recovery
-- hold (K_RECOVER = now, on Redis's clock, the one every admission compares with), during
-- which each model is admitted at the recovery share until one of its windows has passed.
-- A hold already running is kept, not restarted (several clients may restore at once).
-- ARGV[2]: how long the marker lives (ms): the longest window + guard, and some.
-- Reply: 1 started, 0 already running.
if redis.call('SET', K_RECOVER, int(NOW), 'PX', ARGV[2], 'NX') then return 1 end
return 0
