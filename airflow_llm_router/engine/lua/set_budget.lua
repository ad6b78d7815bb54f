-- set_budget: set or clear the router-wide spend budget (lib/budget.lua). It applies at the
-- next admission; the release channel tells waiters to look again (a raise may admit them).
-- ARGV[2]: budget JSON {b: micro-dollars per period, per: period ms}, or '' to clear it.
-- Reply: 1.
if ARGV[2] == '' then
  redis.call('DEL', K_BUDGET)
else
  redis.call('SET', K_BUDGET, ARGV[2])
end
redis.call('PUBLISH', CHANNEL, 'budget')
return 1
