-- Redo failed tasks (back at the tail of their ready list, as requeue.lua does for 'error')
-- and note them in the redo batch's follow set, so the console can show what became of
-- exactly those tasks (running, done, failed again). The set keeps at most ARGV[2] ids and
-- expires after ARGV[1] ms (Redis TTL).
-- KEYS: 1 tasks, 2 errors, 3 ready:high, 4 ready:normal, 5 ready:low, 6 wake, 7 follow set
-- ARGV: 1 follow window (ms), 2 most ids followed, 3 mode: 'ids' (the ids follow from
--       ARGV[5]) or 'oldest' (the oldest ARGV[4] errors), 4 limit
-- Returns: how many tasks were put back. Ids in another state are left alone.
local ready = {high = KEYS[3], normal = KEYS[4], low = KEYS[5]}
local window, most, mode = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local ids
if mode == 'oldest' then
  ids = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[4]) - 1)
else
  ids = {}
  for i = 5, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local now = now_ms()
local moved = 0
local followed = redis.call('ZCARD', KEYS[7])
for _, id in ipairs(ids) do
  local meta, payload = load(KEYS[1], id)
  if meta and meta.state == 'error' and redis.call('ZREM', KEYS[2], id) == 1 then
    meta.state, meta.due, meta.enqueued = 'queued', nil, now
    new_series(meta)
    meta.error, meta.traceback, meta.failed = nil, nil, nil
    meta.redone = (meta.redone or 0) + 1
    push_ready(KEYS[1], ready, id, meta, payload, false)
    moved = moved + 1
    if followed < most then
      followed = followed + redis.call('ZADD', KEYS[7], now, id)
    end
  elseif mode == 'oldest' and not meta then
    redis.call('ZREM', KEYS[2], id)  -- an entry without a record: dropped
  end
end
if moved > 0 then
  wake(KEYS[6])
  redis.call('PEXPIRE', KEYS[7], window)
end
return moved
