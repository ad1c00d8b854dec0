-- Put failed or delayed tasks back at the tail of their ready list (redo / run now).
-- KEYS: 1 tasks, 2 source zset (errors or delayed), 3 ready:high, 4 ready:normal,
--       5 ready:low, 6 wake
-- ARGV: 1 state the tasks must be in ('error' or 'delayed'), 2 mode: 'ids' (the ids follow
--       from ARGV[4]) or 'oldest' (the oldest ARGV[3] entries of the source), 3 limit
-- Returns: how many tasks were moved. Ids in another state are left alone.
local ready = {high = KEYS[3], normal = KEYS[4], low = KEYS[5]}
local want, mode, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ids
if mode == 'oldest' then
  ids = redis.call('ZRANGE', KEYS[2], 0, limit - 1)
else
  ids = {}
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local now = now_ms()
local moved = 0
for _, id in ipairs(ids) do
  local meta, payload = load(KEYS[1], id)
  if meta and meta.state == want and redis.call('ZREM', KEYS[2], id) == 1 then
    meta.state, meta.due, meta.enqueued = 'queued', nil, now
    if want == 'error' then
      new_series(meta)
      meta.error, meta.traceback, meta.failed = nil, nil, nil
      meta.redone = (meta.redone or 0) + 1
    end
    push_ready(KEYS[1], ready, id, meta, payload, false)
    moved = moved + 1
  end
end
if moved > 0 then wake(KEYS[6]) end
return moved
