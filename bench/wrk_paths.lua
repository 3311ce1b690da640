-- wrk script: each request GETs a random line of the file named by the first script
-- argument (paths with their query string); `done` prints one JSON line with the
-- request count, errors and latency percentiles in microseconds.
local paths = {}
local headers = {}

function init(args)
  local file = assert(io.open(args[1], "r"), "cannot open paths file " .. tostring(args[1]))
  for line in file:lines() do
    if #line > 0 then paths[#paths + 1] = line end
  end
  file:close()
  assert(#paths > 0, "paths file is empty")
  for i = 2, #args do
    local key, value = args[i]:match("^([^:]+):%s*(.*)$")
    if key then headers[key] = value end
  end
  math.randomseed(os.time() + math.floor(os.clock() * 1000000))
end

function request()
  return wrk.format("GET", paths[math.random(#paths)], headers)
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
