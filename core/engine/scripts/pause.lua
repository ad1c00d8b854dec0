-- Pause or resume a queue; resuming wakes idle workers so they fetch at once.
-- KEYS: 1 paused, 2 wake
-- ARGV: 1 '1' to pause, '0' to resume
-- Returns: 1.
if ARGV[1] == '1' then
  redis.call('SET', KEYS[1], '1')
else
  redis.call('DEL', KEYS[1])
  wake(KEYS[2])
end
return 1
