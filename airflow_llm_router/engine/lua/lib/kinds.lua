-- Learned estimates: a model's output tokens per call (the 95th percentile of its last
-- OBSERVED calls) and latency (model-wide: a mean weighted by recency; per kind: an EWMA),
-- model-wide and per task kind. Prompts of one kind (a summary, an essay) differ far less
-- from each other than the model's mix does, so a kind's own percentile reserves less for
-- short kinds and enough for long ones.
-- Per model, K_KIND(m) holds "o|<kind>" (output estimate), "l|<kind>" (latency ms),
-- "n|<kind>" (outputs observed), "t|<kind>" (last seen ms) and "w|<kind>" (its recent
-- outputs, newest first, comma-separated: a field of the model's hash rather than a key
-- per kind, so every key a script touches is one the client declared for the model).
-- Bounded: at most KIND_MAX kinds per model (the least recently seen is dropped) and each
-- forgotten KIND_TTL after it was last seen, so free-form labels cannot grow Redis.
local observe_latency, observe_excess, observe_p95, kind_observe, kind_estimate, kinds_of
-- What this library keeps to itself lives in this block: a script's main function may
-- have at most 200 locals (Lua's limit), and admit.lua loads every library.
do
local OBSERVED = 64
local LAT_ALPHA = 0.2
-- The mean excess moves slowly: most calls write less than their reservation, and the
-- rare long answer should raise it for a while, not for one call.
local EXCESS_ALPHA = 0.05
local KIND_MAX = 32
local KIND_TTL = 86400000
-- a kind's percentile is trusted alone after this many outputs; before, the reservation
-- is the larger of it and the model's, so a kind's first short answers cannot undercut
local KIND_TRUST = 8

-- EWMA of `samples` in hash field h[f], O(1) per sample: each moves the estimate `alpha`
-- (default LAT_ALPHA) of the way towards it; the first replaces the prior, unless the
-- estimate starts from `start`.
local function observe_ewma(h, f, samples, alpha, start)
  if #samples == 0 then return end
  alpha = alpha or LAT_ALPHA
  local cur = tonumber(redis.call('HGET', h, f)) or start
  for _, x in ipairs(samples) do
    if cur then cur = cur + alpha * (x - cur) else cur = x end
  end
  redis.call('HSET', h, f, string.format('%.3f', cur))
end

-- A model's latency (ms): the mean of its calls' latencies in h[f] and the mean of each
-- call's distance from it, the mean deviation, in h[f .. 'd'] (from the second call on),
-- so that admission can judge a model by a likely latency and not only its mean
-- (lib/finish.lua). Each call weighs by how recent it is, not by its place in the order
-- the calls ended: its weight falls by e every LAT_MEMORY ms (the total in h[f .. 'w'] as
-- of h[f .. 't']). A model's calls end in order of their latency, so after a burst an
-- average by order (an EWMA per call: each one moves the estimate a fixed share) is the
-- mean of the burst's slowest calls: measured on W1's burst of 600 calls, the fastest
-- model's EWMA stood at 1.7-2.1 s against a mean of 0.7 s, which made it as fast as a
-- model three times slower and its calls late only at 4-5 s. Weighed by time, the calls
-- of one burst count alike, and a model's latency that changes is followed within about
-- LAT_MEMORY.
-- With a prior (`prior()`: the quota's expected latency in ms, or nil; read only while the
-- model has no estimate), the first estimate starts from it (and a deviation of half of
-- it), weighing as PRIOR_WEIGHT calls, rather than from the first call: the first calls to
-- end are the short ones (a long call is still running when they come back), so an
-- estimate that starts from them takes a slow model for a fast one until its long calls
-- end, and it is given calls that end last. Returns what it wrote of the mean and the
-- deviation ({mean, deviation} as text) when it wrote both.
local LAT_MEMORY = 30000
local PRIOR_WEIGHT = 4
function observe_latency(h, f, samples, prior)
  if #samples == 0 then return end
  local v = redis.call('HMGET', h, f, f .. 'd', f .. 'w', f .. 't')
  local cur, dev = tonumber(v[1]), tonumber(v[2])
  -- an estimate kept without a weight (set by hand, or by an older engine) weighs as a prior
  local w = 0
  if cur then
    w = (tonumber(v[3]) or PRIOR_WEIGHT)
        * math.exp(-math.max(0, NOW - (tonumber(v[4]) or NOW)) / LAT_MEMORY)
  elseif prior then
    local p = prior()
    if p then cur, dev, w = p, p / 2, PRIOR_WEIGHT end
  end
  for _, x in ipairs(samples) do
    w = w + 1
    if cur then
      local d = math.abs(x - cur)
      if dev then dev = dev + (d - dev) / w else dev = d end
      cur = cur + (x - cur) / w
    else
      cur = x
    end
  end
  local out = {f, string.format('%.3f', cur), f .. 'w', string.format('%.4f', w),
               f .. 't', int(NOW)}
  if dev then out[#out + 1], out[#out + 2] = f .. 'd', string.format('%.3f', dev) end
  redis.call('HSET', h, unpack(out))
  -- what h[f] and h[f .. 'd'] now hold (when both were written), as HMGET answers them
  if dev then return {out[2], out[#out]} end
end

-- The model's mean excess: by how many tokens its settled calls exceeded what they had
-- reserved (0 for a call within its reservation), an EWMA in K_EST '<model>|xs'; and its
-- largest lately, '<model>|xm' (excess_top in lib/prelude.lua: it halves as time passes,
-- and a larger one replaces it).
function observe_excess(m, excess)
  observe_ewma(K_EST, m .. '|xs', excess, EXCESS_ALPHA, 0)
  local top = 0
  for _, x in ipairs(excess) do top = math.max(top, x) end
  if top <= 0 then return end
  local h = redis.call('HMGET', K_EST, m .. '|xm', m .. '|xmt')
  if top > excess_top(tonumber(h[1]), tonumber(h[2])) then
    redis.call('HSET', K_EST, m .. '|xm', int(top), m .. '|xmt', int(NOW))
  end
end

-- A model's percentile is trusted alone after this many outputs; before, the estimate is
-- the larger of it and the quota's prior (expected_output_tokens). The first answers to
-- come back are the short ones (a long answer is still being written when they arrive),
-- so a percentile of the first few is low, and a burst admitted on it overruns the token
-- window once its long answers settle: the provider, counting their real tokens, refuses
-- a call the router had room for.
local OUTPUT_TRUST = 16

-- The output's tail, kept free in the token window (lib/capacity.lua): the provider
-- counts a call's real tokens from its send, so a call admitted into a window filled to
-- its limit is refused if its answer, or an answer in flight, runs past its reservation
-- by more than what is free. The overruns that matter are the rare long answers, which a
-- percentile of 64 cannot see; an LLM's output lengths are about lognormal, so the tail
-- is the mean of the log outputs plus TAIL_Z of their deviations (3.0: one call in about
-- 700 writes more). In a model of one model bound by its tokens for four windows
-- (coder's profile: 40,000 tpm, 800 output tokens a call, lognormal 0.6;
-- bench/token_tail.py, 4,000 drains): a 429 in 8.0 % of drains with only the largest
-- overrun lately kept free, 1.6 % with the tail, for 5 % fewer calls. Until OBSERVED
-- outputs were seen the sample is the short answers that came back first, so the tail is
-- at least TAIL_EARLY (lib/prelude.lua) times the estimate.
local TAIL_Z = 3.0

local function output_tail(seen, est)
  local n, sum, sq = #seen, 0, 0
  for k = 1, n do
    local x = math.log(math.max(1, seen[k]))
    sum, sq = sum + x, sq + x * x
  end
  local tail = 0
  if n >= 2 then
    local mean = sum / n
    tail = math.exp(mean + TAIL_Z * math.sqrt(math.max(0, (sq - n * mean * mean) / (n - 1))))
  end
  if n < OBSERVED then tail = math.max(tail, est * TAIL_EARLY) end
  return math.ceil(math.max(tail, est))
end

-- Push `outputs` to the list `key` (kept to about OBSERVED) and, if `recompute`, store its
-- 95th percentile in h[f] (the sort is the costly part: callers recompute on a cadence),
-- never below `prior()` (the quota's prior, or nil; called only then) while fewer than
-- OUTPUT_TRUST were seen, and its tail (output_tail) in h[f .. '|ot'].
function observe_p95(key, h, f, outputs, recompute, prior)
  if #outputs == 0 then return end
  if redis.call('LPUSH', key, unpack(outputs)) > OBSERVED + 16 then  -- trimmed every ~16
    redis.call('LTRIM', key, 0, OBSERVED - 1)
  end
  if not recompute then return end
  local seen = redis.call('LRANGE', key, 0, OBSERVED - 1)
  for k = 1, #seen do seen[k] = tonumber(seen[k]) end
  table.sort(seen)
  local p95 = seen[math.max(1, math.ceil(#seen * 0.95))]
  local floor = prior and #seen < OUTPUT_TRUST and prior()
  if floor then p95 = math.max(p95, floor) end
  redis.call('HSET', h, f, p95, f .. '|ot', output_tail(seen, p95))
end

-- After kind `new` first appears on model m: forget kinds unseen for KIND_TTL and, while
-- more than KIND_MAX remain, the least recently seen. Reads at most 4 x (KIND_MAX + 1)
-- fields, only when a kind is new.
local function kind_bound(m, new)
  local h = K_KIND(m)
  local raw = redis.call('HGETALL', h)
  local seen = {}
  for k = 1, #raw, 2 do
    local kind = string.match(raw[k], '^t|(.*)$')
    if kind and kind ~= new then seen[#seen + 1] = {kind, tonumber(raw[k + 1]) or 0} end
  end
  table.sort(seen, function(a, b) return a[2] < b[2] end)
  local drop = math.max(0, #seen + 1 - KIND_MAX)
  for k, e in ipairs(seen) do
    if k <= drop or NOW - e[2] > KIND_TTL then
      redis.call('HDEL', h, 'o|' .. e[1], 'l|' .. e[1], 'n|' .. e[1], 't|' .. e[1],
                 'w|' .. e[1])
    end
  end
end

-- Add `outputs` to the kind's recent outputs (h['w|' .. kind], kept to OBSERVED) and, if
-- `recompute`, store their 95th percentile in h['o|' .. kind].
local function kind_p95(h, kind, outputs, recompute)
  local f = 'w|' .. kind
  local seen = {}
  for k = #outputs, 1, -1 do seen[#seen + 1] = int(outputs[k]) end
  local cur = redis.call('HGET', h, f)
  if cur then
    for x in string.gmatch(cur, '%d+') do
      if #seen >= OBSERVED then break end
      seen[#seen + 1] = x
    end
  end
  while #seen > OBSERVED do seen[#seen] = nil end
  redis.call('HSET', h, f, table.concat(seen, ','))
  if not recompute then return end
  for k = 1, #seen do seen[k] = tonumber(seen[k]) end
  table.sort(seen)
  redis.call('HSET', h, 'o|' .. kind, seen[math.max(1, math.ceil(#seen * 0.95))])
end

-- Learn from one model's settled calls of one kind: outputs (tokens) and latencies (ms).
function kind_observe(m, kind, outputs, latencies)
  local h = K_KIND(m)
  if redis.call('HSET', h, 't|' .. kind, int(NOW)) == 1 then kind_bound(m, kind) end
  observe_ewma(h, 'l|' .. kind, latencies)
  if #outputs > 0 then
    local n = redis.call('HINCRBY', h, 'n|' .. kind, #outputs)
    local before = n - #outputs
    kind_p95(h, kind, outputs, before < 32 or math.floor(n / 8) > math.floor(before / 8))
  end
  redis.call('PEXPIRE', h, KIND_TTL)
end

-- The output tokens to reserve for a call of `kind` on model m whose model-wide estimate
-- is `est`: the kind's own percentile once trusted, else the larger of both. One HMGET
-- per (model, kind) per script call.
local KIND_EST = {}
function kind_estimate(m, est, kind)
  if not kind then return est end
  local id = m .. '|' .. kind
  local v = KIND_EST[id]
  if v == nil then
    local r = redis.call('HMGET', K_KIND(m), 'o|' .. kind, 'n|' .. kind, 't|' .. kind)
    local o, n, t = tonumber(r[1]), tonumber(r[2]) or 0, tonumber(r[3])
    v = false
    if o and t and NOW - t <= KIND_TTL then v = {o = o, n = n} end
    KIND_EST[id] = v
  end
  if not v then return est end
  if v.n >= KIND_TRUST then return v.o end
  return math.max(v.o, est)
end

-- Model m's kinds as {kind = {output_estimate, latency_ms, observed, seen_ms_ago}}, or nil
-- without any (for stats).
function kinds_of(m)
  local raw = redis.call('HGETALL', K_KIND(m))
  if #raw == 0 then return nil end
  local f = {}
  for k = 1, #raw, 2 do f[raw[k]] = raw[k + 1] end
  local out, any = {}, false
  for k = 1, #raw, 2 do
    local kind = string.match(raw[k], '^t|(.*)$')
    local t = kind and tonumber(raw[k + 1])
    if t and NOW - t <= KIND_TTL then
      out[kind] = {output_estimate = tonumber(f['o|' .. kind]),
                   latency_ms = tonumber(f['l|' .. kind]),
                   observed = tonumber(f['n|' .. kind]) or 0, seen_ms_ago = NOW - t}
      any = true
    end
  end
  if any then return out end
  return nil
end
end  -- of what this library keeps to itself
