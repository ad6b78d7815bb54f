-- Weighted fair share between admissible models: start-time fair queueing, the virtual
-- time form of weighted deficit round robin. Each model keeps a finish tag F; a request
-- goes to the admissible model with the smallest start tag max(F, V), which then advances
-- by 1 / weight. A model that was full or idle restarts at V: it gets its share, never a
-- catch-up burst. Tags are cached in FAIR for the call and written back once.
local FAIR = nil

-- `names`: the models the call asks about first. A short list reads their tags alone
-- (HMGET), so a request for a few models costs the same however many the namespace has;
-- otherwise every tag is read at once. A tag not read yet is read when first asked.
local function fair_load(names)
  if FAIR then return FAIR end
  FAIR = {tags = {}, changed = {}}
  local tags = FAIR.tags
  if names and #names <= 64 then
    local got = redis.call('HMGET', K_FAIR, '_V', unpack(names))
    FAIR.v = tonumber(got[1]) or 0
    for k, m in ipairs(names) do tags[m] = tonumber(got[k + 1]) or false end
    setmetatable(tags, {__index = function(t, m)
      local v = tonumber(redis.call('HGET', K_FAIR, m)) or false
      rawset(t, m, v)
      return v
    end})
  else
    local raw = redis.call('HGETALL', K_FAIR)
    for k = 1, #raw, 2 do tags[raw[k]] = tonumber(raw[k + 1]) end
    FAIR.v = tags['_V'] or 0
  end
  return FAIR
end

-- Take the model with the smallest start tag out of `pool` (ties by name).
local function next_fair(pool)
  local f = fair_load(pool)
  local bi, bs = nil, nil
  for i, m in ipairs(pool) do
    local s = math.max(f.tags[m] or 0, f.v)
    if not bi or s < bs or (s == bs and m < pool[bi]) then bi, bs = i, s end
  end
  local m = pool[bi]
  pool[bi] = pool[#pool]
  pool[#pool] = nil
  return m
end

local function fair_charge(m, weight)
  local f = fair_load({m})
  local start = math.max(f.tags[m] or 0, f.v)
  f.v = start
  f.tags[m] = start + 1 / weight
  f.changed[m] = true
  -- the fair order any-model requests read (lib/speed.lua), at once: a later request of
  -- this call reads it from Redis
  SPEED.fairq(m, f.tags[m])
end

local function fair_save()
  if not (FAIR and next(FAIR.changed)) then return end
  local args = {}
  for m in pairs(FAIR.changed) do
    args[#args + 1] = m
    args[#args + 1] = string.format('%.17g', FAIR.tags[m])
  end
  args[#args + 1] = '_V'
  args[#args + 1] = string.format('%.17g', FAIR.v)
  redis.call('HSET', K_FAIR, unpack(args))
end
