-- Store a worker's heartbeat and its summary; forget workers silent past the retention.
-- KEYS: 1 workers (hash id -> heartbeat JSON), 2 seen (zset id -> last report ms),
--       3 summaries (hash id -> 'status busy queue=threads ...', see core/engine/workers.py),
--       4 states (zset id -> band of the status * 1e13 + last report ms),
--       5 totals (hash 'busy' and 't:<queue>' summed over the workers not stopped, and
--         'p:<queue>': the threads of those paused),
--       6 names (zset id -> 0: every worker, in name order)
-- ARGV: 1 worker id, 2 heartbeat JSON, 3 retention ms, 4 summary
-- Returns: the ids forgotten now (for the event log).
local workers, seen, summaries, states, totals, names =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local BAND = 10000000000000  -- 1e13 ms (year 2286) per status: a band's range is its workers
local BANDS = {other = 0, running = 1, paused = 2, stopping = 3, stopped = 4}

local function bump(field, by)
  if by ~= 0 and redis.call('HINCRBY', totals, field, by) == 0 then
    redis.call('HDEL', totals, field)
  end
end

-- add (sign 1) or take away (-1) what a summary counts in the totals
local function count(summary, sign)
  if not summary then return end
  local status, busy, rest = string.match(summary, '^(%S+) (%d+)(.*)$')
  if not status or status == 'stopped' then return end
  bump('busy', sign * tonumber(busy))
  for q, n in string.gmatch(rest, ' ([^ =]+)=(%d+)') do
    bump('t:' .. q, sign * tonumber(n))
    if status == 'paused' then bump('p:' .. q, sign * tonumber(n)) end
  end
end

local function drop(id)
  count(redis.call('HGET', summaries, id), -1)
  redis.call('HDEL', workers, id)
  redis.call('ZREM', seen, id)
  redis.call('HDEL', summaries, id)
  redis.call('ZREM', states, id)
  redis.call('ZREM', names, id)
end

local now = now_ms()
local id, summary = ARGV[1], ARGV[4]
redis.call('HSET', workers, id, ARGV[2])
redis.call('ZADD', seen, now, id)
local old = redis.call('HGET', summaries, id)
if old ~= summary then
  local was, was_busy, was_rest = string.match(old or '', '^(%S+) (%d+)(.*)$')
  local is, is_busy, is_rest = string.match(summary, '^(%S+) (%d+)(.*)$')
  if was and was == is and was_rest == is_rest then  -- the usual change: busy threads
    if is ~= 'stopped' then bump('busy', tonumber(is_busy) - tonumber(was_busy)) end
  else
    count(old, -1)
    count(summary, 1)
  end
  redis.call('HSET', summaries, id, summary)
  if not old then redis.call('ZADD', names, 0, id) end
end
local band = BANDS[string.match(summary, '^%S+') or ''] or 0
redis.call('ZADD', states, string.format('%.0f', band * BAND + now), id)

local cutoff = now - tonumber(ARGV[3])
local gone = redis.call('ZRANGEBYSCORE', seen, '-inf', cutoff, 'LIMIT', 0, 100)
for _, old_id in ipairs(gone) do drop(old_id) end
-- summaries of workers an older ztq forgot (its scripts knew workers and seen only): one
-- band, in one heartbeat of four
local sweep = now % 20
if sweep < 5 then
  local lo = sweep * BAND
  local stale = redis.call('ZRANGEBYSCORE', states, string.format('%.0f', lo),
    string.format('%.0f', lo + cutoff), 'LIMIT', 0, 100)
  for _, old_id in ipairs(stale) do drop(old_id) end
end
return gone
