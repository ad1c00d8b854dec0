-- Put deleted errors back from a trash batch (the console's undo; see trash.lua): each goes
-- back among the queue's errors with its record and failed-at time as they were.
-- KEYS: 1 tasks, 2 errors, 3 the batch's trash hash
-- ARGV: 1 mode: 'ids' (the only one), then the ids from ARGV[2] (a whole batch: the caller
--       walks the hash with HSCAN and sends its ids in chunks, see QueueAdmin.restore_errors)
-- Returns: {restored, taken, skipped}: tasks back among the errors; ids given; skipped: the
--          id has a record again (a task with the same id was enqueued since), so the
--          trashed one stays in the trash. An id no longer in the batch counts in neither.
local tasks, errors, bin = KEYS[1], KEYS[2], KEYS[3]
if ARGV[1] ~= 'ids' then return redis.error_reply('ERR restore: unknown mode') end
local restored, skipped = 0, 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local entry = redis.call('HGET', bin, id)
  if entry then
    local tab = string.find(entry, '\t', 1, true)
    if redis.call('HEXISTS', tasks, id) == 1 then
      skipped = skipped + 1
    elseif tab then
      local raw, at = string.sub(entry, tab + 1), tonumber(string.sub(entry, 1, tab - 1))
      local meta = decode(raw)
      if meta.state == 'error' then err_enter(tasks, errors, id, meta, at, false) end
      redis.call('HSET', tasks, id, raw)
      redis.call('ZADD', errors, at, id)
      redis.call('HDEL', bin, id)
      restored = restored + 1
    end
  end
end
return {restored, #ARGV - 1, skipped}
