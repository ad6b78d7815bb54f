-- stats: per-model usage in the current window and counters, as JSON. Loading a model
-- reclaims its expired leases and trims its window first, so the figures are current.
-- ARGV[2]: JSON [model, ...] or 0 for every model with a quota (whose keys must all be
-- declared: else the reply is {stale = model}).
-- latency_ms: the learned call latency (ms, mean of released 'ok' calls weighted by
-- recency: lib/kinds.lua), else the quota's
-- prior expected_latency_s (the 'lat' field, s) in ms, else absent.
-- share: the learned share of the quota admission holds the model to (1: the quota);
-- effective: below 1, the limits in force {rpm, tpm, conc, itpm?, otpm?}.
-- guard_ms: the guard in force (lib/guard.lua).
-- kinds: the estimates learned per task kind (lib/kinds.lua), if any.
-- excess: the mean tokens a call wrote past its reservation (added to engine estimates);
-- excess_max: the largest lately (kept free in the token window: lib/capacity.lua).
-- spend: a priced model's current budget period, total: the router-wide one
-- ({budget?, committed, reserved, period_ms, period_start_ms}, micro-dollars: lib/budget.lua).
local names = cjson.decode(ARGV[2])
if type(names) ~= 'table' then
  names = model_names()
  local m = undeclared_model()
  if m then return cjson.encode({stale = m}) end  -- the caller re-reads the models, retries
end
local COUNTERS = {'admitted', 'waited', 'rejected', 'completed', 'rate_limited', 'errors',
                  'expired', 'breaker_opened', 'limit_cuts', 'guard_widened', 'abandoned',
                  'receipts', 'unknown_model', 'late_receipts', 'held_in_flight'}
local out = {}
for _, m in ipairs(names) do
  local st = load_model(m)
  if st then
    local fields = {}
    for k, c in ipairs(COUNTERS) do fields[k] = m .. '|' .. c end
    local vals = redis.call('HMGET', K_STATS, unpack(fields))
    local counters = {}
    for k, c in ipairs(COUNTERS) do counters[c] = tonumber(vals[k]) or 0 end
    local lat = EST[m .. '|lat'] or nil  -- false: none learned (lib/model_state.lua)
    if not lat and st.q.lat then lat = st.q.lat * 1000 end
    local state = 'closed'
    if st.open > NOW then state = 'open' elseif st.open > 0 then state = 'half_open' end
    -- why it opened: 'errors' in a row, or 'unknown_model' (lib/health.lua)
    local cause = state ~= 'closed' and redis.call('HGET', K_HEALTH, m .. '|cause') or nil
    out[m] = {requests = st.n, tokens = st.s, input_tokens = st.i, output_tokens = st.o,
              in_flight = st.live, output_estimate = st.est, cooldown_ms = math.max(0, st.cool - NOW),
              breaker = state, breaker_cause = cause, counters = counters, latency_ms = lat,
              share = st.share,
              guard_ms = st.guard, kinds = kinds_of(m), excess = st.xs,
              excess_max = st.xm, output_tail = st.ot}
    out[m].spend = budget_view(m, model_view(m).q)
    if st.share < 1 then
      local q = st.q
      out[m].effective = {rpm = q.rpm, tpm = q.tpm, conc = q.conc, itpm = q.itpm, otpm = q.otpm}
    end
  end
end
local total = budget_total_view()
budget_flush()
if RELEASED then notify('*') end
-- waiting: the queued requests whose deadline (retry wait + WAITER_TTL: lib/waiters.lua)
-- is still ahead; one whose caller went away without cancelling stops counting then, even
-- if no admission comes to drop it from the queue
local waiting = redis.call('ZCOUNT', K_WAIT_DEADLINES, '(' .. int(NOW), '+inf')
return cjson.encode({now = NOW, waiting = waiting, models = out,
                     total = total})
