-- Whether a request fits a model now, and if not, how long until it might (ms).
-- need = {s = tokens, i = input tokens, o = output tokens}; res = capacity held back for
-- waiters ranked ahead ({n, s, i, o} requests/tokens, same units). The wait is the real
-- time until the window frees enough (the oldest entries leaving it), never a constant,
-- except for slots freed by completions, which are announced on CHANNEL: there the wait
-- is the earliest lease expiry, capped at MAX_WAIT.

-- The first BOUND window entries, oldest first: {t, s, i, o} each. Cached per model.
local function window_head(st)
  if st.head then return st.head end
  model_flush(st)
  local raw = redis.call('ZRANGE', K_WIN(st.m), 0, BOUND - 1, 'WITHSCORES')
  local ids, times = {}, {}
  for k = 1, #raw, 2 do
    ids[#ids + 1] = raw[k]
    times[#times + 1] = tonumber(raw[k + 1])
  end
  local head = {}
  if #ids > 0 then
    local toks = redis.call('HMGET', K_WTOK(st.m), unpack(ids))
    for k = 1, #ids do
      local s, a, b = string.match(toks[k] or '0:0:0', '^(%d+):(%d+):(%d+)$')
      head[k] = {t = times[k], s = tonumber(s), i = tonumber(a), o = tonumber(b)}
    end
  end
  st.head = head
  return head
end

-- ms until `excess` units of `field` ('n' counts entries) have left the window.
local function window_wait(st, field, excess)
  local freed = 0
  for _, e in ipairs(window_head(st)) do
    if field == 'n' then freed = freed + 1 else freed = freed + e[field] end
    if freed >= excess then
      return math.max(1, e.t + st.q.win + st.guard - NOW)
    end
  end
  return MAX_WAIT
end

-- Kept for the call in st.slot (NOW does not move within it) until an admission on the
-- model adds a lease (admit.lua's reserve clears it): every waiter re-decided on a full
-- model asks the same.
local function slot_wait(st)
  if st.slot then return st.slot end
  model_flush(st)
  local first = redis.call('ZRANGE', K_LIVE(st.m), 0, 0, 'WITHSCORES')
  if #first == 0 then
    st.slot = 1
  else
    st.slot = math.max(1, math.min(MAX_WAIT, tonumber(first[2]) - NOW))
  end
  return st.slot
end

-- Before a model's first answer the engine's output estimate is only the quota's prior
-- (expected_output_tokens), which may be far off: requests that leave the output to the
-- engine are admitted while fewer than COLD_CALLS calls of the model are in flight, so
-- the first window holds at most COLD_CALLS answers of unknown length, whatever the
-- prior. The first completion (with or without token counts) ends it; waiters wake on
-- its release.
local COLD_CALLS = 4

local function model_cold(st)
  if st.cold == nil then
    st.cold = not EST[st.m]
        and (tonumber(redis.call('HGET', K_STATS, st.m .. '|completed')) or 0) == 0
  end
  return st.cold
end

-- Returns 0 when the request fits now; otherwise (wait ms, reason). `hold` gives the
-- capacity held back for the waiters ahead (lib/waiters.lua); it is asked only once the
-- model has a free slot, since a full model gives the same answer whatever is held back,
-- and with hundreds of waiters re-decided on every release most models are full.
local function blocked(st, need, hold)
  local q = st.q
  if st.cool > NOW then return st.cool - NOW, 'cooldown' end
  if st.recover_until and st.share <= 0 then return st.recover_until - NOW, 'recovery' end
  if st.open > NOW then return st.open - NOW, 'breaker' end
  if st.open > 0 and st.probe then
    model_flush(st)
    if redis.call('ZSCORE', K_LIVE(st.m), st.probe) then return MAX_WAIT, 'breaker' end
  end
  if st.live + 1 > q.conc then return slot_wait(st), 'concurrency' end
  local res = hold()
  if st.live + 1 + res.n > q.conc then return slot_wait(st), 'concurrency' end
  if st.n + 1 + res.n > q.rpm then
    return window_wait(st, 'n', st.n + 1 + res.n - q.rpm), 'rpm'
  end
  -- under a learned share below the quota, one request larger than the scaled limit still
  -- fits an otherwise empty window (it fits the quota: never_fits said so)
  local tpm, itpm, otpm = math.max(q.tpm, need.s), q.itpm, q.otpm
  if itpm then itpm = math.max(itpm, need.i) end
  if otpm then otpm = math.max(otpm, need.o) end
  -- An output left to the engine may run past its reservation, and the provider counts
  -- the real tokens from the send: what the model's long answers write past this
  -- request's reservation (its output tail, lib/kinds.lua), or the largest overrun of one
  -- of its calls lately if larger, is kept free in the token window, so a window filled
  -- to its limit is not overrun by the one long answer among its calls, this one
  -- included (the reservations' mean excess covers the rest). An empty window takes the
  -- request all the same.
  local head = 0
  if need.est and st.s + res.s > 0 then
    head = math.ceil(math.max(st.xm, st.ot - need.o))
  end
  if st.s + need.s + res.s + head > tpm then
    return window_wait(st, 's', st.s + need.s + res.s + head - tpm), 'tpm'
  end
  if need.est and st.live >= COLD_CALLS and model_cold(st) then
    return slot_wait(st), 'warming'
  end
  if itpm and st.i + need.i + res.i > itpm then
    return window_wait(st, 'i', st.i + need.i + res.i - itpm), 'input_tpm'
  end
  if otpm and st.o + need.o + res.o > otpm then
    return window_wait(st, 'o', st.o + need.o + res.o - otpm), 'output_tpm'
  end
  return 0
end

-- Whether a model is at or over its overflow threshold (the quota's 'ovf', a share of its
-- window; absent: 1): the share of its window in use, in its most used dimension (calls,
-- tokens, input, output tokens) of the limits in force, has reached it. An ordered list's
-- later models may then take a request the model still has room for (admit.lua).
local function over_threshold(st)
  local q = st.q
  local t = q.ovf
  if not t or t >= 1 then return false end
  local used = math.max(st.n / q.rpm, st.s / q.tpm)
  if q.itpm then used = math.max(used, st.i / q.itpm) end
  if q.otpm then used = math.max(used, st.o / q.otpm) end
  return used >= t
end

-- The tokens a request needs on this model: as given, or, when the caller left the
-- output to the engine (s < 0), its input plus the model's learned output per call (for
-- the request's kind, if it has one: lib/kinds.lua) plus the model's mean excess (what
-- its calls wrote past their reservations, per call: lib/kinds.lua), so the reservations
-- of the calls in flight together cover their expected overrun.
local function need_for(st, req)
  if req.s >= 0 then return req end
  local est = kind_estimate(st.m, st.est, req.k) + math.ceil(st.xs)
  return {s = req.i + est, i = req.i, o = est, est = true}
end

-- Why a request could never fit this model, or nil.
local function never_fits(st, need)
  local q = st.q
  if not q.on then return 'disabled' end
  if need.s > q.tpm or (q.itpm and need.i > q.itpm) or (q.otpm and need.o > q.otpm) then
    return 'too_large'
  end
  return nil
end
