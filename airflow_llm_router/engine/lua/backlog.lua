-- backlog: a drain reports the tasks waiting in its source (a task store's queue), not
-- yet claimed, so admission sees the whole backlog (lib/finish.lua). Every drain of one
-- source reports the same count under the same name; a report lasts its TTL, so a drain
-- that died stops counting by itself.
-- ARGV[2]: JSON [source, tasks, ttl ms]. Reply: the sources reported now (expired ones
-- dropped).
local a = cjson.decode(ARGV[2])
local source, n, ttl = a[1], math.floor(tonumber(a[2]) or 0), tonumber(a[3]) or 1
redis.call('HSET', K_BACKLOG, source, n .. ':' .. int(NOW + ttl))
local raw, live = redis.call('HGETALL', K_BACKLOG), 0
for k = 1, #raw, 2 do
  local until_ms = tonumber(string.match(raw[k + 1], ':(%d+)$'))
  if until_ms and until_ms > NOW then live = live + 1 else redis.call('HDEL', K_BACKLOG, raw[k]) end
end
return live
