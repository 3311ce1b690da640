-- wrk script: POSTs the JSON body in the file named by the first script argument, or,
-- when that file is a template (bench/_prompts.py: "mol-template TURNS ACTIVE START",
-- then head, mid and tail lines), a body of its own per request: head .. session ..
-- mid .. request .. tail, request counting from START and its session as in
-- _prompts.session_of (ACTIVE sessions of TURNS requests at a time, interleaved);
-- the second argument is the request rate per connection (0 or absent: no pacing), with
-- exponential gaps so the connections together send a Poisson stream; further
-- arguments are "Header: value". `done` prints one JSON line like wrk_paths.lua.
local body = ""
local parts = nil
local turns, active, serial = 1, 1, 0
local gap_ms = 0
local headers = {["Content-Type"] = "application/json"}

function init(args)
  local file = assert(io.open(args[1], "r"), "cannot open body file " .. tostring(args[1]))
  body = file:read("*a")
  file:close()
  local t, a, first, head, mid, tail = body:match(
    "^mol%-template (%d+) (%d+) (%d+)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n?$")
  if t then
    parts = {head, mid, tail}
    turns, active, serial = tonumber(t), tonumber(a), tonumber(first)
  end
  local rate = tonumber(args[2] or "0") or 0
  if rate > 0 then gap_ms = 1000 / rate end
  for i = 3, #args do
    local key, value = args[i]:match("^([^:]+):%s*(.*)$")
    if key then headers[key] = value end
  end
  math.randomseed(os.time() + math.floor(os.clock() * 1000000))
end

function request()
  if parts == nil then return wrk.format("POST", nil, headers, body) end
  local n = serial
  serial = serial + 1
  local session = math.floor(n / (active * turns)) * active + n % active
  return wrk.format("POST", nil, headers, parts[1] .. string.format("%d", session) .. parts[2]
    .. string.format("%d", n) .. parts[3])
end

function delay()
  if gap_ms == 0 then return 0 end
  return -math.log(1 - math.random()) * gap_ms
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,' ..
    '"timeout":%d,"p50":%.1f,"p90":%.1f,"p99":%.1f,"max":%.1f,"mean":%.1f}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
