-- Forget a queue that holds nothing (`ztq queue forget`, the console's "Forget this queue"):
-- check that every list of live tasks is empty and delete the queue's keys in one step, so
-- that no task enqueued meanwhile is deleted with them. The caller has checked that no
-- worker serves the queue, and takes it out of the registry (another slot) after this.
-- KEYS: 1..ARGV[1] what must be empty (ready high/normal/low, delayed, running, errors,
--       trash index, overflow, hand, batch outbox: keys.py forget_checked), then the keys
--       deleted with them (tasks hash, settings, stats: keys.py forget_deleted)
-- ARGV: 1 how many KEYS are checked, then a word for each ('ready', 'delayed', ...)
-- Returns: '' when forgotten, else what the queue holds ('<n> <word>', the first found).
local checked = tonumber(ARGV[1])

local function size(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'list' then return redis.call('LLEN', key) end
  if kind == 'zset' then return redis.call('ZCARD', key) end
  if kind == 'set' then return redis.call('SCARD', key) end
  if kind == 'hash' then return redis.call('HLEN', key) end
  if kind == 'none' then return 0 end
  return 1
end

for i = 1, checked do
  local n = size(KEYS[i])
  if n > 0 then
    return n .. ' ' .. ARGV[i + 1]
  end
end
for i = 1, #KEYS, 200 do  -- DEL takes the keys in slices: unpack has a limit
  redis.call('DEL', unpack(KEYS, i, math.min(i + 199, #KEYS)))
end
return ''
