-- Preferences that pay: a request with an ordered list (admit.lua's listed path) is held
-- (told to wait) while an earlier model of its list is expected to finish it sooner than
-- the later model that has room now. A later model takes it only while every earlier one
-- cannot (full, or at or over its overflow threshold) *and* waiting for the earlier one
-- would finish it later: the rule the preference-keeping reference keeps
-- (llm_router_devkit.yardstick, reference.py's `held`). The greedy rule (the first model
-- of the list with room, never holding) sent W2's reasoning prompts to reasoner-large,
-- twice as slow as reasoner-small which freed a few seconds later, and its calls sent
-- late ended the run.
-- The estimate is the any-model choice's (lib/finish.lua): an earlier model's likely
-- finish is its likely wait (the window's own wait, or the waiters ahead for a
-- concurrency wait), at least the backlog's horizon, plus its likely latency; a later
-- model with room finishes in its likely latency. Between equally fast models waiting
-- must save more than one call of the earlier (finish_bar). Without a latency for every
-- model of the list (nothing learned, no prior) nothing is held: the list is tried in
-- order, as before.
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

-- Note an earlier model that cannot take the request now (wait ms, for `reason`; `st`
-- loaded): its likely finish, if it is below its overflow threshold (a model at or over
-- it lets the list overflow: holding for it would undo the threshold).
function listed_note(h, st, wait, reason, req, rank, queued)
  if not h or over_threshold(st) then return end
  local m = st.m
  local fin = likely_wait(st, wait, reason, req, rank, queued, h.mean[m])
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
