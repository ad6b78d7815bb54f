-- Traffic history: per model, what admission saw in fixed time buckets, written by the
-- scripts themselves (so every caller's traffic is in it, sampled once, on the Redis clock)
-- and read by history.lua for the quota page's chart. Units: ms (Redis TIME), tokens as
-- admission counts them (estimates until a call settles), limits per the model's window.
-- K_HIST(m): HASH bucket number (NOW // HIST_BUCKET_MS) -> "v1,v2,...,v14" in the order
-- below, -1 for "not recorded in this bucket". Bounded: a new bucket deletes the one HIST_KEEP
-- buckets older (and, after a gap, every older one), and the key expires HIST_KEEP buckets
-- after its last new bucket, so an idle or deleted model's history goes away by itself.
-- Cost: one HGET and (unless nothing changed) one HSET per model an admit call loads;
-- complete writes only for a model with a 429 or an error in the batch.
local HIST_BUCKET_MS = 10000
local HIST_KEEP = 360
-- A bucket's values, in order (history.lua names them for readers): 1 admitted (sum),
-- 2 requests and 3 tokens: the most the window held (max; what rpm/tpm limit), 4 in flight
-- (max), 5 rate_limited, 6 errors (outcomes of settled calls), 7 breaker_opened (sums),
-- 8 rpm, 9 tpm, 10 max_concurrency: the targets (the quota), 11-13 the learned effective
-- limits in force (-1: the target itself), 14 window_ms (last written).
local HIST_N = 14
local HIST_PATTERN = '^(-?%d+),(-?%d+),(-?%d+),(-?%d+),(-?%d+),(-?%d+),(-?%d+),(-?%d+),' ..
                     '(-?%d+),(-?%d+),(-?%d+),(-?%d+),(-?%d+),(-?%d+)$'
local HIST_FORMAT = '%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d'
local HIST_OPENED = {}

-- A new bucket b: drop the buckets that fell out of the kept span.
local function hist_trim(key, b)
  local oldest = b - HIST_KEEP
  redis.call('HDEL', key, int(oldest))
  if redis.call('HLEN', key) < HIST_KEEP then return end
  local stale = {}
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if (tonumber(f) or 0) <= oldest then stale[#stale + 1] = f end
    if #stale >= BOUND then break end
  end
  if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
end

-- Merge `add` (value index -> value, nil: nothing to say) into m's current bucket; one HGET,
-- and one HSET unless nothing changed.
local function hist_record(m, add)
  local key = K_HIST(m)
  local b = math.floor(NOW / HIST_BUCKET_MS)
  local field = int(b)
  local cur = redis.call('HGET', key, field)
  local v = {}
  if cur then
    v = {string.match(cur, HIST_PATTERN)}
  else
    hist_trim(key, b)
  end
  for k = 1, HIST_N do
    local x, old = add[k], tonumber(v[k]) or -1
    if x == nil then x = old
    elseif k == 1 or (k >= 5 and k <= 7) then x = math.max(old, 0) + x
    elseif k <= 4 then x = math.max(old, x) end
    v[k] = x
  end
  local packed = string.format(HIST_FORMAT, unpack(v))
  if packed == cur then return end
  redis.call('HSET', key, field, packed)
  if not cur then redis.call('PEXPIRE', key, int((HIST_KEEP + 1) * HIST_BUCKET_MS)) end
end

-- The quota's targets (q as set_quota stores it) and the limits in force (e: the quota
-- scaled by the learned share, nil at the quota), as fields 8-14 of `add`.
local function hist_limits(add, q, e)
  add[8], add[9], add[10], add[14] = q.rpm, q.tpm, q.conc, q.win
  if e and e ~= q then add[11], add[12], add[13] = e.rpm, e.tpm, e.conc
  else add[11], add[12], add[13] = -1, -1, -1 end
  return add
end

-- admit.lua: every model the call loaded (STATE: model -> state or false), with the
-- admissions it made (ADMITTED: request id -> lease id) and the window after them.
-- view(m) gives the model's quota as set ({q = ...}; lib/model_state.lua).
local function history_admitted(state, admitted, view)
  local n = {}
  for _, lid in pairs(admitted) do
    local m = split_model(lid)
    n[m] = (n[m] or 0) + 1
  end
  for m, st in pairs(state) do
    if st then
      local q = view(m).q
      hist_record(m, hist_limits({n[m] or 0, st.n, st.s, st.live}, q, st.share < 1 and st.q))
    end
  end
end

-- lib/health.lua: model m's breaker has just opened.
local function history_breaker_opened(m)
  HIST_OPENED[m] = (HIST_OPENED[m] or 0) + 1
end

-- complete.lua: one model's settled batch (items {lease id, in, out, outcome, ..., index}
-- with out[index] > 0 for a lease that was live or in the window): its 429s and errors.
local function history_outcomes(m, batch, out)
  local limited, errors = 0, 0
  for _, it in ipairs(batch) do
    if out[it[6]] > 0 then
      if it[4] == 'rate_limited' then limited = limited + 1
      elseif it[4] == 'error' or it[4] == 'unknown_model' then errors = errors + 1 end
    end
  end
  local opened = HIST_OPENED[m] or 0
  if limited + errors + opened == 0 then return end
  HIST_OPENED[m] = nil
  hist_record(m, {nil, nil, nil, nil, limited, errors, opened})
end

-- set_quota.lua: model m has a new quota q (decoded): its targets from now on.
local function history_targets(m, q)
  hist_record(m, hist_limits({}, q, nil))
end
