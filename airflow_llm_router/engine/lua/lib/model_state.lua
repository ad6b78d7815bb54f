-- Per-model state, loaded at most once per script call and cached in STATE.
-- Loading reclaims expired leases (freeing their slot but keeping their window usage: the
-- provider may have served them) and trims the window log of entries older than
-- window + the model's guard (lib/guard.lua). Both steps touch at most BOUND entries;
-- leftovers only make the state more conservative until a later call trims them.
local STATE = {}

local function reclaim(m)
  local live = K_LIVE(m)
  local gone = redis.call('ZRANGEBYSCORE', live, '-inf', int(NOW), 'LIMIT', 0, BOUND)
  if #gone == 0 then return end
  local infos = redis.call('HMGET', K_LEASES, unpack(gone))
  for i, lid in ipairs(gone) do
    if infos[i] then
      local rec = lease_fields(infos[i])
      if rec.r and redis.call('HGET', K_REQUESTS, rec.r) == lid then
        redis.call('HDEL', K_REQUESTS, rec.r)
      end
    end
  end
  redis.call('ZREM', live, unpack(gone))
  redis.call('HDEL', K_LEASES, unpack(gone))
  budget_expire(gone, infos)  -- lib/budget.lua: an expired lease's spend stays its reservation
  redis.call('HINCRBY', K_STATS, m .. '|expired', #gone)
  RELEASED = true
end

-- The entry of a call in flight (sent: its score has the half of sent.lua; its lease live)
-- is not trimmed: the provider counts the call a window from when it reaches it, which can
-- be later than its send plus the guard (a loaded client, a provider or proxy with a
-- queue), and it reaches it before it answers. The entry moves to a window before now
-- instead, so it counts one guard more and is looked at again then; once the call is
-- answered, its receipt (lib/guard.lua) says how long it counts, or, without one, it
-- leaves at the next trim past its guard. An entry whose call was never sent is trimmed
-- as before: a send after that restores it (sent.lua).
local function trim(m, win_ms, guard_ms)
  local cutoff = NOW - win_ms - guard_ms
  local raw = redis.call('ZRANGEBYSCORE', K_WIN(m), '-inf', int(cutoff), 'WITHSCORES',
                         'LIMIT', 0, BOUND)
  if #raw == 0 then return end
  local old, sent = {}, {}
  for k = 1, #raw, 2 do
    if tonumber(raw[k + 1]) % 1 ~= 0 then sent[#sent + 1] = raw[k] else old[#old + 1] = raw[k] end
  end
  if #sent > 0 then
    local live = redis.call('ZMSCORE', K_LIVE(m), unpack(sent))
    local held = {}
    for i, lid in ipairs(sent) do
      if live[i] then
        held[#held + 1], held[#held + 2] = sent_score(NOW - win_ms), lid
      else
        old[#old + 1] = lid
      end
    end
    if #held > 0 then
      redis.call('ZADD', K_WIN(m), 'XX', unpack(held))
      redis.call('HINCRBY', K_STATS, m .. '|held_in_flight', #held / 2)
    end
  end
  if #old == 0 then return end
  local toks = redis.call('HMGET', K_WTOK(m), unpack(old))
  local ds, di, dout = 0, 0, 0
  for i = 1, #old do
    if toks[i] then
      local s, a, b = string.match(toks[i], '^(%d+):(%d+):(%d+)$')
      ds, di, dout = ds + tonumber(s), di + tonumber(a), dout + tonumber(b)
    end
  end
  redis.call('ZREM', K_WIN(m), unpack(old))
  redis.call('HDEL', K_WTOK(m), unpack(old))
  redis.call('HINCRBY', K_WTOK(m), '_s', int(-ds))
  redis.call('HINCRBY', K_WTOK(m), '_i', int(-di))
  redis.call('HINCRBY', K_WTOK(m), '_o', int(-dout))
end

-- Quotas (decoded when first used) and learned estimates, read per model as a call needs
-- them, so an admission on a list of models costs the same however many models the
-- namespace has: a model's quota with one HGET, its estimates with one HMGET (all the
-- fields of K_EST an admission reads, fetched on the first one asked: EST's metatable).
-- A call that needs every model's name (any model may be chosen) reads the names alone
-- and each model's learned latency (model_names).
local QUOTA, EST, NAMES = {}, {}, nil
local RECOVER_AT = tonumber(redis.call('GET', K_RECOVER))
do
  -- the fields of K_EST kept per model ('<model>' itself is its output estimate)
  local FIELDS = {'', '|lat', '|latd', '|xs', '|xm', '|xmt', '|ot'}
  setmetatable(EST, {__index = function(t, key)
    local m = string.match(key, '^[^|]*')
    local fields = {}
    for k, f in ipairs(FIELDS) do fields[k] = m .. f end
    local got = redis.call('HMGET', K_EST, unpack(fields))
    for k, f in ipairs(fields) do rawset(t, f, tonumber(got[k]) or false) end
    local v = rawget(t, key)
    if v == nil then  -- a field not kept per model: read alone
      v = tonumber(redis.call('HGET', K_EST, key)) or false
      rawset(t, key, v)
    end
    return v
  end})
end

-- The quota and output estimate of a model, {m, q, est}, or false without a quota.
local function model_view(m)
  local v = QUOTA[m]
  if v == nil and NAMES then return false end  -- every name was read: none for m
  if v == nil or v == 0 then  -- 0: named by model_names(), not read yet
    v = redis.call('HGET', K_QUOTAS, m) or false
    QUOTA[m] = v
  end
  if not v then return false end
  if type(v) == 'string' then
    local q = cjson.decode(v)
    local est = EST[m] or q.oprior or 256
    v = {m = m, q = q, est = est, xs = EST[m .. '|xs'] or 0,
         xm = excess_top(EST[m .. '|xm'], EST[m .. '|xmt']),
         ot = EST[m .. '|ot'] or TAIL_EARLY * est}
    QUOTA[m] = v
  end
  return v
end

-- Whether a model has a quota, without reading or decoding it.
local function model_known(m)
  if QUOTA[m] == nil then return model_view(m) and true or false end
  return QUOTA[m] and true or false
end

-- Every model with a quota (one HKEYS). A call that may choose any model weighs every
-- model's learned latency (finish-time choice): those two fields of each are read with
-- HMGETs of up to 1,000 fields, the rest of a model's estimates and its quota when used.
local function model_names()
  if NAMES then return NAMES end
  NAMES = redis.call('HKEYS', K_QUOTAS)
  local known = {}
  for _, m in ipairs(NAMES) do
    known[m] = true
    if QUOTA[m] == nil then QUOTA[m] = 0 end
  end
  for m in pairs(QUOTA) do
    if not known[m] then QUOTA[m] = nil end  -- HKEYS is the whole truth now
  end
  local fields = {}
  for k, m in ipairs(NAMES) do
    if rawget(EST, m .. '|lat') == nil then
      fields[#fields + 1], fields[#fields + 2] = m .. '|lat', m .. '|latd'
    end
    if #fields >= 1000 or (k == #NAMES and #fields > 0) then
      local got = redis.call('HMGET', K_EST, unpack(fields))
      for j, f in ipairs(fields) do rawset(EST, f, tonumber(got[j]) or false) end
      fields = {}
    end
  end
  return NAMES
end

-- A model with a quota whose keys the caller did not declare (its list of models is
-- stale: the model was added since it read it), or nil. A script that may touch every
-- model answers 'stale' before it writes anything; the client re-reads the list, retries.
local function undeclared_model()
  for _, m in ipairs(model_names()) do
    if not DECLARED[m] then return m end
  end
  return nil
end

-- Admissions' writes to their model's keys wait in st.pend until a read of those keys
-- needs them (model_flush) or the call ends: a batch then costs one ZADD per sorted set
-- and one HSET of window tokens per model, not five calls per admission.
local FLUSH_AT = 256  -- bounds the arguments of one call

local function model_flush(st)
  local p = st and st.pend
  if not p then return end
  st.pend = nil
  redis.call('ZADD', K_LIVE(st.m), unpack(p.live))
  redis.call('ZADD', K_WIN(st.m), unpack(p.win))
  local tok = p.tok
  tok[#tok + 1], tok[#tok + 2] = '_s', int(st.s)
  tok[#tok + 1], tok[#tok + 2] = '_i', int(st.i)
  tok[#tok + 1], tok[#tok + 2] = '_o', int(st.o)
  redis.call('HSET', K_WTOK(st.m), unpack(tok))
  redis.call('HINCRBY', K_STATS, st.m .. '|admitted', p.n)
end

-- Queue one admission's writes: its live lease, window entry and window tokens. The window
-- entry counts from `lead` ms after now: a call that reaches the backend through one more
-- hop (an HTTP caller, see admit.lua) is counted from when it may arrive, not from now.
local function model_add(st, lid, need, lead)
  local p = st.pend
  if not p then
    p = {live = {}, win = {}, tok = {}, n = 0}
    st.pend = p
  end
  local live, win, tok = p.live, p.win, p.tok
  live[#live + 1], live[#live + 2] = int(NOW + LEASE_TTL), lid
  win[#win + 1], win[#win + 2] = int(NOW + (lead or 0)), lid
  tok[#tok + 1], tok[#tok + 2] = lid, need.s .. ':' .. need.i .. ':' .. need.o
  p.n = p.n + 1
  if p.n >= FLUSH_AT then model_flush(st) end
end

-- Returns the model's state table, or false when the model has no quota.
local function load_model(m)
  local st = STATE[m]
  if st ~= nil then return st end
  local view = model_view(m)
  if not view then
    STATE[m] = false
    return false
  end
  st = {m = m, q = view.q, est = view.est, xs = view.xs, xm = view.xm, ot = view.ot}
  local h = redis.call('HMGET', K_HEALTH, m .. '|cool', m .. '|open', m .. '|probe',
                       m .. '|eff', m .. '|eff_t', m .. '|eff_n', m .. '|ann', m .. '|ann_t',
                       m .. '|guard', m .. '|guard_t')
  st.cool, st.open, st.probe = tonumber(h[1]) or 0, tonumber(h[2]) or 0, h[3]
  -- the limits admission holds it to: the quota, scaled by the learned share
  st.share = eff_share(view.q, tonumber(h[4]), tonumber(h[5]) or 0, tonumber(h[6]),
                       h[7], tonumber(h[8]))
  st.guard = guard_of(view.q, tonumber(h[9]), tonumber(h[10]))
  -- after Redis lost its data, the calls sent just before are unknown: one window + guard
  -- at the recovery share (0: none) keeps every window within the target
  local base = guard_base(view.q)
  if RECOVER_AT and NOW < RECOVER_AT + view.q.win + base then
    st.recover_until = RECOVER_AT + view.q.win + base
    st.share = math.min(st.share, RECOVERY_SHARE)
  end
  st.q = eff_quota(view.q, st.share)
  reclaim(m)
  trim(m, view.q.win, st.guard)
  st.n = redis.call('ZCARD', K_WIN(m))
  local tot = redis.call('HMGET', K_WTOK(m), '_s', '_i', '_o')
  st.s, st.i, st.o = tonumber(tot[1]) or 0, tonumber(tot[2]) or 0, tonumber(tot[3]) or 0
  st.live = redis.call('ZCARD', K_LIVE(m))
  STATE[m] = st
  return st
end
