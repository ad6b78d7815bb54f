-- complete: settle a batch of leases. Frees each live lease's concurrency slot, replaces the
-- estimate in the window with the actual tokens (if the entry is still in the window, also
-- for a lease that already expired), and feeds the model's health.
-- ARGV[2]: JSON [[lease id, input tokens, output tokens, outcome, retry after ms,
--           delay ms, hold ms, announced requests, announced tokens], ...]
--          tokens -1 = unknown (the estimate stays); outcome 'ok' | 'rate_limited' | 'error';
--          the last four are optional (-1 or 0: unknown), from what the provider said:
--          delay = when the call reached it less when it was sent (widens the model's guard,
--          lib/guard.lua); hold = ms until its window has room again, said on any outcome
--          (remaining 0: the model cools down without a 429); announced = its limits
--          (cap the effective limit, lib/effective.lua).
-- Reply per lease: 1 released, 2 settled but the lease had expired, 0 unknown lease.
-- A live lease released 'ok' also feeds the model's latency estimate (ms, admission to
-- completion) in K_EST '<model>|lat'; one released 'rate_limited' may cut the model's
-- effective limit (lib/effective.lua).
-- The batch is settled model by model, with one call per key for all of a model's leases
-- (the common case: every outcome 'ok'); a model with a 429 or an error in the batch has
-- its outcomes recorded one by one, in order, as the breaker's count depends on it.
local items = cjson.decode(ARGV[2])
local OBSERVED = 64
local LAT_ALPHA = 0.2

-- Latency EWMA, O(1) per observation: the first replaces the quota's prior (stats report
-- the prior until then), each later one moves the estimate LAT_ALPHA of the way towards it.
-- After a model's first 16 completions only every 4th is sampled.
local function observe_latency(m, samples)
  if #samples == 0 then return end
  local f = m .. '|lat'
  local cur = tonumber(redis.call('HGET', K_EST, f))
  for _, ms in ipairs(samples) do
    if cur then cur = cur + LAT_ALPHA * (ms - cur) else cur = ms end
  end
  redis.call('HSET', K_EST, f, string.format('%.3f', cur))
end

-- Keep the model's output estimate at the 95th percentile of its last OBSERVED calls:
-- recomputed when the batch holds one of its first 32 completions (a cold start converges
-- fast) or a multiple of 8 (the sort is the costly part).
local function observe_output(m, outputs, recompute)
  if #outputs == 0 then return end
  local key = K_OBS(m)
  if redis.call('LPUSH', key, unpack(outputs)) > OBSERVED + 16 then  -- trimmed every ~16
    redis.call('LTRIM', key, 0, OBSERVED - 1)
  end
  if not recompute then return end
  local seen = redis.call('LRANGE', key, 0, OBSERVED - 1)
  for k = 1, #seen do seen[k] = tonumber(seen[k]) end
  table.sort(seen)
  redis.call('HSET', K_EST, m, seen[math.max(1, math.ceil(#seen * 0.95))])
end

-- Window entries of these leases get their actual tokens; the window totals move by actual
-- minus estimate. One read and one write. Returns lease id -> whether it is in the window.
local function settle(m, batch)
  local fields = {}
  for k, it in ipairs(batch) do fields[k] = it[1] end
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3] = '_s', '_i', '_o'
  local cur = redis.call('HMGET', K_WTOK(m), unpack(fields))
  local ds, di, dout, writes, in_window = 0, 0, 0, {}, {}
  for k, it in ipairs(batch) do
    local lid, inp, outp = it[1], it[2], it[3]
    in_window[lid] = cur[k] ~= false
    if cur[k] and inp >= 0 and outp >= 0 then
      local s, a, b = string.match(cur[k], '^(%d+):(%d+):(%d+)$')
      ds, di, dout = ds + inp + outp - tonumber(s), di + inp - tonumber(a), dout + outp - tonumber(b)
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
                 tonumber(it[7]) or 0, tonumber(it[8]) or -1, tonumber(it[9]) or -1}
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

-- What the provider said with a model's answers: the largest delay, the longest hold and
-- the last announced limits of the batch.
local function provider_said(m, batch)
  local delay, hold, ann = -1, 0, nil
  for _, it in ipairs(batch) do
    delay, hold = math.max(delay, it[7]), math.max(hold, it[8])
    if it[9] >= 0 or it[10] >= 0 then ann = it end
  end
  if delay < 0 and hold <= 0 and not ann then return end
  local q = quota_of(m)
  if not q then return end
  -- below the quota, a learned limit governs and its probes would be skewed by a guard
  -- widened meanwhile (calls spaced past the provider's window hide a probe's excess)
  if delay > 0 then
    guard_observe(m, q, delay, function() return eff_at_quota(m, q) end)
  end
  if hold > 0 then cool_until(m, NOW + hold) end
  if ann then eff_announce(m, ann[9], ann[10]) end
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
  local latencies, outputs, recompute = {}, {}, false
  for k, it in ipairs(batch) do
    local c = completed[k] or 0
    local rec = RECORDS[it[1]]
    if it[4] == 'ok' then
      if rec and rec.t and (c <= 16 or c % 4 == 0) then
        latencies[#latencies + 1] = math.max(0, NOW - rec.t)
      end
      if it[3] >= 0 then
        outputs[#outputs + 1] = it[3]
        if c <= 32 or c % 8 == 0 then recompute = true end
      end
    end
  end
  observe_latency(m, latencies)
  observe_output(m, outputs, recompute)
  provider_said(m, batch)
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
if RELEASED then redis.call('PUBLISH', CHANNEL, '*') end
return out
