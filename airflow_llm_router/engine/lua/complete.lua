-- complete: settle a batch of leases. Frees each live lease's concurrency slot, replaces the
-- estimate in the window with the actual tokens (if the entry is still in the window, also
-- for a lease that already expired), and feeds the model's health.
-- ARGV[2]: JSON [[lease id, input tokens, output tokens, outcome, retry after ms,
--           delay ms, hold ms, announced requests, announced tokens, latency ms,
--           receipt ms ago], ...]
--          tokens -1 = unknown (the estimate stays); outcome 'ok' | 'rate_limited' | 'error'
--          | 'unknown_model' (the backend does not have the model) | 'abandoned' (the
--          lease's call was never made: lib/health.lua);
--          the rest are optional (-1 or 0: unknown), from what the provider said:
--          delay = when the call reached it less when it was sent (widens the model's guard,
--          lib/guard.lua); hold = ms until its window has room again, said on any outcome
--          (remaining 0: the model cools down without a 429); announced = its limits
--          (cap the effective limit, lib/effective.lua); then the caller's latency ms
--          (send to answer) and the receipt: ms ago, by the caller's clock, that the
--          provider says it counted the call (its window entry counts from then:
--          guard_receipts in lib/guard.lua).
-- Reply per lease: 1 released, 2 settled but the lease had expired, 0 unknown lease.
-- A live lease released 'ok' also feeds the model's latency estimate (ms, admission to
-- completion) in K_EST '<model>|lat' (its mean deviation in '<model>|latd') and its output
-- estimate, model-wide and for the kind the lease was admitted with (lib/kinds.lua); one
-- released 'rate_limited' may cut the model's effective limit (lib/effective.lua).
-- The batch is settled model by model, with one call per key for all of a model's leases
-- (the common case: every outcome 'ok'); a model with a 429 or an error in the batch has
-- its outcomes recorded one by one, in order, as the breaker's count depends on it.
local items = cjson.decode(ARGV[2])

