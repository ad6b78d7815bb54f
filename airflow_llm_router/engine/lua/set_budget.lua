-- set_budget: set or clear the router-wide spend budget (lib/budget.lua). It applies at the
-- next admission; the release channel tells waiters to look again (a raise may admit them).
-- ARGV[2]: budget JSON {b: micro-dollars per period, per: period ms}, or '' to clear it.
-- Reply: 1.
if ARGV[2] == '' then
  redis.call('HDEL', K_SPEND, '*|b', '*|per')
else
  local b = cjson.decode(ARGV[2])
  redis.call('HSET', K_SPEND, '*|b', int(b.b), '*|per', int(b.per))
end
notify('budget')
return 1
