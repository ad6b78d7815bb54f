-- backlog: a drain reports the tasks waiting in its source (a task store's queue), not
-- yet claimed, so admission sees the whole backlog (lib/finish.lua). Every drain of one
-- source reports the same count under the same name; a report lasts its TTL, so a drain
-- that died stops counting by itself.
-- ARGV[2]: JSON [source, tasks, ttl ms]. Reply: the sources reported now (expired ones
-- dropped).
local a = cjson.decode(ARGV[2])
local source, n, ttl = a[1], math.floor(tonumber(a[2]) or 0), tonumber(a[3]) or 1
redis.call('HSET', K_BACKLOG, source, n .. ':' .. int(NOW + ttl))
local _, live = backlog_reports(true)
return live
