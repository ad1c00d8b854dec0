-- Put failed or delayed tasks back at the tail of their ready list (redo / run now).
-- KEYS: 1 tasks, 2 source zset (errors or delayed), 3 ready:high, 4 ready:normal,
--       5 ready:low, 6 wake
-- ARGV: 1 state the tasks must be in ('error' or 'delayed'), 2 mode: 'ids' (the ids follow
--       from ARGV[4]) or 'oldest' (the oldest ARGV[3] entries of the source), 3 limit
-- Returns: how many tasks were moved. Ids in another state are left alone.
local ready = {high = KEYS[3], normal = KEYS[4], low = KEYS[5]}
local want, mode, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local moved = 0
for _, id in ipairs(picked_ids(mode, KEYS[2], limit, 4)) do
  if requeue_one(KEYS[1], KEYS[2], ready, id, want, now) then moved = moved + 1 end
end
if moved > 0 then wake(KEYS[6]) end
return moved
