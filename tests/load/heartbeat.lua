-- heartbeat.lua - wrk script: POST /v1/agent/heartbeat at full rate, round
-- robin over node tokens read from a file (one a line; the load
-- generator's --tokens-out writes the idle nodes'), each heartbeat
-- {"state":"idle"} as an idle agent sends it.  Prints one JSON line at the
-- end ({"bench":"load-wrk",...}); latencies in ms.
-- usage: wrk -t2 -c32 -d20s --latency -s tests/load/heartbeat.lua URL -- TOKENS_FILE

local threads = {}
local next_id = 0

function setup(thread)
   thread:set("id", next_id)
   next_id = next_id + 1
   table.insert(threads, thread)
end

local tokens = {}
local i = 0
local body = '{"state":"idle"}'

function init(args)
   local path = args[1]
   if not path then
      error("heartbeat.lua needs the tokens file: wrk ... -s heartbeat.lua URL -- TOKENS_FILE")
   end
   for line in io.lines(path) do
      if #line > 0 then
         tokens[#tokens + 1] = line
      end
   end
   if #tokens == 0 then
      error("no tokens in " .. path)
   end
   -- Threads start at different places in the list.
   i = (id * 7919) % #tokens
end

function request()
   i = i % #tokens + 1
   return wrk.format("POST", "/v1/agent/heartbeat",
                     { ["Authorization"] = "Bearer " .. tokens[i],
                       ["Content-Type"] = "application/json" }, body)
end

function done(summary, latency, requests)
   local e = summary.errors
   local s = summary.duration / 1e6
   io.write(string.format(
      '{"bench":"load-wrk","requests":%d,"duration_s":%.2f,"rps":%.1f,' ..
      '"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
      summary.requests, s, summary.requests / s,
      latency:percentile(50) / 1000, latency:percentile(90) / 1000,
      latency:percentile(99) / 1000, latency.max / 1000,
      e.connect, e.read, e.write, e.status, e.timeout))
end