-- Window entries of these leases get their actual tokens; the window totals move by actual
-- minus estimate. One read and one write. Returns lease id -> whether it is in the window.
local function settle(m, batch)
  local fields = {}
  for k, it in ipairs(batch) do fields[k] = it[1] end
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3] = '_s', '_i', '_o'
  local cur = redis.call('HMGET', K_WTOK(m), unpack(fields))
  local ds, di, dout, writes, in_window, excess = 0, 0, 0, {}, {}, {}
  for k, it in ipairs(batch) do
    local lid, inp, outp = it[1], it[2], it[3]
    in_window[lid] = cur[k] ~= false
    if cur[k] and inp >= 0 and outp >= 0 then
      local s, a, b = string.match(cur[k], '^(%d+):(%d+):(%d+)$')
      ds, di, dout = ds + inp + outp - tonumber(s), di + inp - tonumber(a), dout + outp - tonumber(b)
      if it[4] == 'ok' then excess[#excess + 1] = math.max(0, inp + outp - tonumber(s)) end
      writes[#writes + 1] = lid
      writes[#writes + 1] = (inp + outp) .. ':' .. inp .. ':' .. outp
    end
  end
  if #writes > 0 then
    writes[#writes + 1], writes[#writes + 2] = '_s', int((tonumber(cur[n + 1]) or 0) + ds)
    writes[#writes + 1], writes[#writes + 2] = '_i', int((tonumber(cur[n + 2]) or 0) + di)
    writes[#writes + 1], writes[#writes + 2] = '_o', int((tonumber(cur[n + 3]) or 0) + dout)
    redis.call('HSET', K_WTOK(m), unpack(writes))
  end
  observe_excess(m, excess)
  return in_window
end

-- Each lease id's record (live leases only), read with one HMGET.
local RECORDS = {}
do
  local ids = {}
  for k, it in ipairs(items) do ids[k] = it[1] end
  if #ids > 0 then
    local raw = redis.call('HMGET', K_LEASES, unpack(ids))
    for k, lid in ipairs(ids) do
      if raw[k] then RECORDS[lid] = lease_fields(raw[k]) end
    end
  end
end
budget_settle(items, RECORDS)  -- lib/budget.lua: spend moves from the reservation to the actual

-- The items of each model, in order; a lease id given twice is settled once (its second
-- mention is answered like a lease already released).
local out, models, by_model, first = {}, {}, {}, {}
for k, it in ipairs(items) do
  out[k] = 0
  local lid = it[1]
  local m = split_model(lid)
  if m and not first[lid] then
    first[lid] = k
    if not by_model[m] then
      by_model[m] = {}
      models[#models + 1] = m
    end
    local b = by_model[m]
    b[#b + 1] = {lid, it[2], it[3], it[4], it[5], k, tonumber(it[6]) or -1,
                 tonumber(it[7]) or 0, tonumber(it[8]) or -1, tonumber(it[9]) or -1,
                 tonumber(it[10]) or -1, tonumber(it[11]) or -1}
  end
end

-- A model's quota (decoded), or nil once deleted.
local QUOTAS = {}
local function quota_of(m)
  if QUOTAS[m] == nil then
    local raw = redis.call('HGET', K_QUOTAS, m)
    QUOTAS[m] = raw and cjson.decode(raw) or false
  end
  return QUOTAS[m] or nil
end

-- What the provider said with a model's answers: the largest delay, the longest hold,
-- the last announced limits of the batch and each call's receipt.
local function provider_said(m, batch)
  local delay, hold, ann, ids, agos = -1, 0, nil, {}, {}
  for _, it in ipairs(batch) do
    delay, hold = math.max(delay, it[7]), math.max(hold, it[8])
    if it[9] >= 0 or it[10] >= 0 then ann = it end
    if it[12] >= 0 and it[4] ~= 'abandoned' then
      ids[#ids + 1], agos[#agos + 1] = it[1], it[12]
    end
  end
  if delay < 0 and hold <= 0 and not ann and #ids == 0 then return end
  local q = quota_of(m)
  if not q then return end
  -- below the quota, a learned limit governs and its probes would be skewed by a guard
  -- widened meanwhile (calls spaced past the provider's window hide a probe's excess)
  if delay > 0 then
    guard_observe(m, q, delay, function() return eff_at_quota(m, q) end)
  end
  if hold > 0 then cool_until(m, NOW + hold) end
  if ann then eff_announce(m, ann[9], ann[10]) end
  -- calls whose receipt the provider said count from it, not from their send plus the
  -- guard (lib/guard.lua), once the guard has taken in this batch's delays
  guard_receipts(m, q, ids, agos)
end

local released, rids = {}, {}
for _, m in ipairs(models) do
  local batch = by_model[m]
  local in_window = settle(m, batch)
  local gone, all_ok = {}, true
  for _, it in ipairs(batch) do
    local rec = RECORDS[it[1]]
    if rec then
      gone[#gone + 1] = it[1]
      out[it[6]] = 1
    elseif in_window[it[1]] then
      out[it[6]] = 2
    end
    if it[4] ~= 'ok' then all_ok = false end
  end
  if #gone > 0 then
    redis.call('ZREM', K_LIVE(m), unpack(gone))
    for _, lid in ipairs(gone) do
      released[#released + 1] = lid
      rids[#rids + 1] = RECORDS[lid].r
    end
    RELEASED = true
  end
  -- completed: the model's count of completed calls after each 'ok' that settled a lease
  local completed, oks = {}, 0
  if all_ok then
    local probe = false
    for _, it in ipairs(batch) do
      if out[it[6]] > 0 then oks = oks + 1 end
      if RECORDS[it[1]] and RECORDS[it[1]].p == 1 then probe = true end
    end
    local total = record_ok(m, oks, probe)
    local c = total - oks
    for k, it in ipairs(batch) do
      if out[it[6]] > 0 then
        c = c + 1
        completed[k] = c
      end
    end
  else
    for k, it in ipairs(batch) do
      if out[it[6]] > 0 then
        local rec = RECORDS[it[1]]
        completed[k] = record_outcome(m, it[4], it[5], rec and rec.p == 1)
        -- the provider refused a call admission let through: learn its real limit, and
        -- give later calls more time between windows in case it counted them late
        -- (only at the full quota: below it, a learned limit is being tested, and a 429
        -- is that test's answer)
        local q = it[4] == 'rate_limited' and rec and rec.t and quota_of(m)
        if q then
          local full = eff_at_quota(m, q)
          eff_cut(m, q, it[1], rec.t)
          if full then guard_widen(m, q, rec.t) end
        end
      end
    end
  end
  -- learned estimates (lib/kinds.lua): model-wide after a model's first 16 completions
  -- from every 4th latency, and per kind (the lease's, while it lived) from every call
  local latencies, outputs, recompute, kinds, kind_names = {}, {}, false, {}, {}
  for k, it in ipairs(batch) do
    local c = completed[k] or 0
    local rec = RECORDS[it[1]]
    if it[4] == 'ok' then
      local kd = rec and rec.k and kinds[rec.k]
      if rec and rec.k and not kd then
        kd = {o = {}, l = {}}
        kinds[rec.k] = kd
        kind_names[#kind_names + 1] = rec.k
      end
      if rec and rec.t then
        -- the caller's measure leaves out its waits to send and to settle the call, which
        -- in a burst are seconds (Completion.latency_s)
        local ms = it[11]
        if ms < 0 then ms = math.max(0, NOW - rec.t) end
        if c <= 16 or c % 4 == 0 then latencies[#latencies + 1] = ms end
        if kd then kd.l[#kd.l + 1] = ms end
      end
      if it[3] >= 0 then
        outputs[#outputs + 1] = it[3]
        if c <= 32 or c % 8 == 0 then recompute = true end
        if kd then kd.o[#kd.o + 1] = it[3] end
      end
    end
  end
  local written = observe_latency(K_EST, m .. '|lat', latencies, function()
    local q = quota_of(m)
    return q and q.lat and q.lat * 1000 or nil
  end)
  if #latencies > 0 then  -- lib/speed.lua
    SPEED.note(m, quota_of(m) or false, false, written)
  end
  observe_p95(K_OBS(m), K_EST, m, outputs, recompute, function()
    local q = quota_of(m)
    return q and q.oprior or nil
  end)
  for _, kind in ipairs(kind_names) do kind_observe(m, kind, kinds[kind].o, kinds[kind].l) end
  provider_said(m, batch)
  history_outcomes(m, batch, out)
end

if #released > 0 then
  redis.call('HDEL', K_LEASES, unpack(released))
  local owners = redis.call('HMGET', K_REQUESTS, unpack(rids))
  local stale = {}
  for k, rid in ipairs(rids) do
    if owners[k] == released[k] then stale[#stale + 1] = rid end
  end
  if #stale > 0 then redis.call('HDEL', K_REQUESTS, unpack(stale)) end
end
if RELEASED then notify('*') end
return out
