-- Delete tasks and their records: given ids, or a batch from one list (purge).
-- KEYS: 1 tasks, 2 ready:high, 3 ready:normal, 4 ready:low, 5 delayed, 6 errors, 7 done,
--       8 config, 9 overflow, 10 room, 11 wake
-- ARGV: 1 mode: 'ids' (the ids follow from ARGV[3]); 'cancel' (the same, but only tasks
--       that have not run: queued, buffered or delayed); 'ready' (the ready lists, then the
--       overflow buffer), 'delayed' or 'errors' (purge up to ARGV[2] tasks of that list),
--       2 limit. Room made in the ready lists is filled from the overflow buffer.
-- Returns: {deleted, taken}: records deleted, entries taken off a list (purge loops until 0).
--          A running task is never deleted here (its worker holds it; kill it first), nor is
--          an id whose record is gone.
local ready = {high = KEYS[2], normal = KEYS[3], low = KEYS[4]}
local mode, limit = ARGV[1], tonumber(ARGV[2])
local deleted, taken = 0, 0
local unready = 0  -- tasks taken off the ready lists: room made for a full queue
if mode == 'ids' or mode == 'cancel' then
  for i = 3, #ARGV do
    local id = ARGV[i]
    taken = taken + 1
    local meta = load(KEYS[1], id)
    -- cancel: only a task that has not run yet (queued or delayed); finished ones stay
    if meta and meta.state ~= 'running' and
        (mode == 'ids' or meta.state == 'queued' or meta.state == 'delayed'
         or meta.state == 'overflow') then
      if meta.state == 'queued' then
        redis.call('LREM', ready_list(ready, meta.prio), 1, id)
        unready = unready + 1
      elseif meta.state == 'overflow' then redis.call('LREM', KEYS[9], 1, id)
      elseif meta.state == 'delayed' then redis.call('ZREM', KEYS[5], id)
      elseif meta.state == 'error' then redis.call('ZREM', KEYS[6], id)
      elseif meta.state == 'done' then redis.call('ZREM', KEYS[7], id) end
      redis.call('HDEL', KEYS[1], id)
      deleted = deleted + 1
    end
  end
elseif mode == 'ready' then
  for _, list in ipairs({ready.high, ready.normal, ready.low, KEYS[9]}) do
    local want = list == KEYS[9] and 'overflow' or 'queued'
    while taken < limit do
      local id = redis.call('LPOP', list)
      if not id then break end
      taken = taken + 1
      if want == 'queued' then unready = unready + 1 end
      local meta = load(KEYS[1], id)
      if meta and meta.state == want then
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
if unready > 0 then
  local cfg = redis.call('HMGET', KEYS[8], 'max_pending', 'when_full')
  room_made({tasks = KEYS[1], ready = ready, overflow = KEYS[9], room = KEYS[10],
    wake = KEYS[11]}, tonumber(cfg[1]), cfg[2], unready, 1000)
end
return {deleted, taken}
