-- admit: decide a batch of requests in one call; each is admitted (a lease is reserved on
-- one model) or told how long to wait, or rejected when no allowed model could ever take it.
-- ARGV[2]: JSON [[request id, hot 0/1, tokens, input tokens, output tokens, ordered 0/1,
--                [models] or 0 for any, kind (optional, null), on budget 1: wait (optional:
--                over its budget, an ordered request's model is not passed: lib/budget.lua),
--                hop ms (optional: the call may reach the backend this long after its
--                admission, beyond the guard: its window entry counts from then),
--                hedges 1 (optional: the caller hedges late calls: lib/finish.lua)
--               ], ...]  (tokens are estimates
--                until complete; tokens and output -1: input + the chosen model's learned
--                output, for the kind if given; the lease records the kind: lib/kinds.lua)
-- Reply per request: {'A', model, lease id, ttl ms, reused 0/1, late after ms (-1: unknown;
-- lib/finish.lua)} | {'W', wait ms, reason}
--                    | {'E', reason, model or ''}
--                    | {'S', model}: nothing decided, a request may go to any model and
--                      this model's keys were not declared (retry it declaring them)
-- then, when a request may go to any model: {'H', model, ...}: the head of the order such
-- requests try the models in (lib/anyorder.lua), the models to declare for the next ones.
-- An any-model request answers 'S' alone when it would try a model past the declared
-- head (a caller that hedges late calls reads the same index: lib/anyorder.lua).
local reqs = cjson.decode(ARGV[2])

-- This call's new leases and request ids, written with one HSET each at the end.
local NEW_LEASES, NEW_RIDS, ADMITTED = {}, {}, {}
-- Requests told to wait, by the model whose wait they were given: counted once per call.
local WAITED = {}
-- Lease numbers come from K_SEQ in one block per call: LEFT is how many requests of the
-- call are still undecided, so the block never runs short. (One table for the block's
-- ends: the scripts share Lua's 200 locals of one chunk.)
local SEQ, LEFT = {next = 1, last = 0}, 0

local function next_lease_no()
  if SEQ.next > SEQ.last then
    SEQ.last = redis.call('INCRBY', K_SEQ, LEFT)
    SEQ.next = SEQ.last - LEFT + 1
  end
  SEQ.next = SEQ.next + 1
  return SEQ.next - 1
end

local function reuse(req)
  local lid = ADMITTED[req.rid]
  if lid then
    local m = split_model(lid)
    return {'A', m, lid, LEASE_TTL, 1, late_after(m)}
  end
  lid = redis.call('HGET', K_REQUESTS, req.rid)
  if not lid then return nil end
  local m = split_model(lid)
  -- a lease on a model the caller did not declare (not among the request's models now)
  -- is not handed out again: the request gets a lease on a model it allows (for a request
  -- that may take any model: it goes stale, naming the model, to find the lease again)
  if not DECLARED[m] then return nil, m end
  local exp = redis.call('ZSCORE', K_LIVE(m), lid)
  if not exp or tonumber(exp) <= NOW then return nil end
  return {'A', m, lid, tonumber(exp) - NOW, 1, late_after(m)}
end

local function reserve(st, req)
  local need = need_for(st, req)
  local lid = st.m .. '#' .. next_lease_no()
  local probe = 0
  if st.open > 0 then
    probe = 1
    st.probe = lid
    redis.call('HSET', K_HEALTH, st.m .. '|probe', lid)
  end
  st.n, st.s, st.i, st.o = st.n + 1, st.s + need.s, st.i + need.i, st.o + need.o
  st.live = st.live + 1
  st.head, st.slot = nil, nil
  model_add(st, lid, need, req.lead)
  local cost = budget_reserve(st.m, model_view(st.m).q, need)  -- lib/budget.lua
  NEW_LEASES[#NEW_LEASES + 1] = lid
  NEW_LEASES[#NEW_LEASES + 1] = lease_record(NOW, probe, req.rid, req.k, cost)
  NEW_RIDS[#NEW_RIDS + 1], NEW_RIDS[#NEW_RIDS + 2] = req.rid, lid
  ADMITTED[req.rid] = lid
  return lid
end

-- Admit on a model with room: its lease, its fair share charged (where the engine chose)
-- and the request out of the wait queue.
local function take(st, req, fair, queued)
  local lid = reserve(st, req)
  if fair then fair_charge(st.m, st.q.w) end
  if queued then waiter_remove(req.rid) end
  return {'A', st.m, lid, LEASE_TTL, 0, late_after(st.m)}
end

-- Try the allowed models in fair-share order (or the caller's order) and admit on the
-- first that has room (in the caller's order, the first below its overflow threshold
-- with room, else the first with room: lib/capacity.lua's over_threshold); where the
-- engine chooses and every candidate's latency is known, in order of likely latency
-- instead (equally fast ones by weight), waiting for a faster model that would finish the
-- request sooner than a slower one with room (lib/finish.lua): a model's room is used
-- whenever using it does not make the request, and so the backlog, finish later. A
-- model's state is loaded only when it is tried, so an admission usually touches one
-- model however many there are.
local function decide(req)
  local again, away = reuse(req)
  if again then return again end
  -- an any-model request reads its candidates from the head of the index
  -- (lib/anyorder.lua), in the order for a caller that hedges late calls if it does
  local walk, count, names, lat, mean, group = nil, nil, req.ms, nil, nil, nil
  local function stale(m, k)
    ANYORDER.depth = math.max(ANYORDER.depth, k)
    return {'S', m}
  end
  if not req.ms then
    ANYORDER.n = ANYORDER.n + 1
    ANYORDER.hedge = req.hedge  -- the head named is in the order the last one tried
    if away then return stale(away, 0) end
    walk, lat, mean, group, count = ANYORDER.walk(req.hedge)
  else
    count = #names
  end
  if count == 0 then return {'E', 'no_models', ''} end
  if req.ms then
    for _, m in ipairs(names) do
      if not model_view(m) then return {'E', 'unknown_model', m} end
    end
  end
  local fair = not (req.ordered and req.ms)
  -- an ordered list's comparison of its models' likely finishes (lib/listed.lua)
  local hold = nil
  if not fair then hold = listed_start(req, names) end
  local order = nil
  if fair and not walk then order, lat, mean, group = finish_order(names, req.hedge) end
  -- the fair share's pool (next_fair takes from it), when it decides alone
  local pool = {}
  if fair and not order and not walk then
    for k, m in ipairs(names) do pool[k] = m end
  end
  -- soonest: the earliest likely finish (ms from now) among the models tried
  local rank, queued, best, reason, on = nil, false, nil, nil, nil
  local soonest, soon_m = nil, nil
  local why, tried = {}, 0
  -- an ordered list's first model with room but at or over its overflow threshold: taken
  -- only if no later model below its own threshold has room (nor an earlier one below
  -- its threshold would finish the request sooner: then `held`, lib/listed.lua)
  local spill, held = nil, nil
  for k = 1, count do
    local m = names and names[k]
    local passed = false
    if walk then
      m = walk()
      if not m then break end
      ANYORDER.depth = math.max(ANYORDER.depth, k)
    elseif order then
      m = order[k]
    elseif fair then
      m = next_fair(pool)
    end
    if lat and soon_m then
      -- even with room now its group would end later; so would the groups after it
      local bar = finish_bar(group[m], soonest, soon_m, lat, group)
      if group[m] >= bar then break end
      -- a member slower than its group's fastest may end later on its own
      passed = lat[m] >= bar
    end
    if not passed and not DECLARED[m] then return stale(m, k) end
    if not passed then
      local view = model_view(m)
      local est = need_for(view, req)
      local bad = never_fits(view, est) or budget_never(m, view.q, est)
      if bad then
        why[bad] = m
        redis.call('HINCRBY', K_STATS, m .. '|rejected', 1)
      else
        tried = tried + 1
        local st = load_model(m)
        if not rank then rank, queued = waiter_rank(req.rid, req.hot) end
        local need = need_for(st, req)
        local wait, w = blocked(st, need,
                                function() return held_back(m, rank, req.rid, req.hot) end)
        if wait == 0 then wait, w = budget_wait(m, view.q, need) end
        if wait == 0 and (fair or not over_threshold(st)) then
          local for_m, hw, hr = listed_holds(hold, m)
          if not for_m then return take(st, req, fair, queued) end
          held = {for_m, hw, hr}
          break
        end
        if wait == 0 then
          if not spill then
            spill = st
            local for_m, hw, hr = listed_holds(hold, m)
            if for_m then held = {for_m, hw, hr} end
          end
        else
          if not best or wait < best then best, reason, on = wait, w, m end
          listed_note(hold, st, wait, w, req, rank, queued)
        end
        if lat then
          local fin = likely_wait(st, wait, w, req, rank, queued, mean[m])
          -- a request that waits is served no sooner than the backlog ahead of it
          -- (lib/finish.lua)
          fin = math.max(fin, backlog_horizon())
          fin = fin + lat[m]
          if not soonest or fin < soonest then soonest, soon_m = fin, m end
        end
        if w == 'budget' and req.bw and not fair then break end
      end
    end
  end
  if held then
    -- a listed request held for an earlier model that would likely finish it sooner
    best, on, reason = held[2], held[1], held[3]
    soon_m = on
  elseif spill then
    return take(spill, req, fair, queued)
  end
  if tried == 0 then
    if why.too_large then return {'E', 'too_large', why.too_large} end
    if why.too_costly then return {'E', 'too_costly', why.too_costly} end
    return {'E', 'all_disabled', ''}
  end
  WAITED[on] = (WAITED[on] or 0) + 1
  waiter_add(req.rid, rank, finish_waits_for(req, soon_m), best)
  return {'W', best, reason}
end

local out = {}
for k, r in ipairs(reqs) do
  local ms = nil
  if type(r[7]) == 'table' then ms = r[7] end
  LEFT = #reqs - k + 1
  local kind = nil
  if type(r[8]) == 'string' then kind = r[8] end
  out[k] = decide({rid = r[1], hot = r[2] == 1, s = r[3], i = r[4], o = r[5],
                   ordered = r[6] == 1, ms = ms, k = kind, bw = r[9] == 1,
                   lead = tonumber(r[10]) or 0, hedge = r[11] == 1})
end
for _, st in pairs(STATE) do model_flush(st) end
for m, n in pairs(WAITED) do redis.call('HINCRBY', K_STATS, m .. '|waited', n) end
history_admitted(STATE, ADMITTED, model_view)
budget_flush()
if #NEW_LEASES > 0 then
  redis.call('HSET', K_LEASES, unpack(NEW_LEASES))
  redis.call('HSET', K_REQUESTS, unpack(NEW_RIDS))
end
fair_save()
if ANYORDER.n > 0 then
  -- the head for the next call: as deep as this call's requests went, and a margin for
  -- what other callers admit meanwhile (lib/anyorder.lua)
  local depth = math.min(256, 16 + 2 * ANYORDER.n + 2 * ANYORDER.depth)
  out[#out + 1] = {'H', unpack(ANYORDER.head(depth, ANYORDER.hedge))}
end
if RELEASED then notify('*') end
return out
