-- sent: the calls of these leases have been sent to the backend. Each admission's window
-- entry moves to when its call was sent (never earlier than it is), so the window counts
-- from when the backend could first have seen the call, however long it waited to be sent.
-- ARGV[2]: JSON [lease id | [lease id, ms ago], ...]: ms ago = how long before the caller
-- sent this script its call was sent, by the caller's clock; the script runs after that
-- (the hop to Redis, its queue), so NOW - ago is no earlier than the send. Only ever later
-- than the admission: safe.
-- Reply per lease: 1 moved, 0 not (unknown or already later).
local items = cjson.decode(ARGV[2])
local out = {}
for k, it in ipairs(items) do
  local lid, ago = it, 0
  if type(it) == 'table' then lid, ago = it[1], math.max(0, tonumber(it[2]) or 0) end
  local m = split_model(lid)
  out[k] = 0
  if m then out[k] = redis.call('ZADD', K_WIN(m), 'XX', 'GT', 'CH', int(NOW - ago), lid) end
end
return out
