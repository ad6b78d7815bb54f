-- history: the traffic buckets of some models (written by lib/history.lua) over the last
-- ARGV[3] ms, in no order. Read-only.
-- ARGV[2]: JSON [model, ...] (the caller bounds how many per call: each costs one HGETALL
-- of at most HIST_KEEP fields).
-- Reply: {now ms, bucket ms, kept buckets, {field name, ...},
--         {model, {bucket number, "v1,v2,...", ...}, ...}}  (values in field order, -1:
--         not recorded in that bucket; a bucket starts at its number x bucket ms)
-- the names of a bucket's values, in the order lib/history.lua writes them
local FIELDS = {'admitted', 'requests', 'tokens', 'in_flight', 'rate_limited', 'errors',
                'breaker_opened', 'rpm', 'tpm', 'max_concurrency', 'eff_rpm', 'eff_tpm',
                'eff_max_concurrency', 'window_ms'}
local names = cjson.decode(ARGV[2])
local span = math.min(tonumber(ARGV[3]) or 0, HIST_KEEP * HIST_BUCKET_MS)
local first = math.floor((NOW - span) / HIST_BUCKET_MS) + 1
local out = {}
for _, m in ipairs(names) do
  local raw = redis.call('HGETALL', K_HIST(m))
  local rows = {}
  for k = 1, #raw, 2 do
    local b = tonumber(raw[k])
    if b and b >= first then
      rows[#rows + 1] = b
      rows[#rows + 1] = raw[k + 1]
    end
  end
  out[#out + 1] = m
  out[#out + 1] = rows
end
return {NOW, HIST_BUCKET_MS, HIST_KEEP, FIELDS, out}
