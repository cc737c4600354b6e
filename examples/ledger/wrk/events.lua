-- wrk script for the ledger's POST /v1/events: every event is sent 1 to 3 times (a random number)
-- with the same event_id and body, one copy after the other from the thread's connections, so that
-- copies of one event are often in flight at once. Event ids are <prefix>-<thread>-<n> (prefix: the
-- first argument after --); account and amount are functions of thread and n, so that a checker
-- can compute every balance from the ids stored (see run.sh):
--   account_id   = "acct-" .. (thread * 7919 + n) % 100
--   amount_cents = (thread * 31 + n) % 997 + 1
-- done() prints the 202 (new event), 200 (copy) and other answers, counted by response().

local threads = {}
local counter = 1

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  prefix = args[1] or "w"
  n, left, body = 0, 0, nil
  accepted, duplicate, other = 0, 0, 0
  math.randomseed(tid * 7919)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  if left == 0 then
    n = n + 1
    left = math.random(1, 3)
    local id = prefix .. "-" .. tid .. "-" .. n
    body = string.format(
      '{"event_id":"%s","order_id":"ord-%s","account_id":"acct-%d","amount_cents":%d,"occurred_at":"2026-11-24T10:00:00Z"}',
      id, id, (tid * 7919 + n) % 100, (tid * 31 + n) % 997 + 1)
  end
  left = left - 1
  return wrk.format("POST", "/v1/events", nil, body)
end

function response(status, headers, body)
  if status == 202 then
    accepted = accepted + 1
  elseif status == 200 then
    duplicate = duplicate + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local a, d, o, e = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    a = a + t:get("accepted")
    d = d + t:get("duplicate")
    o = o + t:get("other")
    e = e + t:get("n")
  end
  io.write(string.format("result requests_per_s=%.0f p50_ms=%.2f p99_ms=%.2f accepted_202=%d duplicate_200=%d other=%d events_started=%d socket_errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    a, d, o, e, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
