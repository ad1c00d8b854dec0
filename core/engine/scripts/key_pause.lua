-- Pause (ARGV[1] = '1') or resume ('0') one key of a queue (docs/queue-controls.md,
-- "Per-key limits and fair turns"): its tasks wait, counted, while the other keys run;
-- resumed, it takes its turn again and an idle executor is woken (_keyed.lua).
-- KEYS: 1 tasks (the keyed keys are named after it, in its slot)
-- ARGV: 1 '1' or '0', 2 the key
-- Returns: 1.
return KEYED.pause(KEYS[1], ARGV[2], ARGV[1] == '1')
