-- Delete failed tasks into the queue's trash, where an operator may restore them for a while
-- (the console's delete; docs/console.md, "Undo"). A batch is one delete: its records go to
-- a hash of their own that expires with the trash window (Redis TTL), listed in the queue's
-- trash index. The trash is bounded: a batch keeps at most ARGV[3] tasks, a queue at most
-- ARGV[4] batches (a new one drops the oldest); past that, a delete deletes for good.
-- KEYS: 1 tasks, 2 errors, 3 this batch's trash hash, 4 the queue's trash index,
--       5 the oldest batch's trash hash as the caller read the index (dropped if full)
-- ARGV: 1 batch, 2 window (ms), 3 most tasks a batch keeps, 4 most batches a queue keeps,
--       5 the oldest batch's name (KEYS[5]'s), 6 mode: 'ids' (the ids follow from ARGV[8]) or
--       'oldest' (the oldest ARGV[7] entries of the errors), 7 limit; a mode ending in '!'
--       ('ids!', 'oldest!') deletes only what the trash keeps: it stops at the first task
--       the trash has no room for (an operator who did not confirm a delete for good)
-- Returns: {deleted, taken, kept}: records deleted; ids given or entries taken off the
--          errors ('oldest' loops until 0); of the deleted, how many the trash keeps.
local tasks, errors, bin, index = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local batch, window = ARGV[1], tonumber(ARGV[2])
local most, bins, mode = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[6]
local strict = string.sub(mode, -1) == '!'
if strict then mode = string.sub(mode, 1, -2) end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)  -- their hashes expired already
local room = true
local expires = tonumber(redis.call('ZSCORE', index, batch))
if not expires then
  if redis.call('ZCARD', index) >= bins then
    local oldest = redis.call('ZRANGE', index, 0, 0)[1]
    if oldest == ARGV[5] then
      redis.call('DEL', KEYS[5])
      redis.call('ZREM', index, oldest)
    else
      room = false  -- the index changed since the caller read it: no trash this time
    end
  end
  if room then
    expires = now + window
    redis.call('ZADD', index, expires, batch)
  end
end
local ids
if mode == 'oldest' then
  ids = redis.call('ZRANGE', errors, 0, tonumber(ARGV[7]) - 1)
else
  ids = {}
  for i = 8, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local held = room and redis.call('HLEN', bin) or most
local deleted, kept, taken = 0, 0, 0
for _, id in ipairs(ids) do
  if strict and held >= most then break end
  taken = taken + 1
  local at = redis.call('ZSCORE', errors, id)
  local raw = redis.call('HGET', tasks, id)
  local meta = decode(raw)
  if at and meta and meta.state == 'error' then
    err_leave(tasks, errors, id, meta, at)  -- the exact counters (_lib.lua)
    redis.call('ZREM', errors, id)
    redis.call('HDEL', tasks, id)
    deleted = deleted + 1
    if held < most then
      redis.call('HSET', bin, id, at .. '\t' .. raw)
      held, kept = held + 1, kept + 1
    end
  elseif at and mode == 'oldest' then
    redis.call('ZREM', errors, id)  -- an entry without an error record: dropped
  end
end
if kept > 0 then
  redis.call('PEXPIREAT', bin, expires)
  local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', index, last[2])
end
return {deleted, taken, kept}
