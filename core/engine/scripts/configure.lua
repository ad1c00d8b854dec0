-- Set or clear queue-wide settings the scripts enforce (`max_running`, `max_pending`,
-- `when_full`, `block_timeout`). A raised or cleared limit may let idle workers fetch again,
-- so wake one if tasks are waiting (the chain wake-up of fetch wakes the next); a raised or
-- lifted `max_pending` moves buffered tasks in and frees blocked producers (room_made).
-- A changed or lifted `rate_limit` / `rate_burst` drops the registration of the executor
-- sleeping until the next token and wakes the idle executors (up to 16) when tasks wait:
-- each fetches once under the new rate (the token state `tat` is kept when the period is
-- the same or the rate is lifted; a new period carries the debt of starts over in it).
-- KEYS: 1 config, 2 wake, 3 ready:high, 4 ready:normal, 5 ready:low, 6 tasks, 7 overflow,
--       8 room, 9 rate
-- ARGV: field, value, field, value, ... ('' clears the field); `rate:<task>` fields are
--       the task-level rate limits (`N/u B`), counted into `task_rates`
-- Returns: how many buffered tasks moved into the ready lists.
-- a worker's start writing its tasks' rate limits as they are stored already: no change
local same = true
for i = 1, #ARGV, 2 do
  if string.sub(ARGV[i], 1, 5) ~= 'rate:' or (redis.call('HGET', KEYS[1], ARGV[i]) or '') ~= ARGV[i + 1] then
    same = false
    break
  end
end
if same then return 0 end
local ready = {high = KEYS[3], normal = KEYS[4], low = KEYS[5]}
local before = tonumber(redis.call('HGET', KEYS[1], 'max_pending'))
local was_full = before ~= nil and pending(ready, KEYS[6], true) >= before  -- producers blocked?
local rate_changed, task_rates = false, false
-- the queue's rate before the change: a debt of starts counted in its period is carried
-- over in the new one (raised from 1/m to 100/s, one start's debt is 10 ms, not 60 s)
local old_t = rate_of(redis.call('HGET', KEYS[1], 'rate_limit'), nil)
for i = 1, #ARGV, 2 do
  if ARGV[i] == 'rate_limit' or ARGV[i] == 'rate_burst' then rate_changed = true end
  if string.sub(ARGV[i], 1, 5) == 'rate:' then  -- a task's rate limit (a worker's start)
    task_rates = true
    local old = redis.call('HGET', KEYS[1], ARGV[i])
    if (old or '') ~= ARGV[i + 1] then rate_changed = true end
  end
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
local cfg = redis.call('HMGET', KEYS[1], 'max_pending', 'when_full')
local moved = room_made({tasks = KEYS[6], ready = ready, overflow = KEYS[7], room = KEYS[8],
  wake = KEYS[2]}, tonumber(cfg[1]), cfg[2], was_full and 1e9 or 0, 1000)
if not cfg[1] and was_full then  -- no limit any more: free every blocked producer
  wake(KEYS[8], 16)
  redis.call('PEXPIRE', KEYS[8], 2000)
end
if task_rates then  -- `task_rates`: how many tasks have one (fetch looks only then)
  local n = 0
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(field, 1, 5) == 'rate:' then n = n + 1 end
  end
  if n > 0 then redis.call('HSET', KEYS[1], 'task_rates', n)
  else redis.call('HDEL', KEYS[1], 'task_rates') end
end
if rate_changed then
  redis.call('HDEL', KEYS[9], 'slot', 'who')
  local new_t = rate_of(redis.call('HGET', KEYS[1], 'rate_limit'), nil)
  local tat = tonumber(redis.call('HGET', KEYS[9], 'tat') or '')
  local now = now_ms()
  if old_t and new_t and new_t ~= old_t and tat and tat > now then
    redis.call('HSET', KEYS[9], 'tat', string.format('%.17g', now + (tat - now) * new_t / old_t))
  end
end
-- a changed running limit per key: the keys parked at the old one take their turn again
-- (one pass over the keys' states: an operator's act, not a fetch's)
local keyed = 0
for i = 1, #ARGV, 2 do
  if ARGV[i] == 'key_concurrency' then keyed = KEYED.unpark(KEYS[6], 'c') end
end
if pending(ready, KEYS[6], true) > 0 then wake(KEYS[2], (rate_changed or keyed > 0) and 16 or 1) end
return moved
