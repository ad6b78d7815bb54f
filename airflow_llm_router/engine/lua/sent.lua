-- sent: the calls of these leases have been sent to the backend. Each admission's window
-- entry moves to when its call was sent (never earlier than it is), so the window counts
-- from when the backend could first have seen the call, however long it waited to be sent.
-- ARGV[2]: JSON [lease id | [lease id, ms ago], ...]: ms ago = how long before the caller
-- sent this script its call was sent, by the caller's clock; the script runs after that
-- (the hop to Redis, its queue), so NOW - ago is no earlier than the send. Only ever later
-- than the admission: safe.
-- An entry may be gone already: an admission trims entries a window + guard after their
-- admission, and a call can go out that late (its caller's event loop stalled) or its
-- stamp arrive that late (refused while the slot migrated, while admissions went on). The
-- backend counts such a call for a whole window from its arrival, so while its lease is
-- held the entry comes back at the send, holding the model's output estimate (its input
-- is not known here) until the lease settles with the actual tokens (complete.lua).
-- A sent call's entry scores its send ms + 0.5: the half marks it sent, so that the trim
-- keeps it while its lease is live (the call in flight: lib/model_state.lua) and drops the
-- entry of a lease whose call never went out as before.
-- Reply per lease: 1 moved or restored, 0 not (unknown or already later).
local items = cjson.decode(ARGV[2])
local out = {}
for k, it in ipairs(items) do
  local lid, ago = it, 0
  if type(it) == 'table' then lid, ago = it[1], math.max(0, tonumber(it[2]) or 0) end
  local m = split_model(lid)
  out[k] = 0
  if m then
    local at = NOW - ago
    out[k] = redis.call('ZADD', K_WIN(m), 'XX', 'GT', 'CH', sent_score(at), lid)
    if out[k] == 0 and not redis.call('ZSCORE', K_WIN(m), lid) then
      local info = redis.call('HGET', K_LEASES, lid)
      if info then
        local o = int(tonumber(redis.call('HGET', K_EST, m)) or 0)
        redis.call('ZADD', K_WIN(m), sent_score(math.max(at, lease_fields(info).t)), lid)
        if redis.call('HSETNX', K_WTOK(m), lid, o .. ':0:' .. o) == 1 then
          redis.call('HINCRBY', K_WTOK(m), '_s', o)
          redis.call('HINCRBY', K_WTOK(m), '_o', o)
        end
        out[k] = 1
      end
    end
  end
end
return out
