-- Delete tasks and their records: given ids, or a batch from one list (purge).
-- KEYS: 1 tasks, 2 ready:high, 3 ready:normal, 4 ready:low, 5 delayed, 6 errors, 7 done
-- ARGV: 1 mode: 'ids' (the ids follow from ARGV[3]); 'cancel' (the same, but only tasks
--       still queued or delayed); 'ready', 'delayed' or 'errors' (purge up to ARGV[2] tasks
--       of that list), 2 limit
-- Returns: {deleted, taken}: records deleted, entries taken off a list (purge loops until 0).
--          A running task is never deleted here (its worker holds it; kill it first), nor is
--          an id whose record is gone.
local ready = {high = KEYS[2], normal = KEYS[3], low = KEYS[4]}
local mode, limit = ARGV[1], tonumber(ARGV[2])
local deleted, taken = 0, 0
if mode == 'ids' or mode == 'cancel' then
  for i = 3, #ARGV do
    local id = ARGV[i]
    taken = taken + 1
    local meta = load(KEYS[1], id)
    -- cancel: only a task that has not run yet (queued or delayed); finished ones stay
    if meta and meta.state ~= 'running' and
        (mode == 'ids' or meta.state == 'queued' or meta.state == 'delayed') then
      if meta.state == 'queued' then redis.call('LREM', ready_list(ready, meta.prio), 1, id)
      elseif meta.state == 'delayed' then redis.call('ZREM', KEYS[5], id)
      elseif meta.state == 'error' then redis.call('ZREM', KEYS[6], id)
      elseif meta.state == 'done' then redis.call('ZREM', KEYS[7], id) end
      redis.call('HDEL', KEYS[1], id)
      deleted = deleted + 1
    end
  end
elseif mode == 'ready' then
  for _, prio in ipairs({'high', 'normal', 'low'}) do
    while taken < limit do
      local id = redis.call('LPOP', ready[prio])
      if not id then break end
      taken = taken + 1
      local meta = load(KEYS[1], id)
      if meta and meta.state == 'queued' then
        redis.call('HDEL', KEYS[1], id)
        deleted = deleted + 1
      end
    end
  end
else
  local zset = mode == 'delayed' and KEYS[5] or KEYS[6]
  local want = mode == 'delayed' and 'delayed' or 'error'
  local popped = redis.call('ZPOPMIN', zset, limit)
  taken = #popped / 2
  for i = 1, #popped, 2 do
    local meta = load(KEYS[1], popped[i])
    if meta and meta.state == want then
      redis.call('HDEL', KEYS[1], popped[i])
      deleted = deleted + 1
    end
  end
end
return {deleted, taken}
