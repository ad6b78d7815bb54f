-- heartbeat: extend live leases by the lease TTL (ms).
-- ARGV[2]: JSON [lease id, ...]
-- Reply per lease: the new TTL in ms, or -1 when the lease expired or is unknown.
local ids = cjson.decode(ARGV[2])
local out = {}
for k, lid in ipairs(ids) do
  out[k] = -1
  local m = split_model(lid)
  if m then
    local exp = redis.call('ZSCORE', K_LIVE(m), lid)
    if exp and tonumber(exp) > NOW and redis.call('HEXISTS', K_LEASES, lid) == 1 then
      redis.call('ZADD', K_LIVE(m), 'XX', int(NOW + LEASE_TTL), lid)
      out[k] = LEASE_TTL
    end
  end
end
return out
