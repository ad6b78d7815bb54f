-- master_moved: a client's connection reaches another master than the one it wrote to
-- before (a Sentinel failover, or a master restarted). What it admitted on the old master
-- since the replica's promotion never reached this one, and a client keeps writing to the
-- old master until that one is demoted (seconds): this master's windows lack those calls.
-- Start the recovery hold now (K_RECOVER = now; a running hold's start moves to now, each
-- client that moves over restarting it), for one window + guard of each model, at the
-- recovery share, as after Redis lost its data (lib/model_state.lua).
-- Reply: 1 held, 0 no quota to hold.
local longest = 0
for _, raw in ipairs(redis.call('HVALS', K_QUOTAS)) do
  local win = tonumber(cjson.decode(raw).win) or 0
  if win > longest then longest = win end
end
if longest == 0 then return 0 end
local ttl = longest + guard_base({win = longest}) + 1000
redis.call('SET', K_RECOVER, int(NOW), 'PX', int(ttl))
return 1
