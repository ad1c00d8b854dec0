-- Store a worker's heartbeat and forget workers silent for longer than the retention.
-- KEYS: 1 workers (hash id -> heartbeat JSON), 2 seen (zset id -> last report ms)
-- ARGV: 1 worker id, 2 heartbeat JSON, 3 retention ms
-- Returns: the ids forgotten now (for the event log).
local now = now_ms()
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now, ARGV[1])
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]), 'LIMIT', 0, 100)
for _, id in ipairs(gone) do
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
return gone
