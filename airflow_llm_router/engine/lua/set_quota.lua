-- set_quota: create or replace one model's quota. It applies at the next admission; the
-- release channel tells waiters to look again (a raise may admit them now).
-- ARGV[2]: model name, ARGV[3]: quota JSON {rpm, tpm, conc, w, on, win (ms), itpm?, otpm?}
-- Reply: 1 created, 0 replaced.
local m = ARGV[2]
-- a changed quota is a new target: what was learned of the old one's real limit goes
local old = redis.call('HGET', K_QUOTAS, m)
if old ~= ARGV[3] then
  redis.call('HDEL', K_HEALTH, m .. '|eff', m .. '|eff_t', m .. '|eff_n')
  local q = cjson.decode(ARGV[3])
  history_targets(m, q)
  -- a new window moves the guard's base and cap: the window log keeps what it had
  local was = old and cjson.decode(old)
  if was and was.win ~= q.win then guard_hold(m, guard_read(m, was) - guard_read(m, q)) end
end
local created = redis.call('HSET', K_QUOTAS, m, ARGV[3])
SPEED.note(m, cjson.decode(ARGV[3]), true)  -- its prior latency may have changed
-- keys of a deleted model were set to expire; keep them now that it is back
redis.call('PERSIST', K_WIN(m))
redis.call('PERSIST', K_WTOK(m))
redis.call('PERSIST', K_LIVE(m))
notify('quota:' .. m)
return created
