-- A worker joins, keeps up or leaves the listeners of a queue's broadcasts.
-- KEYS: 1 listeners (zset: worker -> presence deadline ms), 2 listeners:joined (hash:
--       worker -> the newest broadcast when it joined: it runs only later ones),
--       3 broadcasts (stream)
-- ARGV: 1 'join' | 'beat' | 'leave', 2 worker id, 3 presence (ms: how long the worker counts
--       as live without another beat), 4 retention (ms: listeners silent this long are
--       forgotten, at most 100 per join)
-- Returns: join: {id of the newest broadcast ('0-0' when none), now (ms)}: the worker runs
--          the broadcasts after that id (its own position from then on, kept in the worker);
--          beat: 1; leave: 1 if the worker was a listener.
local op, worker = ARGV[1], ARGV[2]
local now = now_ms()
if op == 'leave' then
  redis.call('HDEL', KEYS[2], worker)
  return redis.call('ZREM', KEYS[1], worker)
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), worker)
local function newest()
  local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  return last[1] and last[1][1] or '0-0'
end
if op == 'beat' then -- forgotten meanwhile (a Redis without persistence restarted): again
  if redis.call('HEXISTS', KEYS[2], worker) == 0 then redis.call('HSET', KEYS[2], worker, newest()) end
  return 1
end
local position = newest()
redis.call('HSET', KEYS[2], worker, position)
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[4]), 'LIMIT', 0, 100)
for _, w in ipairs(old) do
  redis.call('ZREM', KEYS[1], w)
  redis.call('HDEL', KEYS[2], w)
end
return {position, now}
