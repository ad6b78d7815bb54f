-- Preferences that pay: a request with an ordered list (admit.lua's listed path) is held
-- (told to wait) while an earlier model of its list is expected to finish it sooner than
-- the later model that has room now. A later model takes it only while every earlier one
-- cannot (full, or at or over its overflow threshold) *and* waiting for the earlier one
-- would finish it later: the rule the preference-keeping reference keeps
-- (llm_router_devkit.yardstick, reference.py's `held`). The greedy rule (the first model
-- of the list with room, never holding) sent W2's reasoning prompts to reasoner-large,
-- twice as slow as reasoner-small which freed a few seconds later, and its calls sent
-- late ended the run.
-- The estimate is the any-model choice's (lib/finish.lua), its queue restricted to the
-- model: an earlier model's likely finish is its likely wait, at least the backlog's
-- horizon, plus its likely latency; a later model with room finishes in its likely
-- latency. Between equally fast models waiting must save more than one call of the
-- earlier (finish_bar). The likely wait counts only the waiters ahead that wait for that
-- model (queued for it: lib/waiters.lua), not every waiter ahead as the any-model choice
-- does: in W2's drain, hundreds of any-model requests queued for the fast models made
-- reasoner-small's next slot look minutes away, and the reasoning prompts went on to
-- reasoner-large, twice as slow. Without a latency for every model of the list (nothing
-- learned, no prior) nothing is held: the list is tried in order, as before.
-- Holding cannot starve a request: it is held only while the earlier model's likely
-- finish is sooner, re-judged at every retry, and it waits queued for that model alone
-- (finish_waits_for): once it has waited `starve_ms` it holds that model's capacity back
-- from the requests ranked behind it (lib/waiters.lua), so it is served there.
local listed_start, listed_note, listed_holds
do
-- What an ordered request's admission compares, or nil when nothing is held: fewer than
-- two models, or one of them without a latency estimate. finish_order gives the list's
-- likely (hedged, for a caller that hedges) and mean latencies and groups; its order is
-- not read: the list keeps the caller's order.
function listed_start(req, names)
  if not req.ordered or #names < 2 then return nil end
  local _, lat, mean, group = finish_order(names, req.hedge)
  if not lat then return nil end
  return {lat = lat, mean = mean, group = group}
end

-- The first QUEUE_SCAN waiters' ranks, by the model each waits for ('*': any model),
-- read once per script call when a listed request first needs them (BOUND: a call's
-- cost does not grow with the queue).
local QUEUE_SCAN = BOUND
local FOR = nil
local function queued_for()
  if FOR then return FOR end
  FOR = {['*'] = {}}
  local top = redis.call('ZRANGE', K_WAITERS, 0, QUEUE_SCAN - 1, 'WITHSCORES')
  if #top == 0 then return FOR end
  local ids = {}
  for k = 1, #top, 2 do ids[#ids + 1] = top[k] end
  local infos = redis.call('HMGET', K_WAIT_INFO, unpack(ids))
  for k = 1, #ids do
    if infos[k] then
      local rank, ms = tonumber(top[2 * k]), cjson.decode(infos[k]).ms
      if type(ms) ~= 'table' then ms = {'*'} end
      for _, m in ipairs(ms) do
        FOR[m] = FOR[m] or {}
        FOR[m][#FOR[m] + 1] = rank
      end
    end
  end
  return FOR
end

-- How many waiters ranked ahead of `rank` wait for m (or for any model); a request not
-- queued yet comes after those of its rank.
local function ahead_on(m, rank, queued)
  local n, f = 0, queued_for()
  for _, list in ipairs({f[m] or {}, f['*']}) do
    for _, r in ipairs(list) do
      if r < rank or (r == rank and not queued) then n = n + 1 end
    end
  end
  return n
end

-- How long a listed request would likely wait for m (ms), from blocked()'s wait and
-- reason: the waiters ahead of it for m are served first, a concurrency slot freeing
-- every mean latency over max_concurrency, a window's calls every window.
local function listed_wait(st, wait, reason, req, rank, queued, mean)
  local ahead = ahead_on(st.m, rank, queued)
  if reason == 'concurrency' then return (ahead + 1) * mean / st.q.conc end
  if reason == 'rpm' or reason == 'tpm' then
    local per_win = math.min(st.q.rpm, st.q.tpm / math.max(1, need_for(st, req).s))
    return wait + ahead * st.q.win / math.max(1, per_win)
  end
  return wait
end

-- Note an earlier model that cannot take the request now (wait ms, for `reason`; `st`
-- loaded): its likely finish, if it is below its overflow threshold (a model at or over
-- it lets the list overflow: holding for it would undo the threshold).
function listed_note(h, st, wait, reason, req, rank, queued)
  if not h or over_threshold(st) then return end
  local m = st.m
  local fin = listed_wait(st, wait, reason, req, rank, queued, h.mean[m])
  fin = math.max(fin, backlog_horizon()) + h.lat[m]
  if not h.soonest or fin < h.soonest then
    h.soonest, h.soon_m, h.wait, h.why = fin, m, wait, reason
  end
end

-- Whether the request is held rather than admitted on m (a model with room, later in the
-- list than every model noted): an earlier model would likely finish it sooner. Returns
-- the model held for, its wait (ms) and reason, or nil.
function listed_holds(h, m)
  if not h or not h.soonest then return nil end
  if h.lat[m] < finish_bar(h.group[m], h.soonest, h.soon_m, h.lat, h.group) then
    return nil
  end
  return h.soon_m, h.wait, h.why
end
end  -- of what this library keeps to itself
