-- set_quota: create or replace one model's quota. It applies at the next admission; the
-- release channel tells waiters to look again (a raise may admit them now).
-- ARGV[2]: model name, ARGV[3]: quota JSON {rpm, tpm, conc, w, on, win (ms), itpm?, otpm?}
-- Reply: 1 created, 0 replaced.
local m = ARGV[2]
-- a changed quota is a new target: what was learned of the old one's real limit goes
if redis.call('HGET', K_QUOTAS, m) ~= ARGV[3] then
  redis.call('HDEL', K_HEALTH, m .. '|eff', m .. '|eff_t', m .. '|eff_n')
  history_targets(m, cjson.decode(ARGV[3]))
end
local created = redis.call('HSET', K_QUOTAS, m, ARGV[3])
-- keys of a deleted model were set to expire; keep them now that it is back
redis.call('PERSIST', K_WIN(m))
redis.call('PERSIST', K_WTOK(m))
redis.call('PERSIST', K_LIVE(m))
notify('quota:' .. m)
return created
