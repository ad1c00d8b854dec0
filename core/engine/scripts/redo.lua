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
local now = now_ms()
local moved = 0
local followed = redis.call('ZCARD', KEYS[7])
for _, id in ipairs(picked_ids(mode, KEYS[2], tonumber(ARGV[4]), 5)) do
  local done, meta = requeue_one(KEYS[1], KEYS[2], ready, id, 'error', now)
  if done then
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
