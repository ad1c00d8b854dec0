-- Enqueue tasks of one queue, deduplicating each by id (one task, or a batch of them).
-- KEYS: 1 tasks, 2 ready:high, 3 ready:normal, 4 ready:low, 5 delayed, 6 errors, 7 done,
--       8 wake, 9 cronlast, 10 schedule
-- ARGV: 7 fields per task: id, payload JSON, priority, delay_ms (0 = now; an absolute eta is
--       turned into a delay by the client), first (0/1), cron entry name ('' = not cron),
--       cron tick (ms)
-- Returns: {id, outcome, id, outcome, ...}: outcome is 'added', 'exists', 'moved' (first=1
--          moved a pending one to the head), 'rerun' (identical task running: it runs once
--          more after it ends) or 'skipped' (this cron tick was enqueued already).
local ready = {high = KEYS[2], normal = KEYS[3], low = KEYS[4]}
local now = now_ms()

local function enqueue(id, payload, prio, delay, first, cron_name, cron_tick)
  if cron_name ~= '' then
    local last = tonumber(redis.call('HGET', KEYS[9], cron_name) or '-1')
    if last >= tonumber(cron_tick) then return 'skipped' end
    redis.call('HSET', KEYS[9], cron_name, cron_tick)
  end

  local meta = load(KEYS[1], id)
  if meta then
    local state = meta.state
    if state == 'queued' or state == 'delayed' then
      if not first then return 'exists' end
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
      return 'moved'
    elseif state == 'running' then
      meta.rerun = 1
      save(KEYS[1], id, meta, payload)
      return 'rerun'
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
    return 'added'
  end
  save(KEYS[1], id, meta, payload)
  if first then
    redis.call('LPUSH', ready_list(ready, prio), id)
  else
    redis.call('RPUSH', ready_list(ready, prio), id)
  end
  wake(KEYS[8])
  return 'added'
end

local out = {}
for i = 1, #ARGV, 7 do
  local id = ARGV[i]
  out[#out + 1] = id
  out[#out + 1] = enqueue(id, ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]),
    ARGV[i + 4] == '1', ARGV[i + 5], ARGV[i + 6])
end
return out
