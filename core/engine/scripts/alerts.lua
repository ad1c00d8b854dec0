-- Alert state: what fires, what was notified, what is being sent; and the alert history.
-- KEYS: 1 the alerts (hash: rule TAB subject -> state JSON), 2 the history (stream, capped)
-- ARGV: 1 mode: 'round' | 'sent'; 2 now (ms; 0: Redis' clock); 3 history cap; then by mode:
--       round: 4 notify (1: a webhook is set), 5 repeat (ms; 0: no reminders), 6 claim (ms
--              a returned notification stays reserved for its sender), then per condition
--              that holds now: rule, subject, value, threshold, for (ms), text
--       sent:  4 field, 5 which ('firing' | 'reminder' | 'resolved'), 6 outcome ('ok' |
--              'failed' | 'skipped'), 7 detail (HTTP status or error)
-- Returns, by mode:
-- round: [field, which, state JSON, ...]: the notifications to send now, each reserved (its
--        `sending` set) so that no other evaluator sends it too; conditions that appear
--        become 'pending' (while `for` runs) or 'firing', ones that are gone 'resolved'
--        (kept until the resolve message is delivered) or are dropped.
-- sent:  1 if the alert was known, 0 if it is gone.
-- State JSON: rule, subject, status ('pending' | 'firing' | 'resolved'), since, fired,
-- resolved, notified (ms of the last delivered firing or reminder; 0: none), sending (ms of
-- the reservation; 0: none), error and failed (the last failed delivery, until one succeeds),
-- logged (the last failure written to the history), value, threshold, for, text.
local mode = ARGV[1]
local now = tonumber(ARGV[2])
if now == 0 then now = now_ms() end
local cap = tonumber(ARGV[3])
local QUIET = 600000

local function log(kind, st, detail)
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', cap, '*', 'kind', kind, 'rule', st.rule,
    'subject', st.subject, 'value', tostring(st.value), 'threshold', tostring(st.threshold),
    'since', tostring(st.since), 'text', st.text or '', 'detail', detail or '')
end

if mode == 'sent' then
  local field, which, outcome = ARGV[4], ARGV[5], ARGV[6]
  local raw = redis.call('HGET', KEYS[1], field)
  if not raw then return 0 end
  local st = cjson.decode(raw)
  st.sending = 0
  if outcome == 'ok' then
    st.error, st.failed, st.logged = '', 0, 0
    log('sent', st, which)
    if which == 'resolved' then
      if st.status == 'resolved' then
        redis.call('HDEL', KEYS[1], field)
        return 1
      end
      st.notified = 0 -- it came back while the resolve message went out: announce it again
    else
      st.notified = now
    end
  elseif outcome == 'failed' then
    st.error, st.failed = which .. ': ' .. ARGV[7], now
    if (st.logged or 0) == 0 or now - st.logged >= QUIET then
      st.logged = now -- a webhook that stays down is logged every 10 minutes, not every round
      log('failed', st, st.error)
    end
    if st.status == 'resolved' and st.notified == 0 then
      redis.call('HDEL', KEYS[1], field) -- never announced, now over: nothing to send
      return 1
    end
  end
  redis.call('HSET', KEYS[1], field, cjson.encode(st))
  return 1
end

local notify, every, claim = ARGV[4] == '1', tonumber(ARGV[5]), tonumber(ARGV[6])
local out = {}
local function free(st)
  return st.sending == 0 or now - st.sending >= claim
end
local function reserve(field, st, which)
  st.sending = now
  out[#out + 1] = field
  out[#out + 1] = which
  out[#out + 1] = cjson.encode(st)
end

local holds = {}
for i = 7, #ARGV, 6 do
  local field = ARGV[i] .. '\t' .. ARGV[i + 1]
  holds[field] = true
  local raw = redis.call('HGET', KEYS[1], field)
  local st = raw and cjson.decode(raw)
  if st and st.status == 'resolved' then
    st.status = 'firing' -- back before its resolve message went out: the receiver never
    st.resolved = 0      -- heard it was over, so it goes on firing without a new message
  elseif not st then
    st = {rule = ARGV[i], subject = ARGV[i + 1], status = 'pending', since = now, fired = 0,
          resolved = 0, notified = 0, sending = 0}
  end
  st.value, st.threshold = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  st['for'], st.text = tonumber(ARGV[i + 4]), ARGV[i + 5]
  if st.status == 'pending' and now - st.since >= st['for'] then
    st.status, st.fired = 'firing', now
    log('firing', st, '')
  end
  if st.status == 'firing' and notify and free(st) then
    if st.notified == 0 then
      reserve(field, st, 'firing')
    elseif every > 0 and now - st.notified >= every then
      reserve(field, st, 'reminder')
    end
  end
  redis.call('HSET', KEYS[1], field, cjson.encode(st))
end

local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local field = all[i]
  if not holds[field] then
    local st = cjson.decode(all[i + 1])
    if st.status == 'firing' then
      st.status, st.resolved = 'resolved', now
      log('resolved', st, '')
    end
    if st.status == 'pending' or not notify then
      redis.call('HDEL', KEYS[1], field) -- never fired, or nobody to tell
    elseif st.notified == 0 and free(st) then
      redis.call('HDEL', KEYS[1], field) -- its firing was never delivered: nothing to resolve
    else
      if st.notified > 0 and free(st) then reserve(field, st, 'resolved') end
      redis.call('HSET', KEYS[1], field, cjson.encode(st))
    end
  end
end
return out
