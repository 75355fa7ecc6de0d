-- wrk script: the SPECweb99-like URL mix of cmd/loadgen (a directory by
-- Zipf popularity, a class with probability 35/50/14/1 %, a file of the
-- class with SPECweb99's per-file frequencies) over DIRS directories.
--   wrk -s bench/specweb.lua URL -- DIRS
local paths = {}

local function cdf(w)
  local t, s = {}, 0
  for i = 1, #w do s = s + w[i] end
  local acc = 0
  for i = 1, #w do acc = acc + w[i] / s; t[i] = acc end
  return t
end

local function pick(t, r)
  for i = 1, #t do if r <= t[i] then return i end end
  return #t
end

function init(args)
  local dirs = tonumber(args[1] or "20")
  local dw = {}
  for i = 1, dirs do dw[i] = 1 / i end
  local dcdf = dcdf or cdf(dw)
  local ccdf = cdf({0.35, 0.50, 0.14, 0.01})
  local fcdf = cdf({3.9, 5.9, 8.8, 17.7, 35.3, 11.8, 7.1, 5.0, 4.4})
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 100000)
  for i = 1, 20000 do
    local d = pick(dcdf, math.random()) - 1
    local c = pick(ccdf, math.random()) - 1
    local f = pick(fcdf, math.random()) - 1
    paths[i] = string.format("/dir%05d/class%d_%d", d, c, f)
  end
end

local n = 0
function request()
  n = n % #paths + 1
  return wrk.format("GET", paths[n])
end
