-- Put deleted errors back from a trash batch (the console's undo; see trash.lua): each goes
-- back among the queue's errors with its record and failed-at time as they were.
-- KEYS: 1 tasks, 2 errors, 3 the batch's trash hash
-- ARGV: 1 mode: 'ids' (the ids follow from ARGV[3]) or 'all' (up to ARGV[2] of the batch)
--       2 limit
-- Returns: {restored, taken, skipped}: tasks back among the errors; ids given or taken from
--          the batch ('all' loops until 0); skipped: the id has a record again (a task with
--          the same id was enqueued since), so the trashed one stays in the trash.
local tasks, errors, bin = KEYS[1], KEYS[2], KEYS[3]
local ids
if ARGV[1] == 'all' then
  ids = redis.call('HRANDFIELD', bin, tonumber(ARGV[2]))
else
  ids = {}
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local restored, skipped = 0, 0
for _, id in ipairs(ids) do
  local entry = redis.call('HGET', bin, id)
  if entry then
    local tab = string.find(entry, '\t', 1, true)
    if redis.call('HEXISTS', tasks, id) == 1 then
      skipped = skipped + 1
    elseif tab then
      redis.call('HSET', tasks, id, string.sub(entry, tab + 1))
      redis.call('ZADD', errors, tonumber(string.sub(entry, 1, tab - 1)), id)
      redis.call('HDEL', bin, id)
      restored = restored + 1
    end
  end
end
if ARGV[1] == 'all' and skipped == #ids then return {restored, 0, skipped} end
return {restored, #ids, skipped}
