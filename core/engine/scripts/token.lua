-- Console API tokens: one hash per token (its secret only as a digest), an index by expiry.
-- KEYS: 1 the token (hash: name, role, digest, created, expires, used), 2 the index (zset:
--       token id -> expiry ms)
-- ARGV: 1 mode: 'create' | 'use' | 'revoke', 2 token id; then by mode:
--       create: 3 lifetime (ms), then field, value, ... (name, role, digest)
--       use:    3 least ms between two writes of 'used'
-- Returns, by mode:
-- create: the expiry (ms); expired index entries are dropped.
-- use:    1 if 'used' was written now, 0 if it was fresh enough or the token is gone.
-- revoke: 1 if the token existed.
local mode, id = ARGV[1], ARGV[2]
local now = now_ms()

if mode == 'create' then
  local expires = now + tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'created', now, 'expires', expires, 'used', 0, unpack(ARGV, 4))
  redis.call('PEXPIREAT', KEYS[1], expires)
  redis.call('ZADD', KEYS[2], expires, id)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  return expires
elseif mode == 'use' then
  local used = redis.call('HGET', KEYS[1], 'used')
  if not used or now - tonumber(used) < tonumber(ARGV[3]) then return 0 end
  redis.call('HSET', KEYS[1], 'used', now)
  return 1
else
  redis.call('ZREM', KEYS[2], id)
  return redis.call('DEL', KEYS[1])
end
