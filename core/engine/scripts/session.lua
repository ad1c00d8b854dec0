-- Console sessions: one hash per session, an index of the live ones for the sessions page.
-- KEYS: 1 the session (hash: user, role, grant, via, ip, ua, created, seen, data),
--       2 the index (zset: handle -> deadline ms)
-- ARGV: 1 mode: 'open' | 'touch' | 'save' | 'end', 2 handle, 3 idle timeout (ms),
--       4 absolute timeout (ms); then by mode:
--       open:  field, value, ... (user, role, grant, via, ip, ua)
--       touch: 5 client address, 6 least ms between two writes of 'seen'
--       save:  5 the session's data (JSON)
-- Returns, by mode:
-- open:  the creation time (ms). Index entries past their deadline are dropped.
-- touch: the session's fields as a flat list with 'now' appended, or false when it does not
--        exist or ran past its idle or absolute deadline (then it is deleted). 'seen' and the
--        address are written at most once per ARGV[6] ms, so a polling page costs a read.
-- save:  1 if stored, 0 if the session has ended.
-- end:   1 if the session existed.
local mode, handle = ARGV[1], ARGV[2]
local idle, absolute = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()

local function deadline(created, seen)
  return math.min(seen + idle, created + absolute)
end

if mode == 'open' then
  redis.call('HSET', KEYS[1], 'created', now, 'seen', now, unpack(ARGV, 5))
  local until_ms = deadline(now, now)
  redis.call('PEXPIREAT', KEYS[1], until_ms)
  redis.call('ZADD', KEYS[2], until_ms, handle)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  return now
elseif mode == 'touch' then
  local times = redis.call('HMGET', KEYS[1], 'created', 'seen')
  local created, seen = tonumber(times[1]), tonumber(times[2])
  if not created or not seen or deadline(created, seen) <= now then
    redis.call('DEL', KEYS[1])
    redis.call('ZREM', KEYS[2], handle)
    return false
  end
  if now - seen >= tonumber(ARGV[6]) then
    redis.call('HSET', KEYS[1], 'seen', now, 'ip', ARGV[5])
    local until_ms = deadline(created, now)
    redis.call('PEXPIREAT', KEYS[1], until_ms)
    redis.call('ZADD', KEYS[2], until_ms, handle)
  end
  local fields = redis.call('HGETALL', KEYS[1])
  fields[#fields + 1] = 'now'
  fields[#fields + 1] = now
  return fields
elseif mode == 'save' then
  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  redis.call('HSET', KEYS[1], 'data', ARGV[5])
  return 1
else
  redis.call('ZREM', KEYS[2], handle)
  return redis.call('DEL', KEYS[1])
end
