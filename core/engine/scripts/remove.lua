-- Delete tasks and their records: given ids, or a batch from one list (purge).
-- KEYS: 1 tasks, 2 ready:high, 3 ready:normal, 4 ready:low, 5 delayed, 6 errors, 7 done,
--       8 config, 9 overflow, 10 room, 11 wake, 12 batch_out (a deleted batch member that had
--       not ended counts as failed in its batch: docs/batches.md)
-- ARGV: 1 mode: 'ids' (the ids follow from ARGV[3]); 'cancel' (the same, but only tasks
--       that have not run: queued, buffered or delayed); 'ready' (the ready lists, the keys'
--       lists, then the overflow buffer), 'delayed' or 'errors' (purge up to ARGV[2] tasks of
--       that list), 2 limit, 3 ('ready' only) how many leftovers a call may drop at most.
--       Room made in the ready lists is filled from the overflow buffer.
-- Returns: {deleted, taken, dropped}: records deleted; ids given, or tasks taken off a list
--          (purge loops until 0); leftovers dropped ('ready': a purge drops the leftovers it
--          meets without counting them as tasks, and stops at the limit of tasks or of
--          leftovers, whichever comes first, so taken = 0 and dropped = that limit means go
--          on). A running task is never deleted here (its worker holds it; kill it first),
--          nor is an id whose record is gone.
local ready = {high = KEYS[2], normal = KEYS[3], low = KEYS[4]}
local mode, limit = ARGV[1], tonumber(ARGV[2])
local deleted, taken, dropped = 0, 0, 0
-- a member deleted before it ended is an end (failed); one in the error list ended already
-- (the same fence: the relay ignores it), one done stays done
local function gone_member(id, meta)
  if meta.batch and meta.state ~= 'done' then
    member_end(KEYS[12], meta.batch, id, 'failed', meta.fence or '0', '')
  end
end
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
      -- a waiting task's entry stays in its list, marked as a leftover (no LREM: _lib.lua)
      if meta.state == 'queued' then
        leave(KEYS[1], level_of(meta.prio), id, meta)
        unready = unready + 1
      elseif meta.state == 'overflow' then leave(KEYS[1], 'overflow', id, meta)
      elseif meta.state == 'delayed' then redis.call('ZREM', KEYS[5], id)
      elseif meta.state == 'error' then
        local at = redis.call('ZSCORE', KEYS[6], id)
        if at then err_leave(KEYS[1], KEYS[6], id, meta, at) end  -- the counters (_lib.lua)
        redis.call('ZREM', KEYS[6], id)
      elseif meta.state == 'done' or meta.state == 'expired' then
        redis.call('ZREM', KEYS[7], id)
      end
      gone_member(id, meta)
      redis.call('HDEL', KEYS[1], id)
      deleted = deleted + 1
    end
  end
elseif mode == 'ready' then
  -- Each live task is taken once, whatever form its entry has (`id`, or `id#n` after a move
  -- or a re-add); a leftover (or an entry whose record is gone) is dropped, not counted:
  -- the caller compares `taken` with the tasks it counted (LLEN - leftovers).
  local most = tonumber(ARGV[3]) or 1000
  for _, name in ipairs({'high', 'normal', 'low', 'overflow'}) do
    local list = name == 'overflow' and KEYS[9] or ready[name]
    local want = name == 'overflow' and 'overflow' or 'queued'
    local marked = redis.call('HEXISTS', KEYS[1], '#' .. name) == 1
    while taken < limit and dropped < most do
      local entry = redis.call('LPOP', list)
      if not entry then break end
      local id, meta = popped(KEYS[1], name, entry, want, marked)
      if id then
        gone_member(id, meta)
        if want == 'queued' then unready = unready + 1 end
        redis.call('HDEL', KEYS[1], id)
        deleted = deleted + 1
        taken = taken + 1
      else
        dropped = dropped + 1
      end
    end
    if name == 'low' then  -- the keys' lists (_keyed.lua) come before the overflow buffer
      local n = {taken = taken, dropped = dropped, limit = limit, most = most}
      KEYED.purge(KEYS[1], n, function(id, meta)
        gone_member(id, meta)
        unready = unready + 1
        redis.call('HDEL', KEYS[1], id)
        deleted = deleted + 1
      end)
      taken, dropped = n.taken, n.dropped
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
      if want == 'error' then err_leave(KEYS[1], KEYS[6], popped[i], meta, popped[i + 1]) end
      gone_member(popped[i], meta)
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
return {deleted, taken, dropped}
