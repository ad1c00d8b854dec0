-- Send a broadcast: a task to run once on every worker that reads the queue's broadcasts.
-- KEYS: 1 broadcasts (stream), 2 listeners (zset: worker -> presence deadline ms),
--       3 this broadcast's record (hash)
-- ARGV: 1 broadcast id, 2 task name, 3 payload JSON, 4 record TTL (ms), 5 stream cap
-- Returns: {stream entry id, sent (ms), worker id, ...}: the workers it is meant for, the
--          listeners whose presence has not run out, in worker id order. Each reads the stream from where it
--          joined, so every live one runs it; one that joins later starts after it.
local now = now_ms()
local targets = redis.call('ZRANGEBYSCORE', KEYS[2], now, '+inf')
table.sort(targets)  -- by id: presence deadlines order them by who renewed last
local entry = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], '*',
  'id', ARGV[1], 'task', ARGV[2], 'payload', ARGV[3], 'sent', now)
redis.call('HSET', KEYS[3], 'sent', now, 'entry', entry, 'task', ARGV[2],
  'targets', table.concat(targets, '\n'))
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[4]))
local out = {entry, now}
for _, w in ipairs(targets) do out[#out + 1] = w end
return out
