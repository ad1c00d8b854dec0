-- Set or clear a queue-wide setting the scripts enforce (`max_running`); a raised or cleared
-- limit may let idle workers fetch again, so wake one if tasks are waiting (the chain
-- wake-up of fetch wakes the next).
-- KEYS: 1 config, 2 wake, 3 ready:high, 4 ready:normal, 5 ready:low
-- ARGV: 1 field, 2 value ('' clears the field)
-- Returns: 1.
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
for i = 3, 5 do
  if redis.call('LLEN', KEYS[i]) > 0 then wake(KEYS[2]); break end
end
return 1
