-- cancel: withdraw waiting requests (their caller gave up), so they hold nothing back.
-- ARGV[2]: JSON [request id, ...]. Reply: how many were waiting.
local ids = cjson.decode(ARGV[2])
if #ids == 0 then return 0 end
local n = redis.call('ZREM', K_WAITERS, unpack(ids))
redis.call('ZREM', K_WAIT_DEADLINES, unpack(ids))
redis.call('HDEL', K_WAIT_INFO, unpack(ids))
return n
