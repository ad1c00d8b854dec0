-- Console login throttling: failed logins counted per user name and per client address.
-- KEYS: 1 user counter, 2 address counter (hashes: fails, until), 3 stats (hash)
-- ARGV: 1 mode: 'check' | 'fail' | 'ok', 2 free failures, 3 first lock (ms),
--       4 longest lock (ms), 5 window (ms): counters are forgotten after this much quiet
-- Returns, by mode:
-- check: {wait_ms, ended} — wait_ms > 0 while either counter is locked; ended: how many
--        locks ran out since (each reported once, the caller audits the unlock).
-- fail:  {user_lock_ms, addr_lock_ms} — the lock this failure started on each (0: none).
--        The first `free` failures lock nothing; then each locks for first * 2^(n - free - 1)
--        ms, up to the longest lock.
-- ok:    {ended} — the user's counter is cleared (1 when it was locked: an unlock).
local mode, free = ARGV[1], tonumber(ARGV[2])
local first, longest, window = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()

local function lock_of(key)
  return tonumber(redis.call('HGET', key, 'until') or 0)
end

if mode == 'check' then
  local wait, ended = 0, 0
  for i = 1, 2 do
    local untl = lock_of(KEYS[i])
    if untl > now then
      wait = math.max(wait, untl - now)
    elseif untl > 0 then
      redis.call('HDEL', KEYS[i], 'until')
      ended = ended + 1
    end
  end
  if ended > 0 then redis.call('HINCRBY', KEYS[3], 'unlocks', ended) end
  return {wait, ended}
elseif mode == 'fail' then
  redis.call('HINCRBY', KEYS[3], 'failures', 1)
  local out = {}
  for i = 1, 2 do
    local fails = redis.call('HINCRBY', KEYS[i], 'fails', 1)
    local lock = 0
    if fails > free then
      lock = math.floor(math.min(longest, first * 2 ^ (fails - free - 1)))
      redis.call('HSET', KEYS[i], 'until', now + lock)
      redis.call('HINCRBY', KEYS[3], 'locks', 1)
    end
    redis.call('PEXPIRE', KEYS[i], math.max(window, lock))
    out[i] = lock
  end
  return out
else
  local ended = 0
  if lock_of(KEYS[1]) > 0 then
    ended = 1
    redis.call('HINCRBY', KEYS[3], 'unlocks', 1)
  end
  redis.call('DEL', KEYS[1])
  return {ended}
end
