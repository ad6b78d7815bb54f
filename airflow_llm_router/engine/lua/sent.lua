-- sent: the calls of these leases have now been sent to the backend. Each admission's
-- window entry moves to now (never earlier), so the window counts from when the backend
-- could first have seen the call, however long it waited to be sent. Only ever later: safe.
-- ARGV[2]: JSON [lease id, ...]. Reply per lease: 1 moved, 0 not (unknown or already later).
local ids = cjson.decode(ARGV[2])
local out = {}
for k, lid in ipairs(ids) do
  local m = split_model(lid)
  out[k] = 0
  if m then out[k] = redis.call('ZADD', K_WIN(m), 'XX', 'GT', 'CH', int(NOW), lid) end
end
return out
