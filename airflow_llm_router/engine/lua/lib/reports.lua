-- The drains' backlog reports (K_BACKLOG: source -> "<tasks>:<until ms>", backlog.lua):
-- the tasks of the live ones and how many are live; with `drop`, the lapsed ones are
-- deleted (the report script does it; admission only reads).
local function backlog_reports(drop)
  local raw, tasks, live = redis.call('HGETALL', K_BACKLOG), 0, 0
  for k = 1, #raw, 2 do
    local n, until_ms = string.match(raw[k + 1], '^(%d+):(%d+)$')
    if n and tonumber(until_ms) > NOW then
      tasks, live = tasks + tonumber(n), live + 1
    elseif drop then
      redis.call('HDEL', K_BACKLOG, raw[k])
    end
  end
  return tasks, live
end
