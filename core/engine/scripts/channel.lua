-- A channel: publish, acknowledge, subscribe, unsubscribe (Redis in Action 6.5 and 6.6).
-- Every subscriber is a consumer group of the channel's stream and reads every message at
-- its own pace; a message is trimmed once every subscriber has acknowledged it, and one
-- published while nobody subscribes is dropped. A channel holds at most `cap` messages: a
-- publisher finds it full until the slowest subscriber acknowledges.
-- KEYS: 1 messages (stream), 2 meta (hash: cap, published, dropped, last, sub:<name>),
--       3 room (list: wake-up tokens for publishers waiting for room)
-- ARGV: 1 op, then by op:
--       publish:     2 most messages held for this one (the cap, or a file's window),
--                    3 the channel's cap (shown), 4 n, then n field/value pairs
--       ack:         2 subscriber, 3... message ids
--       subscribe:   2 subscriber, 3 where it starts: '$' (new messages) or '0' (all held)
--       unsubscribe: 2 subscriber
-- Returns, by op:
--       publish:     {message id, 'ok'}, {'', 'full'} or {'', 'dropped'} (no subscriber)
--       ack:         {acknowledged, trimmed}
--       subscribe:   1 if the subscriber is new, 0 if it existed (it keeps its place)
--       unsubscribe: {1 if it existed else 0, trimmed}
local op, stream, meta, room = ARGV[1], KEYS[1], KEYS[2], KEYS[3]

local function groups()
  if redis.call('EXISTS', stream) == 0 then return {} end
  local out = {}
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    out[#out + 1] = info
  end
  return out
end

local function split(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return ms, tonumber(seq)
end

local function before(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  if #am ~= #bm then return #am < #bm end -- decimal strings without leading zeros
  if am ~= bm then return am < bm end
  return as < bs
end

-- Trim what every subscriber has acknowledged: below the first entry each one still needs
-- (its oldest unacknowledged one, or the one after the last delivered to it).
local function trim()
  local keep = nil
  local all = groups()
  for _, g in ipairs(all) do
    local first
    if tonumber(g['pending']) > 0 then
      first = redis.call('XPENDING', stream, g['name'])[2]
    else
      local ms, seq = split(g['last-delivered-id'])
      first = ms .. '-' .. string.format('%d', seq + 1)
    end
    if keep == nil or before(first, keep) then keep = first end
  end
  local n
  if keep == nil then
    n = redis.call('XTRIM', stream, 'MAXLEN', 0)
  else
    n = redis.call('XTRIM', stream, 'MINID', keep)
  end
  if n > 0 then wake(room) end
  return n
end

if op == 'publish' then
  if #groups() == 0 then
    redis.call('HINCRBY', meta, 'dropped', 1)
    return {'', 'dropped'}
  end
  if redis.call('XLEN', stream) >= tonumber(ARGV[2]) then return {'', 'full'} end
  local n = tonumber(ARGV[4])
  local id = redis.call('XADD', stream, '*', unpack(ARGV, 5, 4 + 2 * n))
  redis.call('HINCRBY', meta, 'published', 1)
  redis.call('HSET', meta, 'cap', ARGV[3], 'last', now_ms())
  return {id, 'ok'}
elseif op == 'ack' then
  local acked = redis.call('XACK', stream, ARGV[2], unpack(ARGV, 3))
  return {acked, trim()}
elseif op == 'subscribe' then
  for _, g in ipairs(groups()) do
    if g['name'] == ARGV[2] then return 0 end
  end
  redis.call('XGROUP', 'CREATE', stream, ARGV[2], ARGV[3], 'MKSTREAM')
  redis.call('HSET', meta, 'sub:' .. ARGV[2], now_ms())
  return 1
elseif op == 'unsubscribe' then
  local existed = 0
  if redis.call('EXISTS', stream) == 1 then
    existed = redis.call('XGROUP', 'DESTROY', stream, ARGV[2])
  end
  redis.call('HDEL', meta, 'sub:' .. ARGV[2])
  return {existed, trim()}
end
return redis.error_reply('unknown channel op ' .. tostring(op))
