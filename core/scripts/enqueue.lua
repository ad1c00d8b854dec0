-- Enqueue one task, deduplicating by id.
-- KEYS: 1 tasks, 2 ready:high, 3 ready:normal, 4 ready:low, 5 delayed, 6 errors, 7 done,
--       8 wake, 9 cronlast, 10 schedule
-- ARGV: 1 id, 2 payload JSON, 3 priority, 4 delay_ms (0 = now; an absolute eta is turned
--       into a delay by the client), 5 first (0/1), 6 cron entry name ('' = not cron),
--       7 cron tick (ms)
-- Returns: {id, outcome}: outcome is 'added', 'exists', 'moved' (first=1 moved a pending one
--          to the head), 'rerun' (identical task running: it runs once more after it ends)
--          or 'skipped' (this cron tick was enqueued already).
local ready = {high = KEYS[2], normal = KEYS[3], low = KEYS[4]}
local id, payload, prio = ARGV[1], ARGV[2], ARGV[3]
local delay, first = tonumber(ARGV[4]), ARGV[5] == '1'
local now = now_ms()

if ARGV[6] ~= '' then
  local last = tonumber(redis.call('HGET', KEYS[9], ARGV[6]) or '-1')
  if last >= tonumber(ARGV[7]) then return {id, 'skipped'} end
  redis.call('HSET', KEYS[9], ARGV[6], ARGV[7])
end

local meta = load(KEYS[1], id)
if meta then
  local state = meta.state
  if state == 'queued' or state == 'delayed' then
    if not first then return {id, 'exists'} end
    if state == 'queued' then
      redis.call('LREM', ready_list(ready, meta.prio), 1, id)
    else
      redis.call('ZREM', KEYS[5], id)
      meta.due = nil
    end
    meta.state, meta.prio = 'queued', prio
    save(KEYS[1], id, meta, payload)
    redis.call('LPUSH', ready_list(ready, prio), id)
    wake(KEYS[8])
    return {id, 'moved'}
  elseif state == 'running' then
    meta.rerun = 1
    save(KEYS[1], id, meta, payload)
    return {id, 'rerun'}
  end
  -- error or done: the new enqueue replaces the finished record (an enqueue acts as a redo)
  redis.call('ZREM', KEYS[6], id)
  redis.call('ZREM', KEYS[7], id)
end

meta = {state = 'queued', enqueued = now}
if prio ~= 'normal' then meta.prio = prio end
if delay > 0 then
  meta.state, meta.due = 'delayed', now + delay
  save(KEYS[1], id, meta, payload)
  redis.call('ZADD', KEYS[5], now + delay, id)
  wake(KEYS[10])  -- a scheduler may have to wake up sooner than it planned
  return {id, 'added'}
end
save(KEYS[1], id, meta, payload)
if first then
  redis.call('LPUSH', ready_list(ready, prio), id)
else
  redis.call('RPUSH', ready_list(ready, prio), id)
end
wake(KEYS[8])
return {id, 'added'}
