-- Queue a command for a worker; commands for a worker that never reads them expire.
-- KEYS: 1 the worker's command list, 2 seen (zset of known workers)
-- ARGV: 1 worker id, 2 command JSON, 3 ttl ms
-- Returns: 1 if queued, 0 if no such worker is known.
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
