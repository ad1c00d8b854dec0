-- Console login throttling: failed logins counted per user name and client address
-- together, per address (any names) and per user name (any addresses).
-- KEYS: 1 the name-and-address counter, 2 the address counter, 3 the name counter
--       (hashes: fails, until), 4 stats (hash)
-- ARGV: 1 mode: 'check' | 'fail' | 'ok', 2 free failures of a name from one address,
--       3 first lock (ms), 4 longest lock (ms), 5 window (ms): counters are forgotten after
--       this much quiet, 6 free failures of an address (any names), 7 free failures of a
--       name (any addresses)
-- Returns, by mode:
-- check: {wait_ms, ended} — wait_ms > 0 while any of the three is locked; ended: how many
--        locks ran out since (each reported once, the caller audits the unlock).
-- fail:  {pair_lock_ms, addr_lock_ms, user_lock_ms} — the lock this failure started on each
--        (0: none). A counter's first free failures lock nothing; then each locks for
--        first * 2^(n - free - 1) ms, up to the longest lock.
-- ok:    {ended} — the name's counters (from this address and from all) are cleared, not
--        the address's; ended: 1 when one of them was locked (an unlock).
local mode = ARGV[1]
local first, longest, window = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local free = {tonumber(ARGV[2]), tonumber(ARGV[6]), tonumber(ARGV[7])}
local now = now_ms()

local function lock_of(key)
  return tonumber(redis.call('HGET', key, 'until') or 0)
end

if mode == 'check' then
  local wait, ended = 0, 0
  for i = 1, 3 do
    local untl = lock_of(KEYS[i])
    if untl > now then
      wait = math.max(wait, untl - now)
    elseif untl > 0 then
      redis.call('HDEL', KEYS[i], 'until')
      ended = ended + 1
    end
  end
  if ended > 0 then redis.call('HINCRBY', KEYS[4], 'unlocks', ended) end
  return {wait, ended}
elseif mode == 'fail' then
  redis.call('HINCRBY', KEYS[4], 'failures', 1)
  local out = {}
  for i = 1, 3 do
    local fails = redis.call('HINCRBY', KEYS[i], 'fails', 1)
    local lock = 0
    if fails > free[i] then
      lock = math.floor(math.min(longest, first * 2 ^ (fails - free[i] - 1)))
      redis.call('HSET', KEYS[i], 'until', now + lock)
      redis.call('HINCRBY', KEYS[4], 'locks', 1)
    end
    redis.call('PEXPIRE', KEYS[i], math.max(window, lock))
    out[i] = lock
  end
  return out
else
  local ended = 0
  for _, i in ipairs({1, 3}) do
    if lock_of(KEYS[i]) > 0 then ended = 1 end
    redis.call('DEL', KEYS[i])
  end
  if ended > 0 then redis.call('HINCRBY', KEYS[4], 'unlocks', 1) end
  return {ended}
end
