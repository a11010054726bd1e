-- wrk script for bench/perf: POSTs one fixed body and prints a JSON summary.
--   BENCH_BODY=body-1k.json BENCH_PATH=/v1/completions BENCH_RESPONSE=json-1k.json \
--     wrk -t1 -c16 -d5s -s post.lua http://127.0.0.1:18410
-- X-Bench-Response tells the upstream nginx which fixed response to send;
-- every proxy forwards it unchanged.
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
local body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.path = os.getenv("BENCH_PATH") or "/v1/completions"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Bench-Response"] = os.getenv("BENCH_RESPONSE")

local bad = 0
function response(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors_connect":%d,"errors_read":%d,"errors_write":%d,"errors_status":%d,' ..
    '"errors_timeout":%d,"lat_mean_us":%.1f,"lat_p50_us":%d,"lat_p90_us":%d,' ..
    '"lat_p99_us":%d,"lat_max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
