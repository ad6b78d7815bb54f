-- The queue of waiting requests, so that no prompt is passed forever. Rank: hot requests
-- ahead of bulk ones (HOT_AHEAD ms of rank), then by when they first waited. A waiter ranked
-- ahead of a request holds back, on each model it allows, the capacity it needs, when it is
-- hot and the request is bulk, or when it has waited STARVE ms or more. A waiter that does
-- not come back before its deadline (retry wait + WAITER_TTL ms) drops out.
local HOT_AHEAD = 1e13
local WAIT_SCAN = 32
local QUEUE = nil

local function waiters_load()
  if QUEUE then return QUEUE end
  QUEUE = {}
  -- An empty queue (the common case under capacity) costs this one call: the deadlines
  -- hold queued requests only (waiter_add, waiter_remove and cancel.lua change the three
  -- keys together), so there are none to drop.
  local top = redis.call('ZRANGE', K_WAITERS, 0, WAIT_SCAN - 1, 'WITHSCORES')
  if #top == 0 then return QUEUE end
  local dead = redis.call('ZRANGEBYSCORE', K_WAIT_DEADLINES, '-inf', int(NOW), 'LIMIT', 0, BOUND)
  if #dead > 0 then
    redis.call('ZREM', K_WAITERS, unpack(dead))
    redis.call('ZREM', K_WAIT_DEADLINES, unpack(dead))
    redis.call('HDEL', K_WAIT_INFO, unpack(dead))
    top = redis.call('ZRANGE', K_WAITERS, 0, WAIT_SCAN - 1, 'WITHSCORES')
    if #top == 0 then return QUEUE end
  end
  local ids = {}
  for k = 1, #top, 2 do ids[#ids + 1] = top[k] end
  local infos = redis.call('HMGET', K_WAIT_INFO, unpack(ids))
  for k, rid in ipairs(ids) do
    if infos[k] then
      local w = cjson.decode(infos[k])
      w.rid, w.rank = rid, tonumber(top[2 * k])
      if w.ms then
        local allow = {}
        for _, m in ipairs(w.ms) do allow[m] = true end
        w.allow = allow
      end
      QUEUE[#QUEUE + 1] = w
      -- whether any waiter may hold capacity back (held_back): hot, or starved
      if w.h or NOW - w.f >= STARVE then QUEUE.holds = true end
    end
  end
  return QUEUE
end

-- The rank a request has (or would have) in the queue, and whether it is queued. With an
-- empty queue (the common case under capacity) this costs no call.
local function waiter_rank(rid, hot)
  local r = false
  if #waiters_load() > 0 then r = redis.call('ZSCORE', K_WAITERS, rid) end
  if r then return tonumber(r), true end
  if hot then return NOW, false end
  return NOW + HOT_AHEAD, false
end

-- Capacity on model m held back for waiters ranked ahead of `rank`. What hot waiters hold
-- back from a bulk request is bounded by HOT_SHARE of the model's limits (calls: of the
-- smaller of rpm and max_concurrency, rounded up; the first hot waiter always counts), so
-- bulk work keeps the rest however many hot requests wait: a bounded bypass. Waiters that
-- have starved (STARVE ms) hold back what they need, unbounded.
local function held_back(m, rank, rid, hot)
  local res = {n = 0, s = 0, i = 0, o = 0}
  -- with only bulk waiters that have not starved (a drain's usual queue), nothing is held
  -- back: the loop below would find so for every waiter and model it is asked for
  if not waiters_load().holds then return res end
  local st = STATE[m]
  local q = st.q
  local cap_n = math.ceil(HOT_SHARE * math.min(q.rpm, q.conc))
  local hn, hs = 0, 0
  for _, w in ipairs(waiters_load()) do
    if w.rank >= rank then break end
    if not w.done and w.rid ~= rid and (not w.allow or w.allow[m]) then
      local starved = NOW - w.f >= STARVE
      local need = nil
      if starved then
        need = need_for(st, w)
      elseif w.h and not hot then
        need = need_for(st, w)
        if hn > 0 and (hn + 1 > cap_n or hs + need.s > HOT_SHARE * q.tpm) then
          need = nil
        else
          hn, hs = hn + 1, hs + need.s
        end
      end
      if need then
        res.n, res.s, res.i, res.o = res.n + 1, res.s + need.s, res.i + need.i, res.o + need.o
      end
    end
  end
  return res
end

local function waiter_add(rid, rank, req, wait_ms)
  local first = rank
  if not req.hot then first = rank - HOT_AHEAD end
  local info = {f = first, h = req.hot, s = req.s, i = req.i, o = req.o, ms = req.ms, k = req.k}
  redis.call('ZADD', K_WAITERS, 'NX', int(rank), rid)
  redis.call('HSET', K_WAIT_INFO, rid, cjson.encode(info))
  redis.call('ZADD', K_WAIT_DEADLINES, int(NOW + wait_ms + WAITER_TTL), rid)
end

local function waiter_remove(rid)
  redis.call('ZREM', K_WAITERS, rid)
  redis.call('ZREM', K_WAIT_DEADLINES, rid)
  redis.call('HDEL', K_WAIT_INFO, rid)
  for _, w in ipairs(QUEUE or {}) do
    if w.rid == rid then w.done = true end
  end
end
