-- Forget one worker (the console's "forget a lost worker", a worker's clean exit).
-- KEYS: 1 workers, 2 seen, 3 the worker's command list
-- ARGV: 1 worker id
-- Returns: 1 if the worker was known.
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
