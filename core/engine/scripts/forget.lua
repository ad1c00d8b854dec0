-- Forget one worker (the console's "forget a lost worker", a worker's clean exit).
-- KEYS: 1 workers, 2 seen, 3 the worker's command list, 4 summaries, 5 states, 6 totals,
--       7 names (see heartbeat.lua)
-- ARGV: 1 worker id
-- Returns: 1 if the worker was known.
local workers, seen, summaries, states, totals, names =
  KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id = ARGV[1]

local function bump(field, by)
  if by ~= 0 and redis.call('HINCRBY', totals, field, by) == 0 then
    redis.call('HDEL', totals, field)
  end
end

-- take away what the worker's summary counts in the totals (as heartbeat.lua adds it)
local summary = redis.call('HGET', summaries, id)
if summary then
  local status, busy, rest = string.match(summary, '^(%S+) (%d+)(.*)$')
  if status and status ~= 'stopped' then
    bump('busy', -tonumber(busy))
    for q, n in string.gmatch(rest, ' ([^ =]+)=(%d+)') do
      bump('t:' .. q, -tonumber(n))
      if status == 'paused' then bump('p:' .. q, -tonumber(n)) end
    end
  end
end
redis.call('DEL', KEYS[3])
redis.call('ZREM', seen, id)
redis.call('ZREM', states, id)
redis.call('ZREM', names, id)
local known = redis.call('HDEL', summaries, id)
return math.max(known, redis.call('HDEL', workers, id))
